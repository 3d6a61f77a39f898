package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// A free task is acquired: a positive token, no renewals, the request echoed,
// acquired_at = renewed_at, expires_at = acquired_at + ttl, and the store's
// reading of the time left.
func (s *suite) testClaimFreeTask(t *testing.T) {
	task := uniqueTask(t)
	p := leasecore.ClaimParams{Task: task, Owner: "host-a#41#f00d", TTL: 90 * time.Second, Note: "first claim"}
	l := claimOK(t, s.svc, p)
	if l.Token != 1 {
		t.Errorf("token %d, want 1 for the first grant of a task", l.Token)
	}
	if l.RenewCount != 0 {
		t.Errorf("renew_count %d, want 0 for a new grant", l.RenewCount)
	}
	if !l.AcquiredAt.Equal(l.RenewedAt) {
		t.Errorf("acquired_at %v ≠ renewed_at %v on a new grant", l.AcquiredAt, l.RenewedAt)
	}
	if got := l.ExpiresAt.Sub(l.AcquiredAt); !near(got, p.TTL) {
		t.Errorf("expires_at − acquired_at = %v, want %v", got, p.TTL)
	}
	if l.TTLRemaining <= 0 || l.TTLRemaining > p.TTL {
		t.Errorf("ttl_remaining %v, want in (0, %v]", l.TTLRemaining, p.TTL)
	}
	checkSame(t, "get after claim", get(t, s.svc, task), l)
}

// A live lease claimed again by its owner is refreshed: same token,
// renew_count + 1, a later expiry, acquired_at kept, the note replaced.
func (s *suite) testClaimSameOwnerRefreshes(t *testing.T) {
	task := uniqueTask(t)
	first := claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, Note: "before"})
	// Let the store's clock move on, so a refresh that rewrote acquired_at,
	// or did not write renewed_at, shows.
	waitClockPast(t, s.svc, first, 5*precision)

	again := claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: 2 * time.Minute, Note: "after"})
	if again.Token != first.Token {
		t.Errorf("refresh changed the token %d → %d; a live lease refreshed by its owner keeps it", first.Token, again.Token)
	}
	if again.RenewCount != first.RenewCount+1 {
		t.Errorf("refresh: renew_count %d, want %d", again.RenewCount, first.RenewCount+1)
	}
	if !sameInstant(again.AcquiredAt, first.AcquiredAt) {
		t.Errorf("refresh moved acquired_at %v → %v", first.AcquiredAt, again.AcquiredAt)
	}
	if !again.RenewedAt.After(first.RenewedAt.Add(precision)) {
		t.Errorf("refresh: renewed_at %v, want after %v", again.RenewedAt, first.RenewedAt)
	}
	if !again.ExpiresAt.After(first.ExpiresAt) {
		t.Errorf("refresh did not extend the expiry: %v → %v", first.ExpiresAt, again.ExpiresAt)
	}
	if again.Note != "after" {
		t.Errorf("refresh kept note %q, want it replaced by %q", again.Note, "after")
	}
	checkSame(t, "get after refresh", get(t, s.svc, task), again)

	// A refresh with no note clears it: the note is the latest claim's.
	cleared := claim(t, s.svc, task, "a", 2*time.Minute)
	if cleared.Note != "" || cleared.Token != first.Token || cleared.RenewCount != first.RenewCount+2 {
		t.Errorf("second refresh without a note: %s, want token %d, renew_count %d, empty note", show(cleared), first.Token, first.RenewCount+2)
	}
}

// A claim by another owner while the lease is live is refused as held, with
// the holder's owner, expiry and time left; the lease is untouched.
func (s *suite) testClaimOtherOwnerWhileLiveIsHeld(t *testing.T) {
	task := uniqueTask(t)
	a := claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: longTTL, Note: "a's"})

	for _, owner := range []string{"b", "A", "a "} { // owners are compared exactly
		l, err := s.svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Minute, Note: "b's"})
		if l != nil {
			t.Errorf("claim by %q returned a lease %s with error %v", owner, show(l), err)
		}
		he := mustHeld(t, err, task, "a")
		if !sameInstant(he.Holder.ExpiresAt, a.ExpiresAt) {
			t.Errorf("HeldError.Holder.ExpiresAt %v, want the holder's %v", he.Holder.ExpiresAt, a.ExpiresAt)
		}
		if he.Holder.TTLRemaining > a.TTL {
			t.Errorf("HeldError.Holder.TTLRemaining %v exceeds the holder's ttl %v", he.Holder.TTLRemaining, a.TTL)
		}
	}
	checkSame(t, "lease after refused claims", get(t, s.svc, task), a)
}

// Once a lease expires, another owner acquires the task under the next
// token, as a new grant.
func (s *suite) testClaimOtherOwnerAfterExpiry(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", shortTTL)
	waitExpired(t, s.svc, task)

	b := claim(t, s.svc, task, "b", time.Minute)
	if b.Token != a.Token+1 {
		t.Errorf("takeover after expiry: token %d, want %d", b.Token, a.Token+1)
	}
	if b.RenewCount != 0 || !b.AcquiredAt.Equal(b.RenewedAt) || !b.AcquiredAt.After(a.AcquiredAt) {
		t.Errorf("takeover after expiry: %s, want a new grant (renew_count 0, acquired_at = renewed_at, after %v)", show(b), a.AcquiredAt)
	}
}

