package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// The history cases: what the lease operations record, and what pruning
// deletes. A lease's history is one event when it is granted (acquired) and
// one when it ends: released by its owner, or, for a lease that ran out
// unreleased, expired, at its expiry and for nobody, recorded by whichever
// the store sees first of the expiry sweep, a claim of the task by any
// owner, and its owner's refused late renewal, the same way whoever it was
// (so that the history does not depend on whether anyone watched). A
// refused late renewal also records lost, once per lease. Refreshes,
// renewals and refused operations record nothing more. taken_over is a
// kind older stores wrote and the history may still hold; no store writes
// it now. The pruning cases run on a database of their own (see isolated):
// PruneHistory is store-wide, and only there can they count what it deletes.

// wantEvent is what a case expects of one event. The constructors below
// expect no credential; by names one.
type wantEvent struct {
	kind       leasecore.EventKind
	owner      string
	token      int64
	credential string
}

// by is w recorded for credential.
func (w wantEvent) by(credential string) wantEvent {
	w.credential = credential
	return w
}

// matches reports whether e is what w expects.
func (w wantEvent) matches(e leasecore.Event) bool {
	return e.Kind == w.kind && e.Owner == w.owner && e.Token == w.token && e.Credential == w.credential
}

func (w wantEvent) String() string {
	return fmt.Sprintf("%s owner %q token %d credential %q", w.kind, w.owner, w.token, w.credential)
}

func acquired(owner string, token int64) wantEvent {
	return wantEvent{kind: leasecore.EventAcquired, owner: owner, token: token}
}
func released(owner string, token int64) wantEvent {
	return wantEvent{kind: leasecore.EventReleased, owner: owner, token: token}
}
func expired(owner string, token int64) wantEvent {
	return wantEvent{kind: leasecore.EventExpired, owner: owner, token: token}
}
func lost(owner string, token int64) wantEvent {
	return wantEvent{kind: leasecore.EventLost, owner: owner, token: token}
}

func showEvents(evs []leasecore.Event) string {
	if len(evs) == 0 {
		return "  <none>"
	}
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  #%d %s %s owner %q token %d credential %q at %s detail %q\n", e.ID, e.Task, e.Kind, e.Owner, e.Token,
			e.Credential, e.At.UTC().Format(time.RFC3339Nano), e.Detail)
	}
	return b.String()
}

// sameEvents reports whether two readings of a history are the same events.
func sameEvents(a, b []leasecore.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Task != b[i].Task || a[i].Kind != b[i].Kind || a[i].Owner != b[i].Owner ||
			a[i].Token != b[i].Token || !sameInstant(a[i].At, b[i].At) || a[i].Detail != b[i].Detail || a[i].Credential != b[i].Credential {
			return false
		}
	}
	return true
}

// checkHistoryOrder fails t unless evs, one task's history as History
// returns it, is newest first: IDs strictly decreasing, times not
// increasing (to the model's precision), every event of task, with a store
// time.
func checkHistoryOrder(t *testing.T, task string, evs []leasecore.Event) {
	t.Helper()
	for i, e := range evs {
		if e.Task != task || e.ID <= 0 || e.At.IsZero() {
			t.Errorf("history of %s: event %d is of task %q with id %d at %v, want the task's, a positive id, a store time", task, i, e.Task, e.ID, e.At)
		}
		if i > 0 && (e.ID >= evs[i-1].ID || e.At.After(evs[i-1].At.Add(precision))) {
			t.Errorf("history of %s is not newest first (ids strictly decreasing, times not increasing):\n%s", task, showEvents(evs))
			return
		}
	}
}

// mustHistory reads task's history through svc and fails t unless it is
// exactly want, newest first. It returns the events.
func mustHistory(t *testing.T, svc *leasecore.Service, task string, want ...wantEvent) []leasecore.Event {
	t.Helper()
	evs := events(t, svc, task)
	checkHistoryOrder(t, task, evs)
	ok := len(evs) == len(want)
	for i := 0; ok && i < len(evs); i++ {
		ok = want[i].matches(evs[i])
	}
	if !ok {
		var b strings.Builder
		for _, w := range want {
			fmt.Fprintf(&b, "  %s\n", w)
		}
		t.Fatalf("history of %s (newest first):\n%swant:\n%s", task, showEvents(evs), b.String())
	}
	return evs
}

