package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// The feed cases: a leasecore.HistoryFeed read through its cursor gives
// every event of the store once, in id order, from any position; the
// expiry sweep records each lease that ran out unreleased once, and what it
// records is the lease's end as far as claims and renewals are concerned;
// the change signal fires after a commit. They run for a driver whose
// Driver.HistoryFeed is set (or whose store implements the interface
// anyway), and fail, never skip, when such a driver's store does not. Most
// run on a database of their own (isolated): RecordExpiries is store-wide,
// and would record the ends that the history cases expect claims to
// record, and a case can only count a whole history where nobody else
// writes.

// feedCases lists the cases, or none when the driver has no feed.
func (s *suite) feedCases() []testCase {
	if _, ok := s.store.(leasecore.HistoryFeed); !ok && !s.d.HistoryFeed {
		return nil
	}
	return []testCase{
		{"InIDOrder", s.testFeedInIDOrder},
		{"ResumesExactly", s.testFeedResumes},
		{"FromNowSkipsOld", s.testFeedFromNow},
		{"ConcurrentWritersNothingSkipped", s.testFeedConcurrentWriters},
		{"ExpiriesRecordedOnce", s.testFeedExpiriesOnce},
		{"ExpiriesLimit", s.testFeedExpiriesLimit},
		{"PrunerRecordsExpiries", s.testFeedPrunerRecordsExpiries},
		{"Credentials", s.testFeedCredentials},
		{"ChangesSignalled", s.testFeedChangesSignalled},
		{"PositionAheadRefused", s.testFeedPositionAhead},
		{"PrunedNewestIsNotAhead", s.testFeedPrunedNewestNotAhead},
		{"RewoundHistoryIsTold", s.testFeedRewound},
	}
}

// feedOf is st's HistoryFeed; it fails t when st has none.
func feedOf(t *testing.T, st leasecore.Store) leasecore.HistoryFeed {
	t.Helper()
	f, ok := st.(leasecore.HistoryFeed)
	if !ok {
		inner := st
		if c, isWrapped := st.(interface{ unwrap() leasecore.Store }); isWrapped {
			inner = c.unwrap()
		}
		t.Fatalf("the driver's store %T does not implement leasecore.HistoryFeed (Driver.HistoryFeed says it does)", inner)
	}
	return f
}

// follow opens a cursor after id after and closes it when t ends.
func follow(t *testing.T, f leasecore.HistoryFeed, after int64) leasecore.HistoryCursor {
	t.Helper()
	cur, err := f.FollowHistory(opCtx(t), after)
	if err != nil {
		t.Fatalf("follow history after %d: %v", after, err)
	}
	t.Cleanup(func() {
		if err := cur.Close(); err != nil {
			t.Errorf("close cursor: %v", err)
		}
	})
	return cur
}

// readAll reads cur, limit events a call, until a call returns nothing and
// holds nothing back, failing t on an error, on events out of order or
// repeated, or on a position that does not follow what was delivered.
func readAll(t *testing.T, cur leasecore.HistoryCursor, limit int) []leasecore.Event {
	t.Helper()
	var all []leasecore.Event
	poll(t, time.Millisecond, "the cursor to catch up", func() bool {
		evs, err := cur.Next(opCtx(t), limit)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		checkRead(t, cur, all, evs, limit)
		all = append(all, evs...)
		return len(evs) == 0 && !cur.Pending()
	})
	return all
}

// checkRead fails t unless evs, one Next of at most limit events after the
// events before, rise in id above them, and the cursor's position is the
// last of them.
func checkRead(t *testing.T, cur leasecore.HistoryCursor, before, evs []leasecore.Event, limit int) {
	t.Helper()
	if len(evs) > limit {
		t.Fatalf("Next(%d) returned %d events", limit, len(evs))
	}
	for i, e := range evs {
		prev := int64(-1)
		switch {
		case i > 0:
			prev = evs[i-1].ID
		case len(before) > 0:
			prev = before[len(before)-1].ID
		}
		if e.ID <= prev {
			t.Fatalf("event %d after %d: not in rising id order\n%s", e.ID, prev, showEvents(append(slices.Clone(before), evs...)))
		}
		if e.At.IsZero() || e.Task == "" || e.Token < 1 {
			t.Errorf("event %+v: want a task, a token and a store time", e)
		}
	}
	if len(evs) > 0 && cur.Position() != evs[len(evs)-1].ID {
		t.Fatalf("position %d after delivering up to %d", cur.Position(), evs[len(evs)-1].ID)
	}
}

