package storetest

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// Tokens never repeat or go down across a restart: grants on one store, the
// store closed with a lease still live, a new store over the same data sees
// that lease and grants the next token after it.
func (s *suite) testTokenMonotonicAcrossReopen(t *testing.T) {
	task := uniqueTask(t)

	first := s.open(t, s.d.Open)
	svc := leasecore.New(first)
	var last *leasecore.Lease
	for i, owner := range []string{"a", "a", "b"} {
		l := claim(t, svc, task, owner, time.Minute)
		if last != nil && l.Token != last.Token+1 {
			t.Fatalf("grant %d: token %d, want %d", i+1, l.Token, last.Token+1)
		}
		if i < 2 {
			releaseOK(t, svc, task, owner, l.Token)
		}
		last = l
	}
	if err := first.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	second := s.open(t, s.d.Open)
	svc = leasecore.New(second)
	checkSame(t, "live lease seen by the re-opened store", get(t, svc, task), last)
	mustHeld(t, errOf(svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: "c", TTL: time.Minute})), task, "b")
	releaseOK(t, svc, task, "b", last.Token)

	l := claim(t, svc, task, "a", time.Minute)
	if l.Token != last.Token+1 {
		t.Errorf("first grant after re-opening: token %d, want %d (the counter must survive a restart)", l.Token, last.Token+1)
	}
}

// Two stores over the same data are one lease table: a grant through one is
// held against the other, and a release through the other ends it.
func (s *suite) testTokenSharedBetweenStores(t *testing.T) {
	task := uniqueTask(t)
	other := leasecore.New(s.open(t, s.d.Open))

	a := claim(t, s.svc, task, "a", time.Minute)
	checkSame(t, "the other store's view", get(t, other, task), a)
	mustHeld(t, errOf(other.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: "b", TTL: time.Minute})), task, "a")

	r := renewOK(t, other, leasecore.RenewParams{Task: task, Owner: "a", Token: a.Token})
	if r.RenewCount != 1 {
		t.Errorf("renewal through the other store: %s, want renew_count 1", show(r))
	}
	releaseOK(t, other, task, "a", a.Token)
	mustGone(t, s.svc, task)

	b := claim(t, other, task, "b", time.Minute)
	if b.Token != a.Token+1 {
		t.Errorf("grant through the other store: token %d, want %d", b.Token, a.Token+1)
	}
}