// A grant records one acquired event with the lease's owner, token and
// acquired_at. Refreshes, renewals (single and batched) and every refused
// operation record nothing.
func (s *suite) testHistoryAcquired(t *testing.T) {
	task := uniqueTask(t)
	l := claim(t, s.svc, task, "a", time.Minute)
	first := mustHistory(t, s.svc, task, acquired("a", l.Token))
	if !sameInstant(first[0].At, l.AcquiredAt) {
		t.Errorf("acquired event at %v, want the lease's acquired_at %v", first[0].At, l.AcquiredAt)
	}

	claim(t, s.svc, task, "a", 2*time.Minute) // refresh
	renewOK(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a"})
	renewOK(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: l.Token, TTL: time.Minute})
	if r := s.svc.RenewBatch(t.Context(), []leasecore.RenewParams{{Task: task, Owner: "a"}}); r[0].Err != nil {
		t.Fatalf("batch renewal: %v", r[0].Err)
	}
	_, err := s.svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: "b", TTL: time.Minute})
	mustHeld(t, err, task, "a")
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "b"}, leasecore.LostHeldByOther)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: l.Token + 1}, leasecore.LostTokenMismatch)
	if release(t, s.svc, task, "b", 0) || release(t, s.svc, task, "a", l.Token+1) {
		t.Fatal("a release by another owner or with a wrong token reported true")
	}
	if got := events(t, s.svc, task); !sameEvents(got, first) {
		t.Errorf("refreshes, renewals and refused operations changed the history:\n%swant:\n%s", showEvents(got), showEvents(first))
	}
}

// A release records a released event; a release of what is not held
// records nothing; the next owner's grant is acquired, with no takeover.
func (s *suite) testHistoryReleased(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", time.Minute)
	releaseOK(t, s.svc, task, "a", a.Token)
	evs := mustHistory(t, s.svc, task, released("a", a.Token), acquired("a", a.Token))
	if evs[0].At.Before(a.AcquiredAt.Add(-precision)) {
		t.Errorf("released event at %v, before the lease was acquired at %v", evs[0].At, a.AcquiredAt)
	}
	if release(t, s.svc, task, "a", 0) {
		t.Fatal("second release reported true")
	}
	mustHistory(t, s.svc, task, released("a", a.Token), acquired("a", a.Token))

	b := claim(t, s.svc, task, "b", time.Minute)
	evs = mustHistory(t, s.svc, task, acquired("b", b.Token), released("a", a.Token), acquired("a", a.Token))
	checkWithin(t, "released event", evs[1].At, a.AcquiredAt, b.AcquiredAt)
	if !sameInstant(evs[0].At, b.AcquiredAt) {
		t.Errorf("acquired event at %v, want the lease's acquired_at %v", evs[0].At, b.AcquiredAt)
	}
}

// mustExpiredAt fails t unless e, the expired event of lease l, is stamped
// with l's expiry: the moment the lease ended, not the moment someone
// noticed, and has no detail.
func mustExpiredAt(t *testing.T, what string, e leasecore.Event, l *leasecore.Lease) {
	t.Helper()
	if !sameInstant(e.At, l.ExpiresAt) || e.Detail != "" {
		t.Errorf("%s: expired event at %v with detail %q, want the lease's expiry %v and no detail", what, e.At, e.Detail, l.ExpiresAt)
	}
}

// A lease that ran out and is claimed again by its owner records expired
// (the old token, at its expiry) and then acquired (the new one).
func (s *suite) testHistoryExpired(t *testing.T) {
	task := uniqueTask(t)
	old := claim(t, s.svc, task, "a", shortTTL)
	waitExpired(t, s.svc, task)
	mustHistory(t, s.svc, task, acquired("a", old.Token))

	again := claim(t, s.svc, task, "a", time.Minute)
	evs := mustHistory(t, s.svc, task, acquired("a", again.Token), expired("a", old.Token), acquired("a", old.Token))
	mustExpiredAt(t, task, evs[1], old)
}

