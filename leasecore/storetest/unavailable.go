package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// checkUnavailable fails t unless every operation on st answers
// ErrUnavailable and nothing else: through a Service, and from the raw store
// as an *UnavailableError naming the operation. A claim in particular must
// never say held.
func checkUnavailable(t *testing.T, st leasecore.Store, task string) {
	t.Helper()
	checkUnavailableCtx(t, opCtx(t), st, task)
}

func checkUnavailableCtx(t *testing.T, ctx context.Context, st leasecore.Store, task string) {
	t.Helper()
	svc := leasecore.New(st)
	claimP := leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute}
	renewP := leasecore.RenewParams{Task: task, Owner: "a", Token: 1}
	releaseP := leasecore.ReleaseParams{Task: task, Owner: "a", Token: 1}
	calls := []struct {
		op       string
		viaSvc   func() (bool, error) // reports whether a result came with the error
		viaStore func() (bool, error)
	}{
		{"claim",
			func() (bool, error) { l, err := svc.Claim(ctx, claimP); return l != nil, err },
			func() (bool, error) { l, err := st.Claim(ctx, claimP); return l != nil, err }},
		{"renew",
			func() (bool, error) { l, err := svc.Renew(ctx, renewP); return l != nil, err },
			func() (bool, error) { l, err := st.Renew(ctx, renewP); return l != nil, err }},
		{"release",
			func() (bool, error) { return svc.Release(ctx, releaseP) },
			func() (bool, error) { return st.Release(ctx, releaseP) }},
		{"get",
			func() (bool, error) { l, err := svc.Get(ctx, task); return l != nil, err },
			func() (bool, error) { l, err := st.Get(ctx, task); return l != nil, err }},
		{"list",
			func() (bool, error) {
				l, _, err := svc.List(ctx, leasecore.ListParams{Limit: 10})
				return l != nil, err
			},
			func() (bool, error) { l, err := st.List(ctx, leasecore.ListParams{Limit: 10}); return l != nil, err }},
		{"ping",
			func() (bool, error) { return false, svc.Ping(ctx) },
			func() (bool, error) { return false, st.Ping(ctx) }},
	}
	for _, c := range calls {
		got, err := c.viaSvc()
		if !errIsUnavailableOnly(err) {
			t.Errorf("%s through Service: got %v, want ErrUnavailable and nothing else", c.op, err)
		}
		if got {
			t.Errorf("%s through Service returned a result along with %v", c.op, err)
		}

		got, err = c.viaStore()
		var ue *leasecore.UnavailableError
		switch {
		case !errIsUnavailableOnly(err):
			t.Errorf("%s on the store: got %v, want ErrUnavailable and nothing else", c.op, err)
		case !errors.As(err, &ue):
			t.Errorf("%s on the store: %v (%T) is no *UnavailableError from the driver's interpretError", c.op, err, err)
		case ue.Op != c.op:
			t.Errorf("%s on the store: UnavailableError.Op = %q, want %q", c.op, ue.Op, c.op)
		case ue.Err == nil:
			t.Errorf("%s on the store: UnavailableError carries no detail", c.op)
		}
		if got {
			t.Errorf("%s on the store returned a result along with %v", c.op, err)
		}
	}
}

// A store over a database without the schema is unavailable for every
// operation (never held, never lost); Migrate, even from several goroutines
// at once, creates the schema, after which it works.
func (s *suite) testUnavailableUnmigrated(t *testing.T) {
	st := s.open(t, s.d.OpenUnmigrated)
	task := uniqueTask(t)
	checkUnavailable(t, st, task)

	ctx := opCtx(t)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = st.Migrate(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate %d of an empty database: %v", i, err)
		}
	}
	svc := leasecore.New(st)
	if err := svc.Ping(ctx); err != nil {
		t.Fatalf("ping after Migrate: %v", err)
	}
	l := claim(t, svc, task, "a", time.Minute)
	if l.Token != 1 {
		t.Errorf("first grant in a new database: token %d, want 1", l.Token)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	checkSame(t, "lease after migrating again", get(t, svc, task), l)
}

// A store whose database cannot be reached is unavailable for every
// operation, Migrate included.
func (s *suite) testUnavailableUnreachable(t *testing.T) {
	st := s.open(t, s.d.OpenUnreachable)
	checkUnavailable(t, st, uniqueTask(t))
	err := st.Migrate(opCtx(t))
	var ue *leasecore.UnavailableError
	if !errIsUnavailableOnly(err) || !errors.As(err, &ue) || ue.Op != "migrate" {
		t.Errorf("Migrate of an unreachable store: got %v, want an *UnavailableError for op migrate", err)
	}
}

