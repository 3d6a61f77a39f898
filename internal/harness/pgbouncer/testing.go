package pgbouncer

import (
	"errors"
	"os"
	"testing"
)

// StartT is Start for a test: PgBouncer stops when t ends (its output is
// logged if t failed). Without PgBouncer installed t skips, or fails when
// CI is set: in CI nothing may skip.
func StartT(t testing.TB, serverURL string, cfg Config) *Bouncer {
	t.Helper()
	b, err := Start(serverURL, cfg)
	if errors.Is(err, ErrNotInstalled) {
		if os.Getenv("CI") != "" {
			t.Fatal(err.Error() + " (CI is set, so this is a failure, not a skip)")
		}
		t.Skip(err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer output:\n%s", b.Logs())
		}
		b.Stop()
	})
	return b
}
