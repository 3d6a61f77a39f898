package storetest

import (
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
