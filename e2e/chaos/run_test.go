package chaos

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/e2e/leasecheck"
	"github.com/leasehold/leasehold/leasecore/sqlite"
)

func sqliteSidecar(t *testing.T) string {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "leasehold.db"))
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	return serve(t, store)
}

// The load runs past Duration until it has its grants and every fault has
// been injected once (Rounds bounding the injections), and no longer.
func TestRunGoesOnUntilItsTargets(t *testing.T) {
	t.Parallel()
	base := sqliteSidecar(t)
	var injected atomic.Int32
	fault := NewFault("count", func(context.Context) error { injected.Add(1); return nil })
	res, err := Run(t.Context(), Config{
		URLs: []string{base}, GoClients: 4, Tasks: 8, TaskPrefix: "targets-",
		Duration: 10 * time.Millisecond, MaxDuration: 5 * time.Minute, MinGrants: 40,
		Faults: []Fault{fault}, FaultGap: 300 * time.Millisecond, Rounds: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Errors {
		t.Errorf("harness: %s", e)
	}
	if res.Unfinished != "" {
		t.Errorf("stopped at MaxDuration: %s", res.Unfinished)
	}
	if res.Grants < 40 {
		t.Errorf("%d grants, want at least 40", res.Grants)
	}
	if rep := leasecheck.Check(res.Ops, 30*time.Second); rep.Grants != res.Grants {
		t.Errorf("Result.Grants %d, the checker counts %d", res.Grants, rep.Grants)
	}
	if n := injected.Load(); n != 1 || len(res.Faults) != 1 {
		t.Errorf("fault injected %d times (%d events), want once", n, len(res.Faults))
	}
}

// A target the load cannot reach ends it at MaxDuration, and the result
// says what was missed.
func TestRunStopsAtMaxDuration(t *testing.T) {
	t.Parallel()
	base := sqliteSidecar(t)
	res, err := Run(t.Context(), Config{
		URLs: []string{base}, GoClients: 2, Tasks: 4, TaskPrefix: "max-",
		Duration: 10 * time.Millisecond, MaxDuration: 500 * time.Millisecond, MinGrants: 1 << 30,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Unfinished, "grants of 1073741824") {
		t.Errorf("Unfinished %q, want the grants missed", res.Unfinished)
	}
}
