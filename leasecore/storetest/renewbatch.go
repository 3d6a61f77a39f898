package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// A batch renewal judges every lease on its own, exactly as Renew would:
// the live leases of their owners are renewed, each refused one gets its own
// reason, an invalid one its validation error, and the refusals change
// nothing. A task named twice is renewed twice, one after the other.
func (s *suite) testRenewBatchEachOnItsOwn(t *testing.T) {
	base := uniqueTask(t)
	task := func(name string) string { return base + "-" + name }
	ok := claim(t, s.svc, task("ok"), "a", time.Minute)
	twice := claim(t, s.svc, task("twice"), "a", time.Minute)
	other := claim(t, s.svc, task("other"), "b", time.Minute)
	mismatch := claim(t, s.svc, task("mismatch"), "a", time.Minute)
	released := claim(t, s.svc, task("released"), "a", time.Minute)
	releaseOK(t, s.svc, task("released"), "a", released.Token)
	claim(t, s.svc, task("expired"), "a", shortTTL)
	waitExpired(t, s.svc, task("expired"))

	ps := []leasecore.RenewParams{
		{Task: task("ok"), Owner: "a", Token: ok.Token, TTL: 2 * time.Minute},
		{Task: task("twice"), Owner: "a"},
		{Task: task("other"), Owner: "a"},
		{Task: task("never"), Owner: "a"},
		{Task: task("mismatch"), Owner: "a", Token: mismatch.Token + 7},
		{Task: task("released"), Owner: "a", Token: released.Token},
		{Task: task("expired"), Owner: "a"},
		{Task: task("invalid"), Owner: ""},
		{Task: task("twice"), Owner: "a", Token: twice.Token},
	}
	got := s.svc.RenewBatch(t.Context(), ps)
	if len(got) != len(ps) {
		t.Fatalf("RenewBatch of %d gave %d results", len(ps), len(got))
	}
	renewed := func(i int) *leasecore.Lease {
		t.Helper()
		r := got[i]
		if r.Err != nil || r.Lease == nil {
			t.Fatalf("renewal %d (%s by %q): %v, want renewed", i, ps[i].Task, ps[i].Owner, r.Err)
		}
		checkLease(t, fmt.Sprintf("batch renewal %d", i), r.Lease)
		return r.Lease
	}
	lost := func(i int, reason leasecore.LostReason) {
		t.Helper()
		if got[i].Lease != nil {
			t.Errorf("renewal %d (%s) renewed %s, want lost (%s)", i, ps[i].Task, show(got[i].Lease), reason)
			return
		}
		mustLost(t, got[i].Err, reason)
	}

	l := renewed(0)
	if l.Token != ok.Token || l.TTL != 2*time.Minute || l.RenewCount != 1 {
		t.Errorf("batch renewal with a ttl: %s, want token %d, ttl 2m, renew_count 1", show(l), ok.Token)
	}
	checkSame(t, "get after the batch", get(t, s.svc, task("ok")), l)
	first, second := renewed(1), renewed(8)
	if first.RenewCount+second.RenewCount != 3 || first.Token != twice.Token || second.Token != twice.Token {
		t.Errorf("a task renewed twice in one batch: %s and %s, want renew_counts 1 and 2", show(first), show(second))
	}
	lost(2, leasecore.LostHeldByOther)
	lost(3, leasecore.LostNotHeld)
	lost(4, leasecore.LostTokenMismatch)
	lost(5, leasecore.LostNotHeld)
	lost(6, leasecore.LostExpired)
	var ve *leasecore.ValidationError
	if !errors.As(got[7].Err, &ve) || ve.Field != "Owner" {
		t.Errorf("renewal with no owner: %v, want a validation error on owner", got[7].Err)
	}

	checkSame(t, "another owner's lease after the batch", get(t, s.svc, task("other")), other)
	checkSame(t, "lease after a batch renewal with a wrong token", get(t, s.svc, task("mismatch")), mismatch)
	mustGone(t, s.svc, task("released"))
	mustGone(t, s.svc, task("expired"))
	mustGone(t, s.svc, task("never"))
}

// A batch larger than a driver's statement holds (2,100 leases) renews every
// lease once.
func (s *suite) testRenewBatchLarge(t *testing.T) {
	const n = 2100
	base := uniqueTask(t)
	ps := make([]leasecore.RenewParams, n)
	tokens := make([]int64, n)
	// All 2,100 claims are queued at once, and on a slow machine (or one
	// busy with the other cases, which run in parallel) the last may wait
	// in a driver's queue for longer than the default op timeout; so may
	// the batch, behind them. The case is about what a large batch does,
	// not how fast: everything here gets a longer timeout.
	setup := leasecore.New(s.store, leasecore.WithOpTimeout(sharedOpTimeout))
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		ps[i] = leasecore.RenewParams{Task: fmt.Sprintf("%s-%04d", base, i), Owner: "a"}
		wg.Go(func() {
			l, err := setup.Claim(t.Context(), leasecore.ClaimParams{Task: ps[i].Task, Owner: "a", TTL: time.Minute})
			if err != nil {
				errs <- err
				return
			}
			tokens[i] = l.Token
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("claim: %v", err)
	}
	for i := range ps {
		ps[i].Token = tokens[i]
	}
	for i, r := range setup.RenewBatch(t.Context(), ps) {
		if r.Err != nil {
			t.Fatalf("renewal %d of %d: %v", i, n, r.Err)
		}
		if r.Lease.Task != ps[i].Task || r.Lease.Token != tokens[i] || r.Lease.RenewCount != 1 {
			t.Fatalf("renewal %d answered %s, want %s with token %d and renew_count 1", i, show(r.Lease), ps[i].Task, tokens[i])
		}
	}
}

// A batch renewal on a store that cannot answer gives every lease
// unavailable, never lost.
func (s *suite) testRenewBatchUnavailable(t *testing.T) {
	st := s.open(t, s.d.OpenUnreachable)
	got := leasecore.New(st).RenewBatch(opCtx(t), []leasecore.RenewParams{
		{Task: uniqueTask(t), Owner: "a"}, {Task: uniqueTask(t) + "-2", Owner: "a", Token: 3},
	})
	for i, r := range got {
		if r.Lease != nil || !errors.Is(r.Err, leasecore.ErrUnavailable) || errors.Is(r.Err, leasecore.ErrLost) {
			t.Errorf("renewal %d on an unreachable store: %s, %v; want unavailable", i, show(r.Lease), r.Err)
		}
	}
}
