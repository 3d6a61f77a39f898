package opcli

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/client/leaserun"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// Exit statuses (see the package documentation).
const (
	ExitOK          = 0
	ExitFailed      = 1
	ExitNoLease     = 1
	ExitUsage       = leaserun.ExitUsage
	ExitUnavailable = leaserun.ExitUnavailable
	ExitNotReleased = leaserun.ExitLost
	ExitHeld        = leaserun.ExitHeld
	ExitNoPerm      = leaserun.ExitNoPerm
	ExitUndeclared  = leaserun.ExitUndeclared
)

// exitError is a failure with the exit status it calls for.
type exitError struct {
	code int
	err  error
	// told: stdout has said it already (a model outcome such as "held"),
	// so nothing more goes to stderr.
	told bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, format string, a ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, a...)}
}

// exitCode is the status err calls for: its own when it has one, else the
// one its leasecore outcome maps to.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, leasecore.ErrUnavailable):
		return ExitUnavailable
	case errors.Is(err, leasecore.ErrHeld):
		return ExitHeld
	case errors.Is(err, leasecore.ErrUndeclared):
		return ExitUndeclared
	case errors.Is(err, leasecore.ErrReserved), errors.Is(err, leasecore.ErrForbidden):
		return ExitNoPerm
	case errors.Is(err, leasecore.ErrInvalid):
		return ExitUsage
	default:
		return ExitFailed
	}
}

// message is err as the operator reads it: any credential masked, and any
// character that is not printable escaped (a sidecar's or a store's text
// may carry terminal escape sequences; see escapeControls).
func message(err error) string { return escapeControls(storeurl.Redact(err.Error())) }
