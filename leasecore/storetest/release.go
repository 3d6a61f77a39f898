package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// A release ends the owner's live lease once: true, then false. The task is
// free afterwards, gone from get and list.
func (s *suite) testReleaseIdempotent(t *testing.T) {
	task := uniqueTask(t)
	claim(t, s.svc, task, "a", time.Minute)
	if !release(t, s.svc, task, "a", 0) {
		t.Fatal("first release = false, want true")
	}
	if release(t, s.svc, task, "a", 0) {
		t.Error("second release = true, want false: release is idempotent")
	}
	mustGone(t, s.svc, task)
	for _, l := range listed(t, s.svc, task) {
		t.Errorf("list shows released lease %s", show(&l))
	}
	claim(t, s.svc, task, "b", time.Minute) // free: no ErrHeld
}

// A release naming the lease's token ends it.
func (s *suite) testReleaseWithToken(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", time.Minute)
	releaseOK(t, s.svc, task, "a", a.Token)
	mustGone(t, s.svc, task)
}

// A release by the owner under a wrong token is a no-op: false, and the
// lease is untouched.
func (s *suite) testReleaseWrongToken(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", time.Minute)
	for _, token := range []int64{a.Token + 1, a.Token + 1000} {
		if release(t, s.svc, task, "a", token) {
			t.Errorf("release with token %d of a lease under token %d = true, want false", token, a.Token)
		}
	}
	checkSame(t, "lease after releases with wrong tokens", get(t, s.svc, task), a)
}

// A release by another owner is a no-op, even with the lease's token.
func (s *suite) testReleaseNotOwner(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", time.Minute)
	for _, token := range []int64{0, a.Token} {
		if release(t, s.svc, task, "b", token) {
			t.Errorf("release by a non-owner (token %d) = true, want false", token)
		}
	}
	checkSame(t, "lease after releases by a non-owner", get(t, s.svc, task), a)
}

// A stale holder never releases its successor's lease: A's lease expires, B
// claims, A's release (with or without its old token) is false and B still
// holds the task under the same lease.
func (s *suite) testReleaseStaleAfterRegrant(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", shortTTL)
	waitExpired(t, s.svc, task)
	b := claim(t, s.svc, task, "b", time.Minute)

	for _, token := range []int64{0, a.Token} {
		if release(t, s.svc, task, "a", token) {
			t.Errorf("stale holder's release (token %d) = true, want false: B holds the task now", token)
		}
	}
	checkSame(t, "B's lease after the stale release", get(t, s.svc, task), b)
	mustHeld(t, errOf(s.svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: "c", TTL: time.Minute})), task, "b")
	releaseOK(t, s.svc, task, "b", b.Token)
}

// A release of the owner's own expired lease is a no-op (false): there was
// no live lease to end. The counter is untouched by it.
func (s *suite) testReleaseExpired(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", shortTTL)
	waitExpired(t, s.svc, task)
	if release(t, s.svc, task, "a", 0) {
		t.Error("release of an expired lease = true, want false")
	}
	if release(t, s.svc, task, "a", a.Token) {
		t.Error("release of an expired lease with its token = true, want false")
	}
	if l := claim(t, s.svc, task, "a", time.Minute); l.Token != a.Token+1 {
		t.Errorf("claim after releasing an expired lease: token %d, want %d", l.Token, a.Token+1)
	}
}

// A release of a task never claimed is false, not an error, and writes
// nothing.
func (s *suite) testReleaseNeverClaimed(t *testing.T) {
	task := uniqueTask(t)
	if release(t, s.svc, task, "a", 0) || release(t, s.svc, task, "a", 7) {
		t.Error("release of a task never claimed = true, want false")
	}
	mustGone(t, s.svc, task)
}

// The token counter survives release: each new grant after a release gets
// exactly the next token, whoever claims.
func (s *suite) testReleaseCounterSurvives(t *testing.T) {
	task := uniqueTask(t)
	prev := claim(t, s.svc, task, "a", time.Minute)
	for i, owner := range []string{"a", "b", "b", "a"} {
		releaseOK(t, s.svc, task, prev.Owner, prev.Token)
		l := claim(t, s.svc, task, owner, time.Minute)
		if l.Token != prev.Token+1 {
			t.Fatalf("grant %d after release: token %d, want %d", i+2, l.Token, prev.Token+1)
		}
		prev = l
	}
}

// errOf keeps the error of a two-valued call.
func errOf[T any](_ T, err error) error { return err }

// pageErrOf is errOf for a page of a list.
func pageErrOf[T any](_ T, _ string, err error) error { return err }

// A revoke (Service.Revoke, an operator's release) ends whoever's live
// lease and records a released event with the holder as owner, the
// operator's credential and leasecore.RevokedDetail, which a driver may
// send in one batch with others (each keeps its own detail and
// credential); a revoke of another token, or of no live lease, ends
// nothing and records nothing; an owner's own release records no detail.
func (s *suite) testReleaseRevoke(t *testing.T) {
	base := uniqueTask(t)
	const n = 8
	task := func(i int) string { return fmt.Sprintf("%s-%02d", base, i) }
	held := make([]*leasecore.Lease, n)
	for i := range n {
		held[i] = claim(t, s.svc, task(i), fmt.Sprintf("holder-%d", i), time.Minute)
	}

	// Another token, then the right one.
	if l, err := s.svc.Revoke(t.Context(), leasecore.RevokeParams{Task: task(0), Token: held[0].Token + 1, Credential: "operator"}); err != nil || l != nil {
		t.Fatalf("revoke under another token = %v, %v; want nothing ended", l, err)
	}
	checkSame(t, "lease after a revoke under another token", get(t, s.svc, task(0)), held[0])

	ended := make([]*leasecore.Lease, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			p := leasecore.RevokeParams{Task: task(i), Credential: fmt.Sprintf("operator-%d", i)}
			if i == 0 {
				p.Token = held[0].Token
			}
			ended[i], errs[i] = s.svc.Revoke(t.Context(), p)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || ended[i] == nil || ended[i].Token != held[i].Token || ended[i].Owner != held[i].Owner {
			t.Fatalf("revoke %s = %v, %v; want the lease of %q under token %d", task(i), show(ended[i]), errs[i], held[i].Owner, held[i].Token)
		}
		mustGone(t, s.svc, task(i))
		evs := mustHistory(t, s.svc, task(i), released(held[i].Owner, held[i].Token).by(fmt.Sprintf("operator-%d", i)), acquired(held[i].Owner, held[i].Token))
		if evs[0].Detail != leasecore.RevokedDetail {
			t.Errorf("%s: the revoke's released event has detail %q, want %q", task(i), evs[0].Detail, leasecore.RevokedDetail)
		}
	}

	// Nothing live: nothing ended, nothing recorded.
	if l, err := s.svc.Revoke(t.Context(), leasecore.RevokeParams{Task: task(1), Credential: "operator"}); err != nil || l != nil {
		t.Fatalf("revoke of no live lease = %v, %v; want nothing ended", show(l), err)
	}
	mustHistory(t, s.svc, task(1), released(held[1].Owner, held[1].Token).by("operator-1"), acquired(held[1].Owner, held[1].Token))

	// The owner's own release says nothing more.
	l := claim(t, s.svc, task(1), "owner", time.Minute)
	releaseOK(t, s.svc, task(1), "owner", l.Token)
	if evs := events(t, s.svc, task(1)); evs[0].Detail != "" {
		t.Errorf("an owner's release recorded detail %q, want none", evs[0].Detail)
	}
}
