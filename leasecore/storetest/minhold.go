package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// The minimum hold (leasecore.ClaimParams.MinHold): a grant keeps the task
// from every claimant until AcquiredAt + MinHold, even after a release or an
// expiry. The cases run for a store that implements leasecore.HoldReleaser
// (both drivers do); a store without it has every claim with a minimum hold
// refused by the Service, which checkHoldsOrRefuses checks.

// minHold is the hold the cases wait out: long enough that a claim sent
// right after a release lands inside it on a busy machine, short enough to
// wait for.
const minHold = 1500 * time.Millisecond

func (s *suite) minHoldCases() []testCase {
	if _, ok := s.driverStore().(leasecore.HoldReleaser); !ok {
		return []testCase{{"RefusedWithoutHoldReleaser", s.testMinHoldRefused}}
	}
	return []testCase{
		{"ReleaseRestsTheTask", s.testMinHoldReleaseRests},
		{"ExpiryRestsTheTask", s.testMinHoldExpiryRests},
		{"PassedHoldReleasesAtOnce", s.testMinHoldPassed},
		{"RefreshKeepsTheLaterEnd", s.testMinHoldRefresh},
		{"GrantWithoutHoldClearsIt", s.testMinHoldGrantClears},
		{"DeclaredHoldApplies", s.testMinHoldDeclared},
		{"ReleaseKeepsRunOutcome", s.testReleaseRunOutcome},
	}
}

// A store that does not keep minimum holds never gets a claim asking for
// one: the Service refuses it, naming the field.
func (s *suite) testMinHoldRefused(t *testing.T) {
	task := uniqueTask(t)
	svc := leasecore.New(s.driverStore(), leasecore.WithOpTimeout(sharedOpTimeout))
	_, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, MinHold: time.Second})
	var ve *leasecore.ValidationError
	if !errors.As(err, &ve) || ve.Field != "MinHold" {
		t.Fatalf("claim with a minimum hold from a store without HoldReleaser: %v, want a ValidationError naming MinHold", err)
	}
	mustGone(t, s.svc, task)
}

// driverStore is the driver's own store under the suite's wrapper.
func (s *suite) driverStore() leasecore.Store {
	if c, ok := s.store.(interface{ unwrap() leasecore.Store }); ok {
		return c.unwrap()
	}
	return s.store
}

// claimHold claims task for owner with a minimum hold and checks the
// lease's HoldUntil.
func claimHold(t *testing.T, svc *leasecore.Service, task, owner string, ttl, hold time.Duration) *leasecore.Lease {
	t.Helper()
	l := claimOK(t, svc, leasecore.ClaimParams{Task: task, Owner: owner, TTL: ttl, MinHold: hold})
	if want := l.AcquiredAt.Add(hold); !sameInstant(l.HoldUntil, want) {
		t.Fatalf("claim with a minimum hold of %v: HoldUntil %v, want AcquiredAt + hold = %v", hold, l.HoldUntil, want)
	}
	return l
}

// mustRest fails t unless err refuses a claim because task rests after
// held's lease, until held.HoldUntil.
func mustRest(t *testing.T, err error, task string, held *leasecore.Lease) {
	t.Helper()
	he := mustHeld(t, err, task, held.Owner)
	if !he.Holder.Resting || !sameInstant(he.Holder.HoldUntil, held.HoldUntil) || !sameInstant(he.Holder.ExpiresAt, held.HoldUntil) ||
		!sameInstant(he.Holder.AcquiredAt, held.AcquiredAt) {
		t.Errorf("claim of resting %s: holder %+v, want Resting, HoldUntil and ExpiresAt %v, AcquiredAt %v",
			task, he.Holder, held.HoldUntil, held.AcquiredAt)
	}
	if he.Holder.TTLRemaining <= 0 || he.Holder.TTLRemaining > held.HoldUntil.Sub(held.AcquiredAt) {
		t.Errorf("claim of resting %s: TTLRemaining %v, want in (0, %v]", task, he.Holder.TTLRemaining, held.HoldUntil.Sub(held.AcquiredAt))
	}
}

