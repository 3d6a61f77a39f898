package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// The credential cases: every history event records the credential of the
// operation that recorded it (leasecore.Event.Credential): the claimer's
// for acquired, the refused renewer's for lost, the releaser's for
// released. An operation that names none records none; every other case of
// the suite expects that. An expired event has none, whoever recorded it (a
// claim, a late renewal, the expiry sweep): nobody ended the lease, and the
// event must not depend on who noticed first. Refreshes and renewals record
// nothing, so their credentials appear nowhere.

// releaseAs releases through svc for credential and returns what the store
// answered; any error fails t.
func releaseAs(t *testing.T, svc *leasecore.Service, task, owner string, token int64, credential string) bool {
	t.Helper()
	ok, err := svc.Release(t.Context(), leasecore.ReleaseParams{Task: task, Owner: owner, Token: token, Credential: credential})
	if err != nil {
		t.Fatalf("release %s by %q for %q: %v", task, owner, credential, err)
	}
	return ok
}

// Each kind of event carries the credential of the operation that recorded
// it, including names at the edges of the rule.
func (s *suite) testCredentialEachEventKind(t *testing.T) {
	base := uniqueTask(t)
	long := strings.Repeat("k", leasecore.MaxCredentialLen)
	const special = "team-a/deploy_bot.v2:eu@prod"

	// acquired, then released by another credential of the same owner;
	// the refresh and renewals in between record nothing.
	task := base + "-released"
	l := claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, Credential: long})
	claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, Credential: "refresher"})
	renewOK(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Credential: "renewer"})
	if r := s.svc.RenewBatch(t.Context(), []leasecore.RenewParams{{Task: task, Owner: "a", Credential: "batch-renewer"}}); r[0].Err != nil {
		t.Fatalf("batch renewal: %v", r[0].Err)
	}
	mustHistory(t, s.svc, task, acquired("a", l.Token).by(long))
	if releaseAs(t, s.svc, task, "b", 0, "stranger") {
		t.Fatal("another owner's release reported true")
	}
	if !releaseAs(t, s.svc, task, "a", l.Token, special) {
		t.Fatal("the owner's release reported false")
	}
	mustHistory(t, s.svc, task, released("a", l.Token).by(special), acquired("a", l.Token).by(long))

	// expired, recorded by the owner's next claim: no credential, though
	// both claims named one.
	task = base + "-expired"
	old := claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: shortTTL, Credential: "first"})
	waitExpired(t, s.svc, task)
	again := claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, Credential: "second"})
	mustHistory(t, s.svc, task, acquired("a", again.Token).by("second"), expired("a", old.Token), acquired("a", old.Token).by("first"))

	// expired, recorded by another owner's claim under another
	// credential: neither the successor's nor the holder's.
	task = base + "-taken"
	old = claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "holder", TTL: shortTTL, Credential: "holder-cred"})
	waitExpired(t, s.svc, task)
	next := claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "successor", TTL: time.Minute, Credential: "successor-cred"})
	want := []wantEvent{acquired("successor", next.Token).by("successor-cred"), expired("holder", old.Token), acquired("holder", old.Token).by("holder-cred")}
	mustHistory(t, s.svc, task, want...)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "holder", Token: old.Token, Credential: "stale"}, leasecore.LostHeldByOther)
	mustHistory(t, s.svc, task, want...)

	// lost, recorded by the refused renewal: the renewer's credential,
	// after the lease's expired, which has none; the owner's next claim
	// records only its acquired.
	task = base + "-lost"
	old = claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: shortTTL, Credential: "holder-cred"})
	waitExpired(t, s.svc, task)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Credential: "late-renewer"}, leasecore.LostExpired)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Credential: "later-renewer"}, leasecore.LostExpired)
	mustHistory(t, s.svc, task, lost("a", old.Token).by("late-renewer"), expired("a", old.Token), acquired("a", old.Token).by("holder-cred"))
	again = claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, Credential: "reclaimer"})
	mustHistory(t, s.svc, task, acquired("a", again.Token).by("reclaimer"), lost("a", old.Token).by("late-renewer"), expired("a", old.Token),
		acquired("a", old.Token).by("holder-cred"))
}

