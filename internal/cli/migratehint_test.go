package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/leasecore"
)

// MigrateHint adds the remedy to the errors a migration fixes, keeps them
// what they were for errors.Is and errors.As, and leaves others alone.
func TestMigrateHint(t *testing.T) {
	t.Parallel()
	call := func(err error) func(context.Context) error { return func(context.Context) error { return err } }
	for _, cause := range []error{leasecore.ErrSchemaMissing, leasecore.ErrSchemaBehind} {
		driverErr := leasecore.Unavailable("claim", fmt.Errorf("%w (detail)", cause))
		err := MigrateHint(t.Context(), leasecore.OpClaim, call(driverErr))
		if !strings.HasSuffix(err.Error(), ": "+migrateHintText) || !strings.HasPrefix(err.Error(), driverErr.Error()) {
			t.Errorf("hinted %q, want %q then the hint", err, driverErr)
		}
		var ue *leasecore.UnavailableError
		if !errors.Is(err, cause) || !errors.As(err, &ue) || ue.Op != "claim" {
			t.Errorf("hinted %v is no longer an unavailable %v of claim", err, cause)
		}
		if got := leasecore.Unavailable("claim", err); got != err { //nolint:errorlint // the same value, not a match
			t.Errorf("leasecore.Unavailable rewrapped the hinted error: %v", got)
		}
	}
	other := leasecore.Unavailable("claim", errors.New("connection refused"))
	if err := MigrateHint(t.Context(), leasecore.OpClaim, call(other)); err != other { //nolint:errorlint // the same value
		t.Errorf("an error no migration fixes became %v", err)
	}
	if err := MigrateHint(t.Context(), leasecore.OpClaim, call(nil)); err != nil {
		t.Errorf("success became %v", err)
	}
}