// A lease that ran out and is claimed by another owner records expired
// (the old owner and token, at its expiry: not taken_over, which would say
// only who noticed first) and then acquired; the stale holder's refused
// renewal adds nothing.
func (s *suite) testHistoryExpiredThenOtherOwner(t *testing.T) {
	task := uniqueTask(t)
	const holder, successor = "holder-7c1f", "successor-9e4b"
	old := claim(t, s.svc, task, holder, shortTTL)
	waitExpired(t, s.svc, task)

	next := claim(t, s.svc, task, successor, time.Minute)
	evs := mustHistory(t, s.svc, task, acquired(successor, next.Token), expired(holder, old.Token), acquired(holder, old.Token))
	mustExpiredAt(t, task, evs[1], old)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: holder, Token: old.Token}, leasecore.LostHeldByOther)
	if got := events(t, s.svc, task); !sameEvents(got, evs) {
		t.Errorf("the stale holder's renewal changed the history:\n%swant:\n%s", showEvents(got), showEvents(evs))
	}
}

// An owner that renews after its lease ran out records the lease's end
// (expired, at its expiry) and its loss (lost, its owner and token, at the
// renewal), once: further refused renewals, batched or not, and another
// owner's, add nothing, and the owner's next claim records only acquired,
// since the lease's end is already recorded.
func (s *suite) testHistoryLost(t *testing.T) {
	task := uniqueTask(t)
	old := claim(t, s.svc, task, "a", shortTTL)
	waitExpired(t, s.svc, task)

	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a"}, leasecore.LostExpired)
	evs := mustHistory(t, s.svc, task, lost("a", old.Token), expired("a", old.Token), acquired("a", old.Token))
	if evs[0].At.Before(old.ExpiresAt.Add(-precision)) {
		t.Errorf("lost event at %v, before the lease expired at %v", evs[0].At, old.ExpiresAt)
	}
	mustExpiredAt(t, task, evs[1], old)

	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: old.Token, TTL: time.Minute}, leasecore.LostExpired)
	if r := s.svc.RenewBatch(t.Context(), []leasecore.RenewParams{{Task: task, Owner: "a"}}); r[0].Err == nil {
		t.Fatalf("batch renewal of an expired lease renewed it: %s", show(r[0].Lease))
	} else {
		mustLost(t, r[0].Err, leasecore.LostExpired)
	}
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "b"}, leasecore.LostNotHeld)
	if got := events(t, s.svc, task); !sameEvents(got, evs) {
		t.Errorf("further refused renewals changed the history:\n%swant:\n%s", showEvents(got), showEvents(evs))
	}

	again := claim(t, s.svc, task, "a", time.Minute)
	mustHistory(t, s.svc, task, acquired("a", again.Token), lost("a", old.Token), expired("a", old.Token), acquired("a", old.Token))
}

// History is newest first, ids strictly increasing with time, and a limit
// returns exactly the newest events.
func (s *suite) testHistoryOrderAndLimit(t *testing.T) {
	task := uniqueTask(t)
	var want []wantEvent
	for _, owner := range []string{"o1", "o2", "o3"} {
		l := claim(t, s.svc, task, owner, time.Minute)
		releaseOK(t, s.svc, task, owner, l.Token)
		want = append([]wantEvent{released(owner, l.Token), acquired(owner, l.Token)}, want...)
	}
	all := mustHistory(t, s.svc, task, want...)
	for limit := 1; limit <= len(all)+1; limit++ {
		got, err := s.svc.History(t.Context(), task, limit)
		if err != nil {
			t.Fatalf("history limit %d: %v", limit, err)
		}
		if n := min(limit, len(all)); !sameEvents(got, all[:n]) {
			t.Errorf("history limit %d:\n%swant the newest %d:\n%s", limit, showEvents(got), n, showEvents(all[:n]))
		}
	}
}

// A task never claimed has no history.
func (s *suite) testHistoryNeverClaimed(t *testing.T) {
	task := uniqueTask(t)
	if evs := events(t, s.svc, task); len(evs) != 0 {
		t.Errorf("history of a task never claimed:\n%s", showEvents(evs))
	}
	mustHistory(t, s.svc, task+"-never")
}