// A batch renewal refused for many expired leases records each lease's
// loss under its own renewal's credential: renewals of a batch do not share
// one. A renewal by another owner lends the lease's loss nothing, and of
// two refused renewals of one lease the first records it.
func (s *suite) testCredentialRenewBatch(t *testing.T) {
	base := uniqueTask(t)
	const n = 6
	task := func(i int) string { return fmt.Sprintf("%s-%d", base, i) }
	leases := make([]*leasecore.Lease, n)
	for i := range leases {
		leases[i] = claimOK(t, s.svc, leasecore.ClaimParams{Task: task(i), Owner: "a", TTL: shortTTL, Credential: fmt.Sprintf("holder-%d", i)})
	}
	for i := range leases {
		waitExpired(t, s.svc, task(i))
	}
	ps := []leasecore.RenewParams{{Task: task(1), Owner: "b", Credential: "stranger"}}
	for i := range n {
		ps = append(ps, leasecore.RenewParams{Task: task(i), Owner: "a", Credential: fmt.Sprintf("renewer-%d", i)})
	}
	ps = append(ps, leasecore.RenewParams{Task: task(0), Owner: "a", Credential: "renewer-again"})
	for i, r := range s.svc.RenewBatch(t.Context(), ps) {
		reason := leasecore.LostExpired
		if ps[i].Owner == "b" {
			reason = leasecore.LostNotHeld
		}
		if r.Lease != nil {
			t.Fatalf("renewal %d (%s by %q) renewed an expired lease: %s", i, ps[i].Task, ps[i].Owner, show(r.Lease))
		}
		mustLost(t, r.Err, reason)
	}
	for i, l := range leases {
		mustHistory(t, s.svc, task(i), lost("a", l.Token).by(fmt.Sprintf("renewer-%d", i)), expired("a", l.Token), acquired("a", l.Token).by(fmt.Sprintf("holder-%d", i)))
	}
}

// Concurrent claims and releases, which a driver may send in one batch,
// each record their own credential: fresh grants, grants over expired
// leases (whose expired events have none), and releases.
func (s *suite) testCredentialConcurrent(t *testing.T) {
	base := uniqueTask(t)
	const n = 16
	task := func(i int) string { return fmt.Sprintf("%s-%02d", base, i) }
	concurrently := func(what string, op func(i int) error) {
		t.Helper()
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				errs[i] = op(i)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s %s: %v", what, task(i), err)
			}
		}
	}
	old := make([]*leasecore.Lease, n)
	concurrently("claim", func(i int) (err error) {
		old[i], err = s.svc.Claim(t.Context(), leasecore.ClaimParams{Task: task(i), Owner: "old", TTL: shortTTL, Credential: fmt.Sprintf("old-%d", i)})
		return err
	})
	for i := range n {
		waitExpired(t, s.svc, task(i))
	}
	next := make([]*leasecore.Lease, n)
	concurrently("take over", func(i int) (err error) {
		next[i], err = s.svc.Claim(t.Context(), leasecore.ClaimParams{Task: task(i), Owner: fmt.Sprintf("new-%d", i), TTL: time.Minute, Credential: fmt.Sprintf("claimer-%d", i)})
		return err
	})
	concurrently("release", func(i int) error {
		ok, err := s.svc.Release(t.Context(), leasecore.ReleaseParams{Task: task(i), Owner: next[i].Owner, Token: next[i].Token, Credential: fmt.Sprintf("releaser-%d", i)})
		if err == nil && !ok {
			err = fmt.Errorf("the holder's release reported false")
		}
		return err
	})
	for i := range n {
		mustHistory(t, s.svc, task(i),
			released(next[i].Owner, next[i].Token).by(fmt.Sprintf("releaser-%d", i)),
			acquired(next[i].Owner, next[i].Token).by(fmt.Sprintf("claimer-%d", i)),
			expired("old", old[i].Token),
			acquired("old", old[i].Token).by(fmt.Sprintf("old-%d", i)))
	}
}