// mustFeed fails t unless evs are want, oldest first (the cursor's order),
// all of task.
func mustFeed(t *testing.T, evs []leasecore.Event, task string, want ...wantEvent) {
	t.Helper()
	ok := len(evs) == len(want)
	for i := 0; ok && i < len(evs); i++ {
		ok = evs[i].Task == task && want[i].matches(evs[i])
	}
	if !ok {
		var b strings.Builder
		for _, w := range want {
			fmt.Fprintf(&b, "  %s %s\n", task, w)
		}
		t.Fatalf("feed (oldest first):\n%swant:\n%s", showEvents(evs), b.String())
	}
}

// A pruning pass records the end of a lease that expired with nobody
// releasing or claiming it again, at its expiry, with no watch running: the
// history holds the same ends whether or not anyone watched.
func (s *suite) testFeedPrunerRecordsExpiries(t *testing.T) {
	st := s.isolated(t)
	svc := leasecore.New(st)
	gone := claim(t, svc, "gone", "a", shortTTL)
	live := claim(t, svc, "live", "x", longTTL)
	waitExpired(t, svc, "gone")
	if res, _, err := leasecore.NewPruner(svc, time.Minute, "pruner", nil).Once(opCtx(t)); err != nil || res != leasecore.Pruned {
		t.Fatalf("pruning pass: %s, %v; want pruned", res, err)
	}
	evs := mustHistory(t, svc, "gone", expired("a", gone.Token), acquired("a", gone.Token))
	if !sameInstant(evs[0].At, gone.ExpiresAt) {
		t.Errorf("expired event at %v, want the lease's expiry %v", evs[0].At, gone.ExpiresAt)
	}
	mustHistory(t, svc, "live", acquired("x", live.Token))
	if sw := sweep(t, feedOf(t, st), 10); sw.Recorded != 0 {
		t.Fatalf("a sweep after the pass recorded %d, want 0: each end once", sw.Recorded)
	}
}

// sweep calls RecordExpiries and fails t on an error.
func sweep(t *testing.T, f expirySweeper, limit int) leasecore.ExpirySweep {
	t.Helper()
	sw, err := f.RecordExpiries(opCtx(t), limit)
	if err != nil {
		t.Fatalf("record expiries: %v", err)
	}
	return sw
}

// Claims, releases, ends recorded by a claim and the expiry sweep's events
// come out of the cursor in id order, each once, with their kinds, owners
// and tokens, as History has them: an expired event a claim records comes
// before that claim's acquired, though it is stamped earlier than events
// of other tasks before it.
func (s *suite) testFeedInIDOrder(t *testing.T) {
	st := s.isolated(t)
	f, svc := feedOf(t, st), leasecore.New(st)
	cur := follow(t, f, 0)
	if evs := readAll(t, cur, 10); len(evs) != 0 {
		t.Fatalf("a new database's feed:\n%s", showEvents(evs))
	}

	a := claim(t, svc, "released", "a", longTTL)
	releaseOK(t, svc, "released", "a", a.Token)
	b := claim(t, svc, "taken", "b", shortTTL)
	waitExpired(t, svc, "taken")
	c := claim(t, svc, "taken", "c", longTTL)
	d := claim(t, svc, "swept", "d", shortTTL)
	waitExpired(t, svc, "swept")
	if sw := sweep(t, f, 10); sw.Recorded != 1 {
		t.Fatalf("sweep recorded %d, want 1 (swept's lease)", sw.Recorded)
	}

	evs := readAll(t, cur, 2)
	if len(evs) != 7 {
		t.Fatalf("feed has %d events, want 7:\n%s", len(evs), showEvents(evs))
	}
	mustFeed(t, evs[0:2], "released", acquired("a", a.Token), released("a", a.Token))
	mustFeed(t, evs[2:5], "taken", acquired("b", b.Token), expired("b", b.Token), acquired("c", c.Token))
	if !sameInstant(evs[3].At, b.ExpiresAt) {
		t.Errorf("the claim's expired event at %v, want the lease's expiry %v", evs[3].At, b.ExpiresAt)
	}
	mustFeed(t, evs[5:7], "swept", acquired("d", d.Token), expired("d", d.Token))
	if !sameInstant(evs[6].At, d.ExpiresAt) {
		t.Errorf("the sweep's expired event at %v, want the lease's expiry %v", evs[6].At, d.ExpiresAt)
	}
	for _, task := range []string{"released", "taken", "swept"} {
		hist := events(t, svc, task)
		slices.Reverse(hist)
		if fed := ofTask(evs, task); !sameEvents(fed, hist) {
			t.Errorf("feed of %s:\n%shistory (oldest first):\n%s", task, showEvents(fed), showEvents(hist))
		}
	}
}