// Of 32 contenders, only the winner's grant is recorded: one acquired event
// on a free task, and one expired plus one acquired on an expired one.
func (s *suite) testHistoryRace(t *testing.T) {
	task := uniqueTask(t)
	const holder = "old-holder"
	old := claim(t, s.svc, task, holder, shortTTL)
	waitExpired(t, s.svc, task)
	win := race(t, []*leasecore.Service{s.svc}, task, time.Minute)
	evs := mustHistory(t, s.svc, task, acquired(win.Owner, win.Token), expired(holder, old.Token), acquired(holder, old.Token))
	mustExpiredAt(t, task, evs[1], old)

	free := uniqueTask(t) + "-free"
	win = race(t, []*leasecore.Service{s.svc}, free, time.Minute)
	mustHistory(t, s.svc, free, acquired(win.Owner, win.Token))
}

// fiveEvents gives task five events through svc: acquired, released,
// acquired, released, acquired (newest last), and returns its history.
func fiveEvents(t *testing.T, svc *leasecore.Service, task string) []leasecore.Event {
	t.Helper()
	for range 2 {
		l := claim(t, svc, task, "a", time.Minute)
		releaseOK(t, svc, task, "a", l.Token)
	}
	claim(t, svc, task, "a", time.Minute)
	evs := events(t, svc, task)
	if len(evs) != 5 {
		t.Fatalf("%s has %d events, want 5:\n%s", task, len(evs), showEvents(evs))
	}
	return evs
}

// prune runs one pass through svc and returns how many events it deleted.
func prune(t *testing.T, svc *leasecore.Service) int64 {
	t.Helper()
	n, err := svc.PruneHistory(t.Context())
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if n < 0 {
		t.Fatalf("prune deleted %d events", n)
	}
	return n
}

// mustKept fails t unless task's history is exactly the newest n of before.
func mustKept(t *testing.T, svc *leasecore.Service, task string, before []leasecore.Event, n int) {
	t.Helper()
	if got := events(t, svc, task); !sameEvents(got, before[:n]) {
		t.Errorf("after pruning, %s keeps:\n%swant its newest %d:\n%s", task, showEvents(got), n, showEvents(before[:n]))
	}
}

// Pruning keeps each task's newest keep_last events and reports how many it
// deleted; a task under a policy without bounds keeps everything, and a
// second pass deletes nothing.
func (s *suite) testPruneKeepLast(t *testing.T) {
	svc := leasecore.New(s.isolated(t))
	createPolicy(t, svc, leasecore.RetentionPolicy{Name: "last-two", KeepLast: 2})
	createPolicy(t, svc, leasecore.RetentionPolicy{Name: "forever"})
	task, other := uniqueTask(t), uniqueTask(t)+"-forever"
	createTask(t, svc, leasecore.TaskDecl{Name: task, TTL: time.Minute, RetentionPolicy: "last-two"})
	createTask(t, svc, leasecore.TaskDecl{Name: other, TTL: time.Minute, RetentionPolicy: "forever"})
	before, otherBefore := fiveEvents(t, svc, task), fiveEvents(t, svc, other)

	if n := prune(t, svc); n != 3 {
		t.Errorf("prune deleted %d events, want 3 (5 events, keep_last 2)", n)
	}
	mustKept(t, svc, task, before, 2)
	mustKept(t, svc, other, otherBefore, 5)
	if n := prune(t, svc); n != 0 {
		t.Errorf("second prune deleted %d events, want 0", n)
	}

	releaseOK(t, svc, task, "a", 0)
	after := events(t, svc, task)
	if n := prune(t, svc); n != 1 {
		t.Errorf("prune after one more event deleted %d, want 1", n)
	}
	mustKept(t, svc, task, after, 2)
}

