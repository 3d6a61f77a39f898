package cli

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold/leasecore"
)

// migrateHintText is what an operator is told to do about a store whose
// schema is missing or older than this build.
const migrateHintText = "run `leasehold migrate --store URL` to create or upgrade it"

// MigrateHint is a leasecore.Interceptor for the commands that use a store
// (leasehold serve, leasehold run --store): a store error that a migration
// fixes (leasecore.ErrSchemaMissing, leasecore.ErrSchemaBehind) says how to
// run one. leasecore names the cause; the command, which knows its own
// verbs, adds the remedy.
func MigrateHint(ctx context.Context, _ string, call func(context.Context) error) error {
	err := call(ctx)
	if errors.Is(err, leasecore.ErrSchemaMissing) || errors.Is(err, leasecore.ErrSchemaBehind) {
		return &hintError{err: err, hint: migrateHintText}
	}
	return err
}

// hintError is err with a remedy after its text; errors.Is and errors.As
// see err (an *UnavailableError stays one).
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + ": " + e.hint }
func (e *hintError) Unwrap() error { return e.err }