// ofTask is the events of evs of task, in their order.
func ofTask(evs []leasecore.Event, task string) []leasecore.Event {
	var out []leasecore.Event
	for _, e := range evs {
		if e.Task == task {
			out = append(out, e)
		}
	}
	return out
}

// A cursor from an event's id gives exactly the events after it, whatever
// the limit; from the newest id, nothing until something new commits.
func (s *suite) testFeedResumes(t *testing.T) {
	st := s.isolated(t)
	f, svc := feedOf(t, st), leasecore.New(st)
	for i := range 3 {
		task := fmt.Sprintf("task-%d", i)
		l := claim(t, svc, task, "a", longTTL)
		releaseOK(t, svc, task, "a", l.Token)
	}
	all := readAll(t, follow(t, f, 0), 100)
	if len(all) != 6 {
		t.Fatalf("feed has %d events, want 6:\n%s", len(all), showEvents(all))
	}
	for k, e := range all {
		for _, limit := range []int{1, 4} {
			cur := follow(t, f, e.ID)
			if cur.Position() != e.ID {
				t.Errorf("cursor after %d: position %d", e.ID, cur.Position())
			}
			if got := readAll(t, cur, limit); !sameEvents(got, all[k+1:]) {
				t.Fatalf("resumed after %d (limit %d):\n%swant:\n%s", e.ID, limit, showEvents(got), showEvents(all[k+1:]))
			}
		}
	}
	cur := follow(t, f, all[len(all)-1].ID)
	l := claim(t, svc, "task-new", "b", longTTL)
	mustFeed(t, readAll(t, cur, 10), "task-new", acquired("b", l.Token))
}

// A cursor from now (after < 0) gives none of the events committed before
// it, and every one after.
func (s *suite) testFeedFromNow(t *testing.T) {
	st := s.isolated(t)
	f, svc := feedOf(t, st), leasecore.New(st)
	old := claim(t, svc, "old", "a", longTTL)
	cur := follow(t, f, -1)
	if evs := readAll(t, cur, 10); len(evs) != 0 {
		t.Fatalf("from now: old events delivered:\n%s", showEvents(evs))
	}
	releaseOK(t, svc, "old", "a", old.Token)
	l := claim(t, svc, "new", "b", longTTL)
	evs := readAll(t, cur, 10)
	if len(evs) != 2 {
		t.Fatalf("from now: %d events, want 2:\n%s", len(evs), showEvents(evs))
	}
	mustFeed(t, evs[:1], "old", released("a", old.Token))
	mustFeed(t, evs[1:], "new", acquired("b", l.Token))
}

