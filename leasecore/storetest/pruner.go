package storetest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// The pruner cases run on a database of their own (a migrated
// OpenUnmigrated store): the prune lease and PruneHistory are store-wide,
// and must not touch the other cases' data.
func (s *suite) isolated(t *testing.T) leasecore.Store {
	t.Helper()
	st := s.open(t, s.d.OpenUnmigrated)
	if err := st.Migrate(opCtx(t)); err != nil {
		t.Fatalf("migrate a database of its own: %v", err)
	}
	return st
}

// historyOf declares task under a policy keeping only the newest event and
// gives it four events (two leases, each acquired and released).
func historyOf(t *testing.T, svc *leasecore.Service, task string) {
	t.Helper()
	if _, err := svc.CreatePolicy(t.Context(), leasecore.RetentionPolicy{Name: "newest-only", KeepLast: 1}, leasecore.Writer{}); err != nil {
		t.Fatalf("create policy: %v", err)
	}
	if _, err := svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: task, TTL: time.Minute, RetentionPolicy: "newest-only"}, leasecore.Writer{}); err != nil {
		t.Fatalf("declare %s: %v", task, err)
	}
	for range 2 {
		l := claim(t, svc, task, "a", time.Minute)
		releaseOK(t, svc, task, "a", l.Token)
	}
	if n := len(events(t, svc, task)); n != 4 {
		t.Fatalf("%s has %d events, want 4", task, n)
	}
}

func events(t *testing.T, svc *leasecore.Service, task string) []leasecore.Event {
	t.Helper()
	evs, err := svc.History(t.Context(), task, leasecore.MaxHistoryLimit)
	if err != nil {
		t.Fatalf("history of %s: %v", task, err)
	}
	return evs
}

// Two pruners race: the one that takes the prune lease prunes, the other
// skips its pass and deletes nothing; the lease (ttl three intervals) is
// released after the pass.
func (s *suite) testPrunerTwoRacing(t *testing.T) {
	svc := leasecore.New(s.isolated(t))
	task := uniqueTask(t)
	historyOf(t, svc, task)

	first := leasecore.NewPruner(svc, time.Minute, "pruner-1", nil)
	locked, proceed := make(chan struct{}), make(chan struct{})
	first.OnLocked = func() { close(locked); <-proceed }
	type outcome struct {
		r   leasecore.PruneResult
		n   int64
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, n, err := first.Once(t.Context())
		done <- outcome{r, n, err}
	}()
	select {
	case <-locked:
	case o := <-done:
		t.Fatalf("the first pruner finished without taking the lease: %+v", o)
	}
	held := get(t, svc, leasecore.PruneTask)
	if held == nil || held.Owner != "pruner-1" || held.TTL != 3*time.Minute {
		t.Fatalf("prune lease while the first pruner works: %s, want pruner-1 with ttl 3m (three intervals)", show(held))
	}

	second := leasecore.NewPruner(svc, time.Minute, "pruner-2", nil)
	r, n, err := second.Once(t.Context())
	if r != leasecore.PruneSkipped || n != 0 || err != nil {
		t.Fatalf("second pruner: %s, %d, %v; want skipped, 0, nil", r, n, err)
	}
	if got := len(events(t, svc, task)); got != 4 {
		t.Fatalf("after the skipped pass %s has %d events, want all 4", task, got)
	}

	close(proceed)
	o := <-done
	if o.r != leasecore.Pruned || o.err != nil || o.n < 3 {
		t.Fatalf("first pruner: %+v; want pruned, at least 3 deleted", o)
	}
	if evs := events(t, svc, task); len(evs) != 1 || evs[0].Kind != leasecore.EventReleased {
		t.Fatalf("after pruning %s keeps %+v, want only its newest event (released)", task, evs)
	}
	mustGone(t, svc, leasecore.PruneTask)
}

// brokenLock is a store whose prune lease cannot be claimed (the store
// answers unavailable for it) while everything else works: a broken lock
// mechanism.
type brokenLock struct {
	leasecore.Store
	broken atomic.Bool
}

func (b *brokenLock) Claim(ctx context.Context, p leasecore.ClaimParams) (*leasecore.Lease, error) {
	if p.Task == leasecore.PruneTask && b.broken.Load() {
		return nil, leasecore.Unavailable("claim", errors.New("lock table unreachable"))
	}
	return b.Store.Claim(ctx, p)
}

// recorder is a slog.Handler that keeps the messages of warnings.
type recorder struct {
	mu    sync.Mutex
	warns []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelWarn {
		r.mu.Lock()
		r.warns = append(r.warns, rec.Message)
		r.mu.Unlock()
	}
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }
func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.warns)
}

// When the prune lease cannot be had because the store is unavailable for
// it, the pruner prunes anyway (fails open) and warns once per streak.
func (s *suite) testPrunerBrokenLockPrunesAnyway(t *testing.T) {
	st := &brokenLock{Store: s.isolated(t)}
	svc := leasecore.New(st)
	task := uniqueTask(t)
	historyOf(t, svc, task)

	rec := &recorder{}
	p := leasecore.NewPruner(svc, time.Minute, "pruner", slog.New(rec))
	st.broken.Store(true)
	for pass := 1; pass <= 2; pass++ {
		r, n, err := p.Once(t.Context())
		if r != leasecore.PrunedUnguarded || err != nil {
			t.Fatalf("pass %d with a broken lock: %s, %d, %v; want pruned_unguarded", pass, r, n, err)
		}
		if pass == 1 && n < 3 {
			t.Fatalf("pass 1 deleted %d events, want at least 3", n)
		}
	}
	if evs := events(t, svc, task); len(evs) != 1 {
		t.Fatalf("after pruning without the lock %s keeps %d events, want 1", task, len(evs))
	}
	if rec.count() != 1 || !strings.Contains(rec.warns[0], "prune lease") {
		t.Fatalf("warnings %q over a streak of two passes, want one about the prune lease", rec.warns)
	}

	// The lock works again: the streak ends; a new streak warns again.
	st.broken.Store(false)
	if r, _, err := p.Once(t.Context()); r != leasecore.Pruned || err != nil {
		t.Fatalf("pass with the lock back: %s, %v; want pruned", r, err)
	}
	st.broken.Store(true)
	if r, _, err := p.Once(t.Context()); r != leasecore.PrunedUnguarded || err != nil {
		t.Fatalf("pass in a new streak: %s, %v", r, err)
	}
	if rec.count() != 2 {
		t.Fatalf("warnings %q, want one more for the new streak", rec.warns)
	}
}
