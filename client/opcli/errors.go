package opcli

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// The exit statuses are exitcode's, the binary's one table (see the
// package documentation); this file only says which message goes with an
// error.

// toldError is a failure stdout has said already (a model outcome such as
// "held"), so nothing more goes to stderr.
type toldError struct{ err error }

func (e *toldError) Error() string { return e.err.Error() }
func (e *toldError) Unwrap() error { return e.err }

// told is err with the exit status code, already said on stdout.
func told(code int, err error) error { return &toldError{exitcode.With(code, err)} }

// withCode is a new error with the exit status code.
func withCode(code int, format string, a ...any) error {
	return exitcode.With(code, fmt.Errorf(format, a...))
}

// reworded is err in the operator's words: msg is its message, and its
// chain is err's, so exitcode.Of finds the outcome behind it.
type reworded struct {
	msg string
	err error
}

func (e *reworded) Error() string { return e.msg }
func (e *reworded) Unwrap() error { return e.err }

// storeWords is err, of a verb on a store (--store), in the operator's
// words: a store failure says "lease store unavailable: DETAIL" without
// the operation's name ("list: …"), which the verb's own prefix
// ("leasehold list: ") says already.
func storeWords(err error) error {
	var ue *leasecore.UnavailableError
	if errors.As(err, &ue) && err.Error() == ue.Error() {
		return &reworded{"lease store unavailable: " + ue.Err.Error(), err}
	}
	return err
}

// isTold reports whether err was said on stdout already.
func isTold(err error) bool {
	var t *toldError
	return errors.As(err, &t)
}

// message is err as the operator reads it: any credential masked, and any
// character that is not printable escaped (a sidecar's or a store's text
// may carry terminal escape sequences; see escapeControls).
func message(err error) string { return escapeControls(storeurl.Redact(err.Error())) }