// While writers on several stores claim and release at once, a cursor that
// reads all along delivers every event exactly once, in id order: none
// skipped because it committed after an event with a higher id.
func (s *suite) testFeedConcurrentWriters(t *testing.T) {
	st := s.isolated(t)
	f := feedOf(t, st)
	svc := leasecore.New(st, leasecore.WithOpTimeout(sharedOpTimeout))
	cur := follow(t, f, 0)
	const writers, rounds = 8, 12
	var (
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	for w := range writers {
		wg.Go(func() {
			task := fmt.Sprintf("writer-%d", w)
			for range rounds {
				l, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: "w", TTL: longTTL})
				if err != nil {
					t.Errorf("claim %s: %v", task, err)
					return
				}
				if ok, err := svc.Release(t.Context(), leasecore.ReleaseParams{Task: task, Owner: "w", Token: l.Token}); !ok || err != nil {
					t.Errorf("release %s: %v %v", task, ok, err)
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	var fed []leasecore.Event
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		evs, err := cur.Next(opCtx(t), 5)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		checkRead(t, cur, fed, evs, 5)
		fed = append(fed, evs...)
	}
	if t.Failed() {
		return
	}
	rest := readAll(t, cur, 5)
	checkRead(t, cur, fed, rest, len(rest))
	fed = append(fed, rest...)
	if len(fed) != 2*writers*rounds {
		t.Errorf("feed delivered %d events, want %d (each claim and release once)", len(fed), 2*writers*rounds)
	}
	for w := range writers {
		task := fmt.Sprintf("writer-%d", w)
		hist := events(t, svc, task)
		slices.Reverse(hist)
		if got := ofTask(fed, task); !sameEvents(got, hist) {
			t.Errorf("feed of %s differs from its history:\n%shistory:\n%s", task, showEvents(got), showEvents(hist))
		}
	}
}

// RecordExpiries records a lease that ran out unreleased once, at its
// expiry, with its owner and token, and reports the earliest live expiry.
// Its record is the lease's end: the next claim by another owner records
// only acquired, and the old owner's late renewal is lost (expired) with
// its lost event, once, and no second expired.
func (s *suite) testFeedExpiriesOnce(t *testing.T) {
	st := s.isolated(t)
	f, svc := feedOf(t, st), leasecore.New(st)
	if sw := sweep(t, f, 10); sw.Recorded != 0 || !sw.NextExpiry.IsZero() {
		t.Fatalf("sweep of an empty store: %+v, want nothing recorded and no next expiry", sw)
	}
	live := claim(t, svc, "live", "x", longTTL)
	if sw := sweep(t, f, 10); sw.Recorded != 0 || !sameInstant(sw.NextExpiry, live.ExpiresAt) {
		t.Fatalf("sweep with one live lease: %+v, want nothing recorded and next expiry %v", sw, live.ExpiresAt)
	}
	gone := claim(t, svc, "gone", "a", shortTTL)
	late := claim(t, svc, "late", "a", shortTTL)
	done := claim(t, svc, "done", "a", longTTL)
	releaseOK(t, svc, "done", "a", done.Token)
	waitExpired(t, svc, "gone")
	waitExpired(t, svc, "late")

	sw := sweep(t, f, 10)
	if sw.Recorded != 2 || !sameInstant(sw.NextExpiry, live.ExpiresAt) {
		t.Fatalf("sweep: %+v, want 2 recorded (gone and late; done was released, live is live) and next expiry %v", sw, live.ExpiresAt)
	}
	evs := mustHistory(t, svc, "gone", expired("a", gone.Token), acquired("a", gone.Token))
	if !sameInstant(evs[0].At, gone.ExpiresAt) {
		t.Errorf("expired event at %v, want the lease's expiry %v", evs[0].At, gone.ExpiresAt)
	}
	mustHistory(t, svc, "late", expired("a", late.Token), acquired("a", late.Token))
	mustHistory(t, svc, "done", released("a", done.Token), acquired("a", done.Token))
	mustHistory(t, svc, "live", acquired("x", live.Token))
	if sw := sweep(t, f, 10); sw.Recorded != 0 {
		t.Fatalf("second sweep recorded %d, want 0: each end once", sw.Recorded)
	}

	next := claim(t, svc, "gone", "b", longTTL)
	mustHistory(t, svc, "gone", acquired("b", next.Token), expired("a", gone.Token), acquired("a", gone.Token))
	renewLost(t, svc, leasecore.RenewParams{Task: "late", Owner: "a", Token: late.Token}, leasecore.LostExpired)
	if r := svc.RenewBatch(t.Context(), []leasecore.RenewParams{{Task: "late", Owner: "a"}}); r[0].Err == nil {
		t.Fatal("a batched renewal of the expired lease succeeded")
	}
	mustHistory(t, svc, "late", lost("a", late.Token), expired("a", late.Token), acquired("a", late.Token))
	again := claim(t, svc, "late", "a", longTTL)
	mustHistory(t, svc, "late", acquired("a", again.Token), lost("a", late.Token), expired("a", late.Token), acquired("a", late.Token))
	if sw := sweep(t, f, 10); sw.Recorded != 0 || !sameInstant(sw.NextExpiry, live.ExpiresAt) {
		t.Fatalf("final sweep: %+v, want nothing recorded and next expiry %v (the earliest live one)", sw, live.ExpiresAt)
	}
}

// The feed carries each event's credential, as History does; the sweep
// acts for nobody, so its expired event has no credential although the
// lease was claimed with one, and the next claim records only its acquired,
// under its own.
func (s *suite) testFeedCredentials(t *testing.T) {
	st := s.isolated(t)
	f, svc := feedOf(t, st), leasecore.New(st)
	cur := follow(t, f, 0)
	a := claimOK(t, svc, leasecore.ClaimParams{Task: "swept", Owner: "a", TTL: shortTTL, Credential: "claimer-a"})
	waitExpired(t, svc, "swept")
	if sw := sweep(t, f, 10); sw.Recorded != 1 {
		t.Fatalf("sweep recorded %d, want 1", sw.Recorded)
	}
	b := claimOK(t, svc, leasecore.ClaimParams{Task: "released", Owner: "b", TTL: longTTL, Credential: "claimer-b"})
	if !releaseAs(t, svc, "released", "b", b.Token, "releaser") {
		t.Fatal("release reported false")
	}
	c := claimOK(t, svc, leasecore.ClaimParams{Task: "swept", Owner: "c", TTL: longTTL, Credential: "claimer-c"})

	evs := readAll(t, cur, 10)
	mustFeed(t, ofTask(evs, "swept"), "swept", acquired("a", a.Token).by("claimer-a"), expired("a", a.Token), acquired("c", c.Token).by("claimer-c"))
	mustFeed(t, ofTask(evs, "released"), "released", acquired("b", b.Token).by("claimer-b"), released("b", b.Token).by("releaser"))
	for _, task := range []string{"swept", "released"} {
		hist := events(t, svc, task)
		slices.Reverse(hist)
		if fed := ofTask(evs, task); !sameEvents(fed, hist) {
			t.Errorf("feed of %s:\n%shistory (oldest first):\n%s", task, showEvents(fed), showEvents(hist))
		}
	}
}

// RecordExpiries records at most limit leases a call; the next calls
// record the rest, each once.
func (s *suite) testFeedExpiriesLimit(t *testing.T) {
	st := s.isolated(t)
	f, svc := feedOf(t, st), leasecore.New(st)
	const n = 5
	leases := make([]*leasecore.Lease, n)
	for i := range leases {
		leases[i] = claim(t, svc, fmt.Sprintf("task-%d", i), "a", shortTTL)
	}
	for i := range leases {
		waitExpired(t, svc, leases[i].Task)
	}
	var got []int
	for range 4 {
		sw := sweep(t, f, 2)
		got = append(got, sw.Recorded)
		if !sw.NextExpiry.IsZero() {
			t.Errorf("sweep: next expiry %v with no live lease", sw.NextExpiry)
		}
	}
	if !slices.Equal(got, []int{2, 2, 1, 0}) {
		t.Fatalf("sweeps of limit 2 over %d expired leases recorded %v, want [2 2 1 0]", n, got)
	}
	for _, l := range leases {
		mustHistory(t, svc, l.Task, expired("a", l.Token), acquired("a", l.Token))
	}
}

// HistoryChanges signals after another store commits history, and closes
// its channel when its context ends. (It runs on the shared data, where
// other cases commit too: it proves that a signal comes once the event is
// readable, and the drivers' own tests prove it is that commit's.)
func (s *suite) testFeedChangesSignalled(t *testing.T) {
	f := feedOf(t, s.store)
	other := leasecore.New(s.open(t, s.d.Open))
	task := uniqueTask(t)
	cur := follow(t, f, -1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := f.HistoryChanges(ctx, 0)
	if err != nil {
		t.Fatalf("history changes: %v", err)
	}
	l := claim(t, other, task, "a", longTTL)
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for seen := false; !seen; {
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatal("the channel closed while its context was live")
			}
		case <-deadline.C:
			t.Fatalf("no signal within %v once the claim of %s had committed", waitLimit, task)
		}
		for {
			evs, err := cur.Next(opCtx(t), 1000)
			if err != nil {
				t.Fatalf("next: %v", err)
			}
			if mine := ofTask(evs, task); len(mine) > 0 {
				mustFeed(t, mine, task, acquired("a", l.Token))
				seen = true
			}
			if len(evs) == 0 && !cur.Pending() {
				break
			}
			if len(evs) == 0 {
				time.Sleep(time.Millisecond) // held back behind a gap: ask again soon
			}
		}
	}
	cancel()
	deadline.Reset(waitLimit)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline.C:
			t.Fatal("the channel stayed open after its context ended")
		}
	}
}