// waitHoldPassed waits until a claim of task by a new owner is granted: the
// hold of l has passed by the store's clock. It fails t if the grant comes
// before l.HoldUntil by the store's clock (the new lease's AcquiredAt).
func waitHoldPassed(t *testing.T, svc *leasecore.Service, task, owner string, l *leasecore.Lease) *leasecore.Lease {
	t.Helper()
	var got *leasecore.Lease
	poll(t, 20*time.Millisecond, "the minimum hold on "+task+" to pass", func() bool {
		lease, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Minute})
		if errors.Is(err, leasecore.ErrHeld) {
			return false
		}
		if err != nil {
			t.Fatalf("claim %s by %q after the hold: %v", task, owner, err)
		}
		got = lease
		return true
	})
	if got.AcquiredAt.Before(l.HoldUntil) {
		t.Errorf("%s granted to %q at %v, before the minimum hold's end %v", task, owner, got.AcquiredAt, l.HoldUntil)
	}
	if got.Token != l.Token+1 {
		t.Errorf("grant after the hold: token %d, want %d", got.Token, l.Token+1)
	}
	return got
}

// A release inside the hold ends the lease (renewals are lost, get shows
// none) but the task rests: every claim, the releasing owner's too, is
// refused as held until the hold's end, and the release says until when.
func (s *suite) testMinHoldReleaseRests(t *testing.T) {
	task := uniqueTask(t)
	a := claimHold(t, s.svc, task, "a", time.Minute, minHold)
	res, err := s.svc.ReleaseHold(t.Context(), leasecore.ReleaseParams{Task: task, Owner: "a", Token: a.Token})
	if err != nil || !res.Released || !sameInstant(res.HoldUntil, a.HoldUntil) {
		t.Fatalf("release inside the hold = %+v, %v; want released, HoldUntil %v", res, err, a.HoldUntil)
	}
	mustGone(t, s.svc, task)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: a.Token}, leasecore.LostNotHeld)
	for _, owner := range []string{"b", "a"} {
		_, err := s.svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Minute})
		mustRest(t, err, task, a)
	}
	if release(t, s.svc, task, "a", 0) {
		t.Error("a second release of a resting task = true, want false")
	}
	waitHoldPassed(t, s.svc, task, "b", a)
}

// A lease that expires inside its hold rests the task too: its holder died,
// and the job it ran must not run again in the same period.
func (s *suite) testMinHoldExpiryRests(t *testing.T) {
	task := uniqueTask(t)
	a := claimHold(t, s.svc, task, "a", shortTTL, minHold)
	waitExpired(t, s.svc, task)
	for _, owner := range []string{"b", "a"} {
		_, err := s.svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Minute})
		mustRest(t, err, task, a)
	}
	waitHoldPassed(t, s.svc, task, "b", a)
}

// A release after the hold's end frees the task at once, and says no hold.
func (s *suite) testMinHoldPassed(t *testing.T) {
	task := uniqueTask(t)
	const hold = 50 * time.Millisecond
	a := claimHold(t, s.svc, task, "a", time.Minute, hold)
	waitClockPast(t, s.svc, a, 2*hold)
	res, err := s.svc.ReleaseHold(t.Context(), leasecore.ReleaseParams{Task: task, Owner: "a"})
	if err != nil || !res.Released || !res.HoldUntil.IsZero() {
		t.Fatalf("release after the hold's end = %+v, %v; want released with no HoldUntil", res, err)
	}
	claim(t, s.svc, task, "b", time.Minute)
}