// An owner whose lease expired and who claims again gets a new grant and a
// new token: it did not hold the task live at that moment.
func (s *suite) testClaimSameOwnerAfterExpiry(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", shortTTL)
	waitExpired(t, s.svc, task)

	again := claim(t, s.svc, task, "a", time.Minute)
	if again.Token != a.Token+1 {
		t.Errorf("claim after own expiry: token %d, want %d (an expired lease is not refreshed)", again.Token, a.Token+1)
	}
	if again.RenewCount != 0 || !again.AcquiredAt.After(a.AcquiredAt) {
		t.Errorf("claim after own expiry: %s, want a new grant (renew_count 0, acquired_at after %v)", show(again), a.AcquiredAt)
	}
}

// An owner who released and claims again gets a new grant and a new token.
func (s *suite) testClaimSameOwnerAfterRelease(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", time.Minute)
	renewOK(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a"}) // renew_count 1, to see it reset
	releaseOK(t, s.svc, task, "a", a.Token)

	again := claim(t, s.svc, task, "a", time.Minute)
	if again.Token != a.Token+1 {
		t.Errorf("claim after own release: token %d, want %d", again.Token, a.Token+1)
	}
	if again.RenewCount != 0 || !again.AcquiredAt.Equal(again.RenewedAt) {
		t.Errorf("claim after own release: %s, want a new grant (renew_count 0, acquired_at = renewed_at)", show(again))
	}
}

// After a release, another owner acquires the task under the next token.
func (s *suite) testClaimOtherOwnerAfterRelease(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", time.Minute)
	releaseOK(t, s.svc, task, "a", 0)

	b := claim(t, s.svc, task, "b", time.Minute)
	if b.Token != a.Token+1 || b.RenewCount != 0 {
		t.Errorf("claim after another's release: %s, want token %d, renew_count 0", show(b), a.Token+1)
	}
}

// A claim without a TTL is granted the default, 30 s.
func (s *suite) testClaimDefaultTTL(t *testing.T) {
	task := uniqueTask(t)
	l := claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a"})
	if l.TTL != leasecore.DefaultTTL {
		t.Errorf("ttl %v, want the default %v", l.TTL, leasecore.DefaultTTL)
	}
	if got := l.ExpiresAt.Sub(l.AcquiredAt); !near(got, leasecore.DefaultTTL) {
		t.Errorf("expires_at − acquired_at = %v, want %v", got, leasecore.DefaultTTL)
	}
	if g := get(t, s.svc, task); g == nil || g.TTL != leasecore.DefaultTTL {
		t.Errorf("get after a default claim: %s, want ttl %v stored", show(g), leasecore.DefaultTTL)
	}
}

// Of 32 contenders for a free task exactly one wins; every other is told the
// winner holds it.
func (s *suite) testClaimRaceOnFreeTask(t *testing.T) {
	task := uniqueTask(t)
	win := race(t, []*leasecore.Service{s.svc}, task, time.Minute)
	if win.Token != 1 {
		t.Errorf("winner's token %d, want 1 for the first grant of a task", win.Token)
	}
}

// Of 32 contenders for an expired task exactly one takes it over, under
// exactly the next token.
func (s *suite) testClaimRaceOnExpiredTask(t *testing.T) {
	task := uniqueTask(t)
	old := claim(t, s.svc, task, "old-holder", shortTTL)
	waitExpired(t, s.svc, task)

	win := race(t, []*leasecore.Service{s.svc}, task, time.Minute)
	if win.Token != old.Token+1 {
		t.Errorf("takeover race: winner's token %d, want exactly %d", win.Token, old.Token+1)
	}
}

// Contenders spread over two stores on the same data (two sidecars of one
// fleet) still produce exactly one winner, for a free and an expired task.
func (s *suite) testClaimRaceAcrossStores(t *testing.T) {
	other := leasecore.New(s.open(t, s.d.Open))
	svcs := []*leasecore.Service{s.svc, other}

	task := uniqueTask(t)
	// Race with a TTL that outlasts the race (a lease expiring mid-race
	// would rightly be granted again), then shorten it to let it expire.
	first := race(t, svcs, task, time.Minute)
	if first.Token != 1 {
		t.Errorf("race across stores: winner's token %d, want 1 for the first grant of a task", first.Token)
	}
	renewOK(t, s.svc, leasecore.RenewParams{Task: task, Owner: first.Owner, TTL: shortTTL})
	waitExpired(t, s.svc, task)
	second := race(t, svcs, task, time.Minute)
	if second.Token != first.Token+1 {
		t.Errorf("takeover race across stores: token %d, want exactly %d", second.Token, first.Token+1)
	}
}

// errIsUnavailableOnly reports whether err is ErrUnavailable and no other
// outcome.
func errIsUnavailableOnly(err error) bool {
	return errors.Is(err, leasecore.ErrUnavailable) &&
		!errors.Is(err, leasecore.ErrHeld) && !errors.Is(err, leasecore.ErrLost) && !errors.Is(err, leasecore.ErrInvalid)
}