// mustBeAhead fails t unless err is a *leasecore.PositionAheadError for
// position and newest.
func mustBeAhead(t *testing.T, what string, err error, position, newest int64) {
	t.Helper()
	var ahead *leasecore.PositionAheadError
	switch {
	case err == nil:
		t.Fatalf("%s: no error, want a *leasecore.PositionAheadError (position %d, newest %d)", what, position, newest)
	case !errors.As(err, &ahead) || !errors.Is(err, leasecore.ErrPositionAhead):
		t.Fatalf("%s: %v, want a *leasecore.PositionAheadError (position %d, newest %d)", what, err, position, newest)
	case errors.Is(err, leasecore.ErrUnavailable):
		t.Fatalf("%s: %v also matches ErrUnavailable; a position ahead is no store failure", what, err)
	case ahead.Position != position || ahead.Newest != newest:
		t.Fatalf("%s: position %d, newest %d; want %d and %d", what, ahead.Position, ahead.Newest, position, newest)
	}
}

// A position above every id the store handed out is refused: no event of
// this history will ever have it. The newest id itself is a position.
func (s *suite) testFeedPositionAhead(t *testing.T) {
	st := s.isolated(t)
	f, svc := feedOf(t, st), leasecore.New(st)
	l := claim(t, svc, "task", "a", longTTL)
	releaseOK(t, svc, "task", "a", l.Token)
	all := readAll(t, follow(t, f, 0), 10)
	if len(all) != 2 {
		t.Fatalf("feed has %d events, want 2:\n%s", len(all), showEvents(all))
	}
	newest := all[1].ID
	for _, after := range []int64{newest + 1, newest + 1000, math.MaxInt64} {
		cur, err := f.FollowHistory(opCtx(t), after)
		if err == nil {
			_ = cur.Close()
		}
		mustBeAhead(t, fmt.Sprintf("FollowHistory(%d) with the newest id %d", after, newest), err, after, newest)
	}
	cur := follow(t, f, newest)
	if evs := readAll(t, cur, 10); len(evs) != 0 {
		t.Fatalf("after the newest id:\n%s", showEvents(evs))
	}
	l = claim(t, svc, "task", "b", longTTL)
	mustFeed(t, readAll(t, cur, 10), "task", acquired("b", l.Token))
}

