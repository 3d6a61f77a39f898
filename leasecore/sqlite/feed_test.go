package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// feedWait bounds every wait for a signal or an event in these tests: far
// longer than any of them needs, so that only a signal that never comes
// fails a test, never a slow machine.
const feedWait = 30 * time.Second

// expire moves the task's lease two hours into the past, so that it ran out
// an hour or more ago, without waiting for it.
func expire(t *testing.T, s *Store, task string) {
	t.Helper()
	res, err := s.writer.ExecContext(context.Background(), `
UPDATE leasehold_leases
SET acquired_at = acquired_at - 7200000, renewed_at = renewed_at - 7200000, expires_at = expires_at - 7200000
WHERE task = ?`, task)
	if err != nil {
		t.Fatalf("expire %s: %v", task, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("expire %s: %d rows", task, n)
	}
}

// readAll reads the cursor to its end, limit events per call.
func readAll(t *testing.T, c leasecore.HistoryCursor, limit int) []leasecore.Event {
	t.Helper()
	var all []leasecore.Event
	for {
		events, err := c.Next(context.Background(), limit)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if c.Pending() {
			t.Fatal("Pending() = true; SQLite never holds events back")
		}
		if len(events) > limit {
			t.Fatalf("Next(%d) returned %d events", limit, len(events))
		}
		if len(events) == 0 {
			return all
		}
		if got := c.Position(); got != events[len(events)-1].ID {
			t.Fatalf("Position() = %d after events up to %d", got, events[len(events)-1].ID)
		}
		all = append(all, events...)
	}
}

func follow(t *testing.T, s *Store, after int64) leasecore.HistoryCursor {
	t.Helper()
	c, err := s.FollowHistory(context.Background(), after)
	if err != nil {
		t.Fatalf("FollowHistory(%d): %v", after, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// kinds lists "task kind owner token" per event.
func kinds(events []leasecore.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = fmt.Sprintf("%s %s %s %d", e.Task, e.Kind, e.Owner, e.Token)
	}
	return out
}

// TestFollowHistoryReadsInIDOrderAndResumes: the events of claims,
// releases, take-overs, losses and an expiry sweep come out of a cursor in
// id order, exactly those History shows, whatever the page size, and a
// cursor opened at any position reads exactly what follows it.
func TestFollowHistoryReadsInIDOrderAndResumes(t *testing.T) {
	t.Parallel()
	s := openMigrated(t, filepath.Join(t.TempDir(), "leasehold.db"))
	ctx := context.Background()
	claim := func(task, owner string) *leasecore.Lease {
		t.Helper()
		l, err := s.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Hour})
		if err != nil {
			t.Fatalf("claim %s by %s: %v", task, owner, err)
		}
		return l
	}
	a := claim("a", "o1")
	claim("b", "o1")
	if ok, err := s.Release(ctx, leasecore.ReleaseParams{Task: "a", Owner: "o1", Token: a.Token}); err != nil || !ok {
		t.Fatalf("release a: %v %v", ok, err)
	}
	claim("a", "o2")
	expire(t, s, "b")
	claim("b", "o2") // expired (o1's lease), acquired
	expire(t, s, "a")
	if _, err := s.Renew(ctx, leasecore.RenewParams{Task: "a", Owner: "o2", Token: 2}); !errors.Is(err, leasecore.ErrLost) {
		t.Fatalf("late renew of a: %v, want lost", err)
	}
	claim("c", "o3")
	expire(t, s, "c")
	if sweep, err := s.RecordExpiries(ctx, 10); err != nil || sweep.Recorded != 1 {
		t.Fatalf("RecordExpiries: %+v, %v; want 1 recorded", sweep, err)
	}

	want := []string{
		"a acquired o1 1", "b acquired o1 1", "a released o1 1", "a acquired o2 2",
		"b expired o1 1", "b acquired o2 2", "a expired o2 2", "a lost o2 2", "c acquired o3 1", "c expired o3 1",
	}
	all := readAll(t, follow(t, s, 0), 100)
	if got := kinds(all); !slices.Equal(got, want) {
		t.Fatalf("events from 0:\n%q\nwant\n%q", got, want)
	}
	if !slices.IsSortedFunc(all, func(x, y leasecore.Event) int { return int(x.ID - y.ID) }) {
		t.Fatalf("events not in id order: %v", all)
	}
	// The same events as History's chains, by id.
	var chains []leasecore.Event
	for _, task := range []string{"a", "b", "c"} {
		h, err := s.History(ctx, task, leasecore.MaxHistoryLimit)
		if err != nil {
			t.Fatal(err)
		}
		chains = append(chains, h...)
	}
	slices.SortFunc(chains, func(x, y leasecore.Event) int { return int(x.ID - y.ID) })
	if !slices.Equal(chains, all) {
		t.Fatalf("cursor events differ from History's:\n%v\n%v", all, chains)
	}

	for _, limit := range []int{1, 2, 4} {
		if got := readAll(t, follow(t, s, 0), limit); !slices.Equal(got, all) {
			t.Errorf("pages of %d: %v, want %v", limit, got, all)
		}
	}
	for i, e := range all {
		if got := readAll(t, follow(t, s, e.ID), 3); !slices.Equal(got, all[i+1:]) {
			t.Errorf("resumed after id %d: %q, want %q", e.ID, kinds(got), kinds(all[i+1:]))
		}
	}
}

// TestFollowHistoryFromNow: a cursor from now skips the events committed
// before it, reads those after, and keeps reading from where it stopped;
// ids keep rising after the newest events were pruned.
func TestFollowHistoryFromNow(t *testing.T) {
	t.Parallel()
	s := openMigrated(t, filepath.Join(t.TempDir(), "leasehold.db"))
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Claim(ctx, leasecore.ClaimParams{Task: fmt.Sprintf("old-%d", i), Owner: "o", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	// Prune every event: the newest id must still not be handed out again.
	if _, err := s.writer.ExecContext(ctx, `DELETE FROM leasehold_history`); err != nil {
		t.Fatal(err)
	}
	c := follow(t, s, -1)
	if c.Position() != 3 {
		t.Errorf("from now after 3 events (pruned): Position() = %d, want 3", c.Position())
	}
	if got := readAll(t, c, 10); len(got) != 0 {
		t.Fatalf("from now: old events %q", kinds(got))
	}
	if _, err := s.Claim(ctx, leasecore.ClaimParams{Task: "new", Owner: "o", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, c, 10)
	if !slices.Equal(kinds(got), []string{"new acquired o 1"}) || got[0].ID != 4 {
		t.Fatalf("after a claim: %v, want new's acquired with id 4", got)
	}
	if got := readAll(t, c, 10); len(got) != 0 {
		t.Fatalf("read again: %q", kinds(got))
	}
}

// TestRecordExpiries: an expiry is recorded once, at the lease's expiry,
// and then neither another owner's claim nor the late owner's renewal
// records its end again (the renewal records only its lost); the limit is
// kept; and NextExpiry is the earliest expiry of the live leases.
func TestRecordExpiries(t *testing.T) {
	t.Parallel()
	s := openMigrated(t, filepath.Join(t.TempDir(), "leasehold.db"))
	ctx := context.Background()

	if sweep, err := s.RecordExpiries(ctx, 10); err != nil || sweep != (leasecore.ExpirySweep{}) {
		t.Fatalf("empty store: %+v, %v; want nothing recorded and no next expiry", sweep, err)
	}
	for _, task := range []string{"x1", "x2", "x3"} {
		if _, err := s.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "old", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		expire(t, s, task)
	}
	if _, err := s.Claim(ctx, leasecore.ClaimParams{Task: "long", Owner: "o", TTL: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	short, err := s.Claim(ctx, leasecore.ClaimParams{Task: "short", Owner: "o", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Released and lost leases are not due.
	if ok, err := s.Release(ctx, leasecore.ReleaseParams{Task: "long", Owner: "o"}); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if _, err := s.Claim(ctx, leasecore.ClaimParams{Task: "lost", Owner: "o", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	expire(t, s, "lost")
	if _, err := s.Renew(ctx, leasecore.RenewParams{Task: "lost", Owner: "o"}); !errors.Is(err, leasecore.ErrLost) {
		t.Fatalf("renew lost: %v", err)
	}

	before := readAll(t, follow(t, s, 0), 100)
	first, err := s.RecordExpiries(ctx, 2)
	if err != nil || first.Recorded != 2 || !first.NextExpiry.Equal(short.ExpiresAt) {
		t.Fatalf("RecordExpiries(2): %+v, %v; want 2 recorded, next expiry %s", first, err, short.ExpiresAt)
	}
	second, err := s.RecordExpiries(ctx, 10)
	if err != nil || second.Recorded != 1 {
		t.Fatalf("RecordExpiries(10) after: %+v, %v; want the third recorded", second, err)
	}
	if third, err := s.RecordExpiries(ctx, 10); err != nil || third.Recorded != 0 || !third.NextExpiry.Equal(short.ExpiresAt) {
		t.Fatalf("RecordExpiries again: %+v, %v; want nothing recorded", third, err)
	}
	c := follow(t, s, before[len(before)-1].ID)
	recorded := readAll(t, c, 100)
	if got, want := kinds(recorded), []string{"x1 expired old 1", "x2 expired old 1", "x3 expired old 1"}; !slices.Equal(got, want) {
		t.Fatalf("recorded %q, want %q", got, want)
	}
	for _, e := range recorded {
		var expires int64
		if err := s.reader.QueryRowContext(ctx, `SELECT expires_at FROM leasehold_leases WHERE task = ?`, e.Task).Scan(&expires); err != nil {
			t.Fatal(err)
		}
		if !e.At.Equal(fromMS(expires)) {
			t.Errorf("%s expired at %s, want the lease's expiry %s", e.Task, e.At, fromMS(expires))
		}
	}

	// Another owner's claim records only its grant; the old owner's late
	// renewal is refused and records only the lease's loss.
	l, err := s.Claim(ctx, leasecore.ClaimParams{Task: "x1", Owner: "new", TTL: time.Hour})
	if err != nil || l.Token != 2 {
		t.Fatalf("claim x1 by new: %v, %v", l, err)
	}
	if _, err := s.Renew(ctx, leasecore.RenewParams{Task: "x2", Owner: "old", Token: 1}); !errors.Is(err, leasecore.ErrLost) {
		t.Fatalf("late renew of x2: %v, want lost", err)
	}
	if _, err := s.Claim(ctx, leasecore.ClaimParams{Task: "x3", Owner: "old", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(readAll(t, c, 100)), []string{"x1 acquired new 2", "x2 lost old 1", "x3 acquired old 2"}; !slices.Equal(got, want) {
		t.Fatalf("after the recorded expiries: %q, want %q", got, want)
	}

	// NextExpiry follows the earliest live lease.
	sooner, err := s.Claim(ctx, leasecore.ClaimParams{Task: "sooner", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if sweep, err := s.RecordExpiries(ctx, 10); err != nil || sweep.Recorded != 0 || !sweep.NextExpiry.Equal(sooner.ExpiresAt) {
		t.Fatalf("with a lease for a minute: %+v, %v; want next expiry %s", sweep, err, sooner.ExpiresAt)
	}
}

// changes starts HistoryChanges on s until t ends.
func changes(t *testing.T, s *Store) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := s.HistoryChanges(ctx, 0)
	if err != nil {
		t.Fatalf("HistoryChanges: %v", err)
	}
	return ch
}

// collect reads c each time ch signals, until it has n events, and fails
// the test when no signal comes for feedWait. It never reads unsignalled,
// so it passes only if the signal follows the commits.
func collect(t *testing.T, ch <-chan struct{}, c leasecore.HistoryCursor, n int) []leasecore.Event {
	t.Helper()
	var got []leasecore.Event
	for len(got) < n {
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("the change channel closed after %d of %d events", len(got), n)
			}
		case <-time.After(feedWait):
			t.Fatalf("no change signalled for %s; have %d of %d events: %q", feedWait, len(got), n, kinds(got))
		}
		got = append(got, readAll(t, c, 100)...)
	}
	return got
}

// TestHistoryChangesSignalsOwnCommits: a commit of this Store that records
// events is signalled, and so are RecordExpiries and a sweep by another
// Store (another connection) on the same file; the channel closes when its
// context ends.
func TestHistoryChangesSignalsOwnCommits(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := openMigrated(t, path)
	ctx := context.Background()
	c := follow(t, s, -1)
	ch := changes(t, s)

	if _, err := s.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := kinds(collect(t, ch, c, 1)); !slices.Equal(got, []string{"t acquired o 1"}) {
		t.Fatalf("after a claim: %q", got)
	}
	other := openMigrated(t, path)
	expire(t, other, "t")
	if sweep, err := other.RecordExpiries(ctx, 10); err != nil || sweep.Recorded != 1 {
		t.Fatalf("RecordExpiries on another store: %+v, %v", sweep, err)
	}
	if got := kinds(collect(t, ch, c, 1)); !slices.Equal(got, []string{"t expired o 1"}) {
		t.Fatalf("after another store's sweep: %q", got)
	}

	short, cancel := context.WithCancel(ctx)
	ended, err := s.HistoryChanges(short, 0)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitClosed(t, ended, "after its context ended")
	closing := changes(t, other)
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, closing, "after its store closed")
	if _, err := other.HistoryChanges(ctx, 0); !errors.Is(err, leasecore.ErrUnavailable) {
		t.Errorf("HistoryChanges after Close: %v, want unavailable", err)
	}
}

// TestHistoryChangesSignalsOwnCommitsAtOnce: with a poll interval no test
// waits out, this Store's own commits are still signalled: the writer tells
// HistoryChanges after a commit that recorded events.
func TestHistoryChangesSignalsOwnCommitsAtOnce(t *testing.T) {
	t.Parallel()
	s := openMigrated(t, filepath.Join(t.TempDir(), "leasehold.db"))
	s.changesPoll = time.Hour
	c := follow(t, s, -1)
	ch := changes(t, s)
	for tok := range int64(3) {
		l, err := s.Claim(context.Background(), leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{fmt.Sprintf("t acquired o %d", tok+1)}
		if got := kinds(collect(t, ch, c, 1)); !slices.Equal(got, want) {
			t.Fatalf("after claim %d: %q, want %q", tok+1, got, want)
		}
		if ok, err := s.Release(context.Background(), leasecore.ReleaseParams{Task: "t", Owner: "o", Token: l.Token}); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
		want = []string{fmt.Sprintf("t released o %d", tok+1)}
		if got := kinds(collect(t, ch, c, 1)); !slices.Equal(got, want) {
			t.Fatalf("after release %d: %q, want %q", tok+1, got, want)
		}
	}
}

// waitClosed drains ch until it is closed, for up to feedWait.
func waitClosed(t *testing.T, ch <-chan struct{}, when string) {
	t.Helper()
	deadline := time.After(feedWait)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("the change channel was not closed %s", when)
		}
	}
}

// TestHistoryChangesFollowsAnotherProcess: another process claims and
// releases on the same file; this one, which writes nothing, is told of
// every commit and its cursor reads the other process's events in order.
func TestHistoryChangesFollowsAnotherProcess(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := openMigrated(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c := follow(t, s, -1)
	ch := changes(t, s)

	const grants = 3
	h := startHelper(t, roleChurn, path, "process-1", grants)
	h.expect(t, ctx, "ready")
	if _, err := h.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	got := collect(t, ch, c, 2*grants)
	h.finish(t, ctx)
	var want []string
	for tok := 1; tok <= grants; tok++ {
		want = append(want, fmt.Sprintf("churn acquired process-1 %d", tok), fmt.Sprintf("churn released process-1 %d", tok))
	}
	if !slices.Equal(kinds(got), want) {
		t.Fatalf("events of the other process: %q, want %q", kinds(got), want)
	}
}

// TestFeedOnAReplacedFile: once the file is deleted, the cursor and a new
// HistoryChanges are unavailable, and a running HistoryChanges signals so
// that its reader finds out.
func TestFeedOnAReplacedFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := openMigrated(t, path)
	ctx := context.Background()
	if _, err := s.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	c := follow(t, s, 0)
	ch := changes(t, s)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	const gone = "deleted or replaced"
	select {
	case <-ch:
	case <-time.After(feedWait):
		t.Fatalf("no signal for %s after the file was deleted", feedWait)
	}
	_, err := c.Next(ctx, 10)
	assertUnavailable(t, leasecore.OpReadHistory, err, gone)
	_, err = s.FollowHistory(ctx, -1)
	assertUnavailable(t, leasecore.OpFollowHistory, err, gone)
	_, err = s.HistoryChanges(ctx, 0)
	assertUnavailable(t, leasecore.OpFollowHistory, err, gone)
	_, err = s.RecordExpiries(ctx, 10)
	assertUnavailable(t, leasecore.OpRecordExpiries, err, gone)
}