// A refresh of the owner's live lease keeps the later of the two ends, from
// the lease's acquisition; a renewal keeps the hold.
func (s *suite) testMinHoldRefresh(t *testing.T) {
	task := uniqueTask(t)
	a := claimHold(t, s.svc, task, "a", time.Minute, time.Hour)
	for _, p := range []struct {
		hold time.Duration
		want time.Time
	}{
		{0, a.HoldUntil},                                 // none asked: kept
		{time.Minute, a.HoldUntil},                       // earlier: kept
		{2 * time.Hour, a.AcquiredAt.Add(2 * time.Hour)}, // later: moved, from acquisition
	} {
		l := claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, MinHold: p.hold})
		if l.Token != a.Token || !sameInstant(l.HoldUntil, p.want) {
			t.Errorf("refresh with a hold of %v: token %d, HoldUntil %v; want token %d, HoldUntil %v", p.hold, l.Token, l.HoldUntil, a.Token, p.want)
		}
		if g := get(t, s.svc, task); g == nil || !sameInstant(g.HoldUntil, p.want) {
			t.Errorf("get after a refresh with a hold of %v: %v, want HoldUntil %v", p.hold, g, p.want)
		}
	}
	r := renewOK(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", TTL: 2 * time.Minute})
	if !sameInstant(r.HoldUntil, a.AcquiredAt.Add(2*time.Hour)) {
		t.Errorf("renewal: HoldUntil %v, want it kept at %v", r.HoldUntil, a.AcquiredAt.Add(2*time.Hour))
	}
}

// A grant without a hold carries none of the previous lease's: once a
// resting task is granted again, its release frees it at once.
func (s *suite) testMinHoldGrantClears(t *testing.T) {
	task := uniqueTask(t)
	a := claimHold(t, s.svc, task, "a", time.Minute, minHold)
	releaseOK(t, s.svc, task, "a", a.Token)
	b := waitHoldPassed(t, s.svc, task, "b", a)
	if !b.HoldUntil.IsZero() {
		t.Errorf("grant without a hold: HoldUntil %v, want none", b.HoldUntil)
	}
	res, err := s.svc.ReleaseHold(t.Context(), leasecore.ReleaseParams{Task: task, Owner: "b"})
	if err != nil || !res.Released || !res.HoldUntil.IsZero() {
		t.Fatalf("release of a grant without a hold = %+v, %v; want released with no HoldUntil", res, err)
	}
	claim(t, s.svc, task, "c", time.Minute)
}

// A task's declared minimum hold is kept with its spelling, and applies to
// its claims that ask for none; a claim's own hold wins.
func (s *suite) testMinHoldDeclared(t *testing.T) {
	task := uniqueTask(t)
	d, err := s.svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: task, TTL: time.Minute, MinHold: 90 * time.Minute, MinHoldSpelling: "90m"}, leasecore.Writer{})
	if err != nil {
		t.Fatalf("declare %s with a minimum hold: %v", task, err)
	}
	if d.MinHold != 90*time.Minute || d.MinHoldSpelling != "90m" {
		t.Errorf("declared: MinHold %v (%q), want 90m0s (\"90m\")", d.MinHold, d.MinHoldSpelling)
	}
	if g, err := s.svc.GetTask(t.Context(), task); err != nil || g == nil || g.MinHold != 90*time.Minute || g.MinHoldSpelling != "90m" {
		t.Errorf("read back: %+v, %v; want MinHold 90m0s spelled \"90m\"", g, err)
	}
	a := claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute})
	if want := a.AcquiredAt.Add(90 * time.Minute); !sameInstant(a.HoldUntil, want) {
		t.Errorf("claim asking no hold of a task declaring 90m: HoldUntil %v, want %v", a.HoldUntil, want)
	}
	releaseOK(t, s.svc, task, "a", a.Token)
	_, err = s.svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: "b", TTL: time.Minute})
	mustRest(t, err, task, a)

	other := uniqueTask(t) + "-own"
	if _, err := s.svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: other, TTL: time.Minute, MinHold: time.Hour}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	b := claimHold(t, s.svc, other, "b", time.Minute, 50*time.Millisecond)
	waitClockPast(t, s.svc, b, 100*time.Millisecond)
	releaseOK(t, s.svc, other, "b", b.Token)
	claim(t, s.svc, other, "c", time.Minute) // the claim's 50 ms hold, not the declared hour
}