// Pruning the store's newest events does not make their ids positions
// ahead of the history: a watcher that saw them resumes there, and hears
// of the next event, whose id is larger.
func (s *suite) testFeedPrunedNewestNotAhead(t *testing.T) {
	st := s.isolated(t)
	f, svc := feedOf(t, st), leasecore.New(st)
	clock := newStoreClock(t, svc) // its first claim's event comes first, and is kept
	clock.now()
	createPolicy(t, svc, leasecore.RetentionPolicy{Name: "one-second", KeepFor: time.Second})
	task := uniqueTask(t)
	createTask(t, svc, leasecore.TaskDecl{Name: task, TTL: time.Minute, RetentionPolicy: "one-second"})
	l := claim(t, svc, task, "a", time.Minute)
	releaseOK(t, svc, task, "a", l.Token)
	evs := mustHistory(t, svc, task, released("a", l.Token), acquired("a", l.Token))
	newest := evs[0].ID
	before := follow(t, f, newest) // a watcher that saw them

	clock.waitPast(evs[0].At.Add(time.Second + precision))
	if n := prune(t, svc); n != 2 {
		t.Fatalf("prune deleted %d events, want the 2 of %s", n, task)
	}
	mustHistory(t, svc, task)
	after := follow(t, f, newest) // FollowHistory does not call it ahead
	for _, cur := range []leasecore.HistoryCursor{before, after} {
		if got := readAll(t, cur, 10); len(got) != 0 {
			t.Fatalf("after the pruned newest event %d:\n%s", newest, showEvents(got))
		}
	}
	cur, err := f.FollowHistory(opCtx(t), newest+1)
	if err == nil {
		_ = cur.Close()
	}
	mustBeAhead(t, "one past the pruned newest id", err, newest+1, newest)
	l = claim(t, svc, task, "b", time.Minute)
	for _, cur := range []leasecore.HistoryCursor{before, after} {
		mustFeed(t, readAll(t, cur, 10), task, acquired("b", l.Token))
	}
}