// After Close every operation is unavailable; a live lease it granted is
// still there for the other stores.
func (s *suite) testUnavailableClosed(t *testing.T) {
	st := s.open(t, s.d.Open)
	task := uniqueTask(t)
	l := claim(t, leasecore.New(st), task, "a", time.Minute)
	if err := st.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	checkUnavailable(t, st, task)
	checkSame(t, "lease granted before Close, read through another store", get(t, s.svc, task), l)
}

// An operation whose context is already cancelled is unavailable, never held
// or lost, even when the answer would have been held or lost; and it changes
// nothing.
func (s *suite) testUnavailableCancelledContext(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", time.Minute)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	svc := s.svc
	for _, c := range []struct {
		op  string
		err error
	}{
		{"claim by another owner", errOf(svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "b", TTL: time.Minute}))},
		{"claim by the owner", errOf(svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute}))},
		{"renew by another owner", errOf(svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "b"}))},
		{"renew by the owner", errOf(svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "a"}))},
		{"release by the owner", errOf(svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "a"}))},
		{"raw claim by another owner", errOf(s.store.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "b", TTL: time.Minute}))},
		{"raw renew by another owner", errOf(s.store.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "b"}))},
		{"get", errOf(svc.Get(ctx, task))},
		{"list", pageErrOf(svc.List(ctx, leasecore.ListParams{}))},
		{"ping", svc.Ping(ctx)},
	} {
		if !errIsUnavailableOnly(c.err) {
			t.Errorf("%s with a cancelled context: got %v, want ErrUnavailable and nothing else", c.op, c.err)
		}
	}
	checkSame(t, "lease after cancelled operations", get(t, s.svc, task), a)
}

// Migrate on a migrated store is a no-op, also from two stores at once: the
// leases and their counters are kept.
func (s *suite) testMigrateIdempotent(t *testing.T) {
	task := uniqueTask(t)
	other := s.open(t, s.d.Open)
	l := claim(t, s.svc, task, "a", time.Minute)

	ctx := opCtx(t)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, st := range []leasecore.Store{s.store, other} {
		wg.Go(func() { errs[i] = st.Migrate(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Migrate of a migrated store: %v", err)
	}
	if err := s.store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate a second time: %v", err)
	}
	checkSame(t, "lease after Migrate", get(t, s.svc, task), l)
	releaseOK(t, s.svc, task, "a", l.Token)
	if again := claim(t, s.svc, task, "b", time.Minute); again.Token != l.Token+1 {
		t.Errorf("grant after Migrate: token %d, want %d", again.Token, l.Token+1)
	}
}

// Ping on a working store answers nil.
func (s *suite) testPing(t *testing.T) {
	if err := s.svc.Ping(t.Context()); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

// The driver itself returns the model's error types, so Service's backstop
// (anything unexpected becomes unavailable) never hides a driver answering
// "held" or "lost" in its own way: *HeldError from Claim, *LostError from
// Renew, (false, nil) from Release of what is not held, (nil, nil) from Get of
// a free task, and a lease exactly when there is no error.
func (s *suite) testDriverErrorTypes(t *testing.T) {
	ctx := opCtx(t)
	task := uniqueTask(t)
	st := s.store

	l, err := st.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute})
	if err != nil || l == nil {
		t.Fatalf("raw claim of a free task = (%s, %v)", show(l), err)
	}
	checkLease(t, "raw claim", l)

	l2, err := st.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "b", TTL: time.Minute})
	var he *leasecore.HeldError
	if l2 != nil || !errors.As(err, &he) {
		t.Errorf("raw claim of a held task = (%s, %v %T), want (nil, *HeldError)", show(l2), err, err)
	} else if p := heldProblem(err, task, "a"); p != "" {
		t.Errorf("raw claim of a held task: %s", p)
	}

	r, err := st.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "b"})
	var le *leasecore.LostError
	if r != nil || !errors.As(err, &le) || le.Reason != leasecore.LostHeldByOther || le.Task != task {
		t.Errorf("raw renew by another owner = (%s, %v %T), want (nil, *LostError{Task %q, Reason %s})", show(r), err, err, task, leasecore.LostHeldByOther)
	}

	ok, err := st.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "b"})
	if ok || err != nil {
		t.Errorf("raw release by another owner = (%v, %v), want (false, nil)", ok, err)
	}
	ok, err = st.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "a", Token: l.Token})
	if !ok || err != nil {
		t.Errorf("raw release by the owner = (%v, %v), want (true, nil)", ok, err)
	}
	if g, err := st.Get(ctx, task); g != nil || err != nil {
		t.Errorf("raw get after release = (%s, %v), want (nil, nil)", show(g), err)
	}

	r, err = st.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "a"})
	if r != nil || !errors.As(err, &le) || le.Reason != leasecore.LostNotHeld {
		t.Errorf("raw renew after release = (%s, %v %T), want (nil, *LostError{Reason %s})", show(r), err, err, leasecore.LostNotHeld)
	}
}
