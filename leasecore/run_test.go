package leasecore_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/sqlite"
)

func newService(t *testing.T) *leasecore.Service {
	t.Helper()
	store, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "l.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return leasecore.New(store)
}

func TestRunHeldDoesNotRunTheBody(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	if _, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: "prune", Owner: "a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ran, err := leasecore.Run(t.Context(), svc, leasecore.ClaimParams{Task: "prune", Owner: "b", TTL: time.Minute}, leasecore.KeeperConfig{},
		func(context.Context) error { t.Error("the body ran while another owner held the lease"); return nil })
	if ran || err != nil {
		t.Fatalf("Run = %v, %v; want false, nil for a held task", ran, err)
	}
}

func TestRunReleasesAfterTheBodyWhateverItReturns(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	boom := errors.New("boom")
	ran, err := leasecore.Run(t.Context(), svc, leasecore.ClaimParams{Task: "prune", Owner: "a", TTL: time.Minute}, leasecore.KeeperConfig{},
		func(ctx context.Context) error {
			l, err := svc.Get(ctx, "prune")
			if err != nil || l == nil || l.Owner != "a" {
				t.Errorf("inside the body the lease is %+v, %v; want held by a", l, err)
			}
			return boom
		})
	if !ran || !errors.Is(err, boom) {
		t.Fatalf("Run = %v, %v; want true and the body's error", ran, err)
	}
	if l, err := svc.Get(t.Context(), "prune"); err != nil || l != nil {
		t.Fatalf("after Run the lease is %+v, %v; want released", l, err)
	}
}

// Run's release says what the body did: the released event keeps exit
// status 0 for a body that returned nil, its error otherwise.
func TestRunRecordsTheOutcome(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	for _, body := range []error{nil, errors.New("no report today")} {
		ran, err := leasecore.Run(t.Context(), svc, leasecore.ClaimParams{Task: "report", Owner: "a", TTL: time.Minute}, leasecore.KeeperConfig{},
			func(context.Context) error { time.Sleep(20 * time.Millisecond); return body })
		if !ran || !errors.Is(err, body) {
			t.Fatalf("Run = %v, %v", ran, err)
		}
		evs, err := svc.History(t.Context(), "report", 1)
		if err != nil || len(evs) != 1 || evs[0].Kind != leasecore.EventReleased || evs[0].Run == nil {
			t.Fatalf("newest event %+v, %v; want released with a run", evs, err)
		}
		run := evs[0].Run
		want := leasecore.RunSucceeded
		if body != nil {
			want = leasecore.RunFailed
			if run.ExitCode != leasecore.NoExitCode || run.Error != body.Error() {
				t.Errorf("run of a failing body: %+v, want no exit status and error %q", run, body)
			}
		}
		if run.Result() != want || run.Duration < 20*time.Millisecond || run.Lost {
			t.Errorf("run %+v: result %s, want %s, duration ≥ 20ms, not lost", run, run.Result(), want)
		}
	}
}

func TestRunCancelsTheBodyWhenTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	ran, err := leasecore.Run(t.Context(), svc, leasecore.ClaimParams{Task: "prune", Owner: "a", TTL: time.Second}, leasecore.KeeperConfig{},
		func(ctx context.Context) error {
			// Somebody ends the lease under the body's feet (an operator's
			// release): the next renewal is refused and the body is told.
			if ok, err := svc.Release(ctx, leasecore.ReleaseParams{Task: "prune", Owner: "a"}); !ok || err != nil {
				t.Errorf("release = %v, %v", ok, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Second):
				t.Error("the body's context was not cancelled after the lease was lost")
			}
			if !errors.Is(context.Cause(ctx), leasecore.ErrLost) {
				t.Errorf("cause = %v, want ErrLost", context.Cause(ctx))
			}
			return nil
		})
	var lost *leasecore.LostError
	if !ran || !errors.As(err, &lost) || lost.Reason != leasecore.LostNotHeld {
		t.Fatalf("Run = %v, %v; want true and the loss (not_held)", ran, err)
	}
}

func TestRunUnavailableStore(t *testing.T) {
	t.Parallel()
	store, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "missing", "l.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ran, err := leasecore.Run(t.Context(), leasecore.New(store), leasecore.ClaimParams{Task: "prune", Owner: "a"}, leasecore.KeeperConfig{},
		func(context.Context) error { t.Error("the body ran without a lease"); return nil })
	if ran || !errors.Is(err, leasecore.ErrUnavailable) || errors.Is(err, leasecore.ErrHeld) {
		t.Fatalf("Run = %v, %v; want false and ErrUnavailable", ran, err)
	}
}

// Run acts for the claim's credential throughout: the acquired event, and
// the released one that its deferred release records, name it; a keeper
// configured for another credential is refused before anything is claimed.
func TestRunActsForTheClaimsCredential(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	p := leasecore.ClaimParams{Task: "report", Owner: "a", TTL: time.Minute, Credential: "cron-eu"}
	ran, err := leasecore.Run(t.Context(), svc, p, leasecore.KeeperConfig{}, func(context.Context) error { return nil })
	if !ran || err != nil {
		t.Fatalf("Run = %v, %v", ran, err)
	}
	evs, err := svc.History(t.Context(), "report", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Kind != leasecore.EventReleased || evs[1].Kind != leasecore.EventAcquired ||
		evs[0].Credential != "cron-eu" || evs[1].Credential != "cron-eu" {
		t.Fatalf("history %+v, want released and acquired, both by credential cron-eu", evs)
	}

	ran, err = leasecore.Run(t.Context(), svc, leasecore.ClaimParams{Task: "other", Owner: "a", TTL: time.Minute, Credential: "cron-eu"},
		leasecore.KeeperConfig{Credential: "cron-us"},
		func(context.Context) error { t.Error("the body ran with two credentials"); return nil })
	if ran || err == nil {
		t.Fatalf("Run with a keeper credential other than the claim's = %v, %v; want refused", ran, err)
	}
	if evs, err := svc.History(t.Context(), "other", 10); err != nil || len(evs) != 0 {
		t.Fatalf("history of the refused Run: %+v, %v; want nothing claimed", evs, err)
	}
}