// When the history goes back under a cursor (a restore of an older copy),
// the cursor says so rather than wait for ids that will name other events,
// and FollowHistory refuses its position; a cursor below the restored
// newest id reads on, the restored events and the new ones, whose ids are
// handed out again.
func (s *suite) testFeedRewound(t *testing.T) {
	if s.d.RewindHistory == nil {
		t.Fatal("storetest: Driver.RewindHistory is needed where the store has a HistoryFeed")
	}
	st := s.isolated(t)
	f, svc := feedOf(t, st), leasecore.New(st)
	for i := range 3 {
		task := fmt.Sprintf("task-%d", i)
		l := claim(t, svc, task, "a", longTTL)
		releaseOK(t, svc, task, "a", l.Token)
	}
	all := readAll(t, follow(t, f, 0), 10)
	if len(all) != 6 {
		t.Fatalf("feed has %d events, want 6:\n%s", len(all), showEvents(all))
	}
	high, low := follow(t, f, all[5].ID), follow(t, f, all[1].ID)
	inner := st
	if c, ok := st.(interface{ unwrap() leasecore.Store }); ok {
		inner = c.unwrap()
	}
	restored := all[3].ID
	s.d.RewindHistory(t, inner, restored)

	_, err := high.Next(opCtx(t), 10)
	mustBeAhead(t, "Next of a cursor past the restored history", err, all[5].ID, restored)
	cur, err := f.FollowHistory(opCtx(t), all[5].ID)
	if err == nil {
		_ = cur.Close()
	}
	mustBeAhead(t, "FollowHistory from a position past the restored history", err, all[5].ID, restored)

	if got := readAll(t, low, 10); !sameEvents(got, all[2:4]) {
		t.Fatalf("a cursor inside the restored history read:\n%swant:\n%s", showEvents(got), showEvents(all[2:4]))
	}
	l := claim(t, svc, "task-new", "b", longTTL)
	got := readAll(t, low, 10)
	mustFeed(t, got, "task-new", acquired("b", l.Token))
	if got[0].ID != restored+1 {
		t.Fatalf("the first event after the restore has id %d, want %d: the rewind did not set the ids back", got[0].ID, restored+1)
	}
}