// Pruning deletes the events older than keep_for by the store's clock, even
// within keep_last, and only once they are that old; a task under a longer
// policy keeps its events; ids are never reused after the newest events of
// the store were pruned.
func (s *suite) testPruneKeepFor(t *testing.T) {
	svc := leasecore.New(s.isolated(t))
	clock := newStoreClock(t, svc) // undeclared: the default policy keeps its one event
	createPolicy(t, svc, leasecore.RetentionPolicy{Name: "one-second", KeepFor: time.Second, KeepLast: 10})
	createPolicy(t, svc, leasecore.RetentionPolicy{Name: "one-hour", KeepFor: time.Hour})
	short, long := uniqueTask(t)+"-short", uniqueTask(t)+"-long"
	createTask(t, svc, leasecore.TaskDecl{Name: short, TTL: time.Minute, RetentionPolicy: "one-second"})
	createTask(t, svc, leasecore.TaskDecl{Name: long, TTL: time.Minute, RetentionPolicy: "one-hour"})
	clock.now()

	// The long task's events first, so the short task's are the store's
	// newest: pruning them must not let their ids be handed out again.
	l := claim(t, svc, long, "a", time.Minute)
	releaseOK(t, svc, long, "a", l.Token)
	longBefore := events(t, svc, long)
	l = claim(t, svc, short, "a", time.Minute)
	releaseOK(t, svc, short, "a", l.Token)
	shortBefore := mustHistory(t, svc, short, released("a", l.Token), acquired("a", l.Token))

	early := prune(t, svc)
	if now := clock.now(); now.Before(shortBefore[0].At.Add(time.Second)) {
		// The store's clock proves the events were younger than keep_for
		// throughout the pass.
		if early != 0 {
			t.Errorf("prune of events younger than keep_for deleted %d", early)
		}
		mustKept(t, svc, short, shortBefore, 2)
	}

	clock.waitPast(shortBefore[0].At.Add(time.Second + precision))
	if n := early + prune(t, svc); n != 2 {
		t.Errorf("prunes deleted %d events, want the 2 older than keep_for", n)
	}
	mustKept(t, svc, short, shortBefore, 0)
	mustKept(t, svc, long, longBefore, 2)

	again := claim(t, svc, short, "b", time.Minute)
	evs := mustHistory(t, svc, short, acquired("b", again.Token))
	if evs[0].ID <= shortBefore[0].ID {
		t.Errorf("event after pruning has id %d, not above the pruned %d: ids must never be reused", evs[0].ID, shortBefore[0].ID)
	}
}

// A task that is not declared, or declared without a policy, or whose
// declaration was deleted, follows the default policy, as it stands when
// pruning runs; a declared policy applies to its tasks only.
func (s *suite) testPruneDefaultPolicy(t *testing.T) {
	svc := leasecore.New(s.isolated(t))
	if _, err := svc.UpdatePolicy(t.Context(), leasecore.RetentionPolicy{Name: leasecore.DefaultPolicy, KeepLast: 2}, leasecore.Writer{}); err != nil {
		t.Fatalf("update the default policy: %v", err)
	}
	createPolicy(t, svc, leasecore.RetentionPolicy{Name: "last-three", KeepLast: 3})
	createPolicy(t, svc, leasecore.RetentionPolicy{Name: "forever"})
	base := uniqueTask(t)
	undeclared, noPolicy, three, forever, forgotten := base+"-undeclared", base+"-nopolicy", base+"-three", base+"-forever", base+"-forgotten"
	createTask(t, svc, leasecore.TaskDecl{Name: noPolicy, TTL: time.Minute})
	createTask(t, svc, leasecore.TaskDecl{Name: three, TTL: time.Minute, RetentionPolicy: "last-three"})
	createTask(t, svc, leasecore.TaskDecl{Name: forever, TTL: time.Minute, RetentionPolicy: "forever"})
	createTask(t, svc, leasecore.TaskDecl{Name: forgotten, TTL: time.Minute, RetentionPolicy: "forever"})
	before := map[string][]leasecore.Event{}
	for _, task := range []string{undeclared, noPolicy, three, forever, forgotten} {
		before[task] = fiveEvents(t, svc, task)
	}
	if ok, err := svc.DeleteTask(t.Context(), forgotten, leasecore.Writer{}); !ok || err != nil {
		t.Fatalf("delete %s = (%v, %v)", forgotten, ok, err)
	}

	if n := prune(t, svc); n != 3+3+2+0+3 {
		t.Errorf("prune deleted %d events, want 11 (default keep_last 2 for three tasks, keep_last 3 for one, no bound for one)", n)
	}
	mustKept(t, svc, undeclared, before[undeclared], 2)
	mustKept(t, svc, noPolicy, before[noPolicy], 2)
	mustKept(t, svc, three, before[three], 3)
	mustKept(t, svc, forever, before[forever], 5)
	mustKept(t, svc, forgotten, before[forgotten], 2)
}
