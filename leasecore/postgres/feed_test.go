package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

// feedWait bounds every wait for the feed: a notification, a gap to settle.
const feedWait = 10 * time.Second

// nextEvents reads the cursor once and fails t on an error.
func nextEvents(t *testing.T, cur leasecore.HistoryCursor) []leasecore.Event {
	t.Helper()
	evs, err := cur.Next(t.Context(), 100)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return evs
}

// eventIDs lists the ids and tasks of evs, for messages.
func eventIDs(evs []leasecore.Event) []int64 {
	ids := make([]int64, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	return ids
}

// heldClaim runs a claim statement of task inside a transaction on conn
// and leaves the transaction open: its history event has taken its id and
// is not committed.
func heldClaim(t *testing.T, conn *pgx.Conn, task string) pgx.Tx {
	t.Helper()
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	rows, err := tx.Query(t.Context(), claimSQL, task, "in-flight", int64(60000), "", "", int64(0))
	if err != nil {
		t.Fatalf("claim in a transaction: %v", err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatalf("claim in a transaction: %v", err)
	}
	return tx
}

// A transaction in flight took an id below one that committed: the cursor
// holds the later event back (Pending) rather than deliver past the
// missing id, and delivers both in id order once the first commits. A gap
// whose transaction rolls back is skipped once every transaction that
// could hold it has ended.
func TestFeedHoldsBackBehindInFlightIDs(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	conn := mustConn(t, url)

	first := mustClaim(t, st, "first", "a", time.Minute)
	cur, err := st.FollowHistory(t.Context(), 0)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	defer cur.Close()
	if evs := nextEvents(t, cur); len(evs) != 1 || evs[0].Task != "first" || evs[0].Token != first.Token {
		t.Fatalf("first read: %v, want the acquired event of first", evs)
	}
	pos := cur.Position()

	// Committed: in-flight's id (pos+1) is taken, later's (pos+2) is visible.
	tx := heldClaim(t, conn, "in-flight")
	mustClaim(t, st, "later", "b", time.Minute)
	for range 3 {
		if evs := nextEvents(t, cur); len(evs) != 0 {
			t.Fatalf("read past an id a transaction in flight holds: got %v (position %d)", eventIDs(evs), pos)
		}
		if !cur.Pending() || cur.Position() != pos {
			t.Fatalf("holding back: Pending %v Position %d, want true and %d", cur.Pending(), cur.Position(), pos)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatalf("commit: %v", err)
	}
	evs := nextEvents(t, cur)
	if len(evs) != 2 || evs[0].ID != pos+1 || evs[0].Task != "in-flight" || evs[1].ID != pos+2 || evs[1].Task != "later" {
		t.Fatalf("after the commit: %+v, want in-flight (%d) then later (%d)", evs, pos+1, pos+2)
	}
	if cur.Pending() || cur.Position() != pos+2 {
		t.Fatalf("after the commit: Pending %v Position %d, want false and %d", cur.Pending(), cur.Position(), pos+2)
	}

	// Rolled back: the gap is skipped once settled, never delivered.
	pos = cur.Position()
	tx = heldClaim(t, conn, "rolled-back")
	mustClaim(t, st, "after-rollback", "c", time.Minute)
	if evs := nextEvents(t, cur); len(evs) != 0 || !cur.Pending() {
		t.Fatalf("read past an id a transaction in flight holds: got %v, Pending %v", eventIDs(evs), cur.Pending())
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	var got []leasecore.Event
	poll(t, "the rolled-back gap to settle", func() bool {
		got = append(got, nextEvents(t, cur)...)
		return len(got) > 0
	})
	if len(got) != 1 || got[0].Task != "after-rollback" || got[0].ID != pos+2 {
		t.Fatalf("after the rollback: %+v, want only after-rollback (%d)", got, pos+2)
	}
	if cur.Pending() || cur.Position() != pos+2 {
		t.Fatalf("after the rollback: Pending %v Position %d, want false and %d", cur.Pending(), cur.Position(), pos+2)
	}
}

// The transaction holding the missing id may have a larger transaction id
// than the one that committed after it: then it is above the xmax of the
// snapshot that finds the gap (one past the newest ended transaction), and
// not listed as running there. The cursor must still hold back, however
// often it reads. (A cursor that took xmax for its bound delivers past the
// gap here, when no other transaction on the server ends meanwhile.)
func TestFeedHoldsBackBehindALaterTransactionID(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	mustClaim(t, st, "u-row", "a", time.Minute)
	cur, err := st.FollowHistory(t.Context(), -1)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	defer cur.Close()
	pos := cur.Position()

	// U takes its transaction id first (a write to a lease row), T after;
	// T then takes the history id pos+1, U pos+2, and U commits.
	connU, connT := mustConn(t, url), mustConn(t, url)
	u, err := connU.Begin(t.Context())
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer u.Rollback(context.Background())
	if _, err := u.Exec(t.Context(), `UPDATE leasehold_leases SET note = note WHERE task = 'u-row'`); err != nil {
		t.Fatalf("U's first write: %v", err)
	}
	tx := heldClaim(t, connT, "t-task")
	rows, err := u.Query(t.Context(), claimSQL, "u-task", "u", int64(60000), "", "", int64(0))
	if err != nil {
		t.Fatalf("U's claim: %v", err)
	}
	rows.Close()
	if err := u.Commit(t.Context()); err != nil {
		t.Fatalf("U's commit: %v", err)
	}
	for range 5 {
		if evs := nextEvents(t, cur); len(evs) != 0 || !cur.Pending() {
			t.Fatalf("read past id %d, which a transaction in flight holds: got %v, Pending %v", pos+1, eventIDs(evs), cur.Pending())
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatalf("T's commit: %v", err)
	}
	evs := nextEvents(t, cur)
	if len(evs) != 2 || evs[0].Task != "t-task" || evs[1].Task != "u-task" || evs[0].ID != pos+1 {
		t.Fatalf("after T's commit: %+v, want t-task (%d) then u-task", evs, pos+1)
	}
}

// settle, the cursor's rule, on made-up reads: a gap is kept until a later
// snapshot's xmin reaches the transaction id bound of the one that found it, or until
// GapSettleTimeout; only the ids missing when it was found are skipped on
// that proof.
func TestCursorSettle(t *testing.T) {
	t.Parallel()
	ev := func(ids ...int64) []leasecore.Event {
		evs := make([]leasecore.Event, len(ids))
		for i, id := range ids {
			evs[i] = leasecore.Event{ID: id}
		}
		return evs
	}
	t0 := time.Unix(1000, 0)
	check := func(t *testing.T, c *cursor, got []leasecore.Event, want []int64, pos int64, pending bool) {
		t.Helper()
		ids := eventIDs(got)
		if len(ids) != len(want) || c.pos != pos || c.pending != pending {
			t.Fatalf("delivered %v position %d pending %v, want %v, %d, %v", ids, c.pos, c.pending, want, pos, pending)
		}
		for i := range ids {
			if ids[i] != want[i] {
				t.Fatalf("delivered %v, want %v", ids, want)
			}
		}
	}

	t.Run("Contiguous", func(t *testing.T) {
		c := &cursor{pos: 4}
		check(t, c, c.settle(ev(5, 6, 7), 10, 20, t0), []int64{5, 6, 7}, 7, false)
		check(t, c, c.settle(nil, 10, 20, t0), nil, 7, false)
	})
	t.Run("SettledBySnapshot", func(t *testing.T) {
		c := &cursor{pos: 4}
		check(t, c, c.settle(ev(5, 7, 8), 10, 20, t0), []int64{5}, 5, true)
		check(t, c, c.settle(ev(7, 8), 19, 30, t0), nil, 5, true) // xmin below 20: T may still run
		check(t, c, c.settle(ev(7, 8), 20, 30, t0), []int64{7, 8}, 8, false)
	})
	t.Run("FilledMeanwhile", func(t *testing.T) {
		c := &cursor{pos: 4}
		check(t, c, c.settle(ev(7), 10, 20, t0), nil, 4, true)
		check(t, c, c.settle(ev(5, 6, 7), 10, 20, t0), []int64{5, 6, 7}, 7, false)
		if c.gap != nil {
			t.Fatalf("gap %+v kept after it filled", c.gap)
		}
	})
	t.Run("OnlyWhatWasMissingIsSkipped", func(t *testing.T) {
		// 7 was visible when the gap [5,7) was found, then pruned; 8 and 9
		// were taken later, by transactions the first snapshot says nothing
		// of: only 5 and 6 are skipped on its proof.
		c := &cursor{pos: 4}
		check(t, c, c.settle(ev(7), 10, 20, t0), nil, 4, true)
		check(t, c, c.settle(ev(10), 20, 40, t0), nil, 6, true)
		if c.gap == nil || c.gap.start != 7 || c.gap.end != 10 || c.gap.bound != 40 {
			t.Fatalf("gap %+v, want [7,10) found at bound 40", c.gap)
		}
		check(t, c, c.settle(ev(10), 40, 50, t0), []int64{10}, 10, false)
	})
	t.Run("Timeout", func(t *testing.T) {
		c := &cursor{pos: 4}
		check(t, c, c.settle(ev(6), 10, 20, t0), nil, 4, true)
		check(t, c, c.settle(ev(6), 10, 20, t0.Add(GapSettleTimeout-time.Nanosecond)), nil, 4, true)
		check(t, c, c.settle(ev(6), 10, 20, t0.Add(GapSettleTimeout)), []int64{6}, 6, false)
	})
}

// FollowHistory from now starts after the newest committed event.
func TestFeedFromNow(t *testing.T) {
	t.Parallel()
	st := mustMigrated(t, pgtest.NewDatabase(t))
	mustClaim(t, st, "old", "a", time.Minute)
	cur, err := st.FollowHistory(t.Context(), -1)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	defer cur.Close()
	if evs := nextEvents(t, cur); len(evs) != 0 {
		t.Fatalf("from now: read old events %+v", evs)
	}
	mustClaim(t, st, "new", "a", time.Minute)
	if evs := nextEvents(t, cur); len(evs) != 1 || evs[0].Task != "new" {
		t.Fatalf("from now: %+v, want the new event", evs)
	}
}

// waitSignal waits for a value on ch, failing t if none comes or ch closes.
func waitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the channel closed", what)
		}
	case <-time.After(feedWait):
		t.Fatalf("%s: no signal", what)
	}
}

// drainSignals takes ch's signals until none has come for quiet.
func drainSignals(ch <-chan struct{}, quiet time.Duration) {
	for {
		select {
		case <-ch:
		case <-time.After(quiet):
			return
		}
	}
}

// mustQuiet fails t if ch holds a value.
func mustQuiet(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: a signal with nothing committed", what)
	default:
	}
}

// HistoryChanges fires for history another store commits, not for claims
// that record nothing, and closes its channel when its context ends.
func TestHistoryChanges(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	other := mustOpen(t, url)

	ctx, cancel := context.WithCancel(t.Context())
	ch, err := st.HistoryChanges(ctx, 0)
	if err != nil {
		t.Fatalf("history changes: %v", err)
	}
	waitSignal(t, ch, "after the first poll")

	l := mustClaim(t, other, "task", "a", time.Minute)
	waitSignal(t, ch, "a claim by another store")

	// A refresh, a refused claim and a release of what is not held insert
	// no history: no signal. (A release after them does; its signal comes
	// from a poll after theirs, so any signal of theirs would be waiting
	// by then.)
	mustClaim(t, other, "task", "a", time.Minute)
	if _, err := other.Claim(t.Context(), leasecore.ClaimParams{Task: "task", Owner: "b", TTL: time.Minute}); !errors.Is(err, leasecore.ErrHeld) {
		t.Fatalf("claim by b: %v, want held", err)
	}
	if ok, err := other.Release(t.Context(), leasecore.ReleaseParams{Task: "task", Owner: "b"}); ok || err != nil {
		t.Fatalf("release by b: %v %v, want false", ok, err)
	}
	if _, err := other.Release(t.Context(), leasecore.ReleaseParams{Task: "task", Owner: "a", Token: l.Token}); err != nil {
		t.Fatalf("release: %v", err)
	}
	waitSignal(t, ch, "a release")
	mustQuiet(t, ch, "after the release")

	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			// A value sent before the cancellation; the close follows.
			if _, ok := <-ch; ok {
				t.Fatal("a second value after the context ended")
			}
		}
	case <-time.After(feedWait):
		t.Fatal("the channel stayed open after its context ended")
	}
}

// A poll that the database does not answer gives its connection back
// within changesPollTimeout: with a pool of one connection and the history
// locked so that the poll waits, the store's other statements still run
// while the lock is held (behind PgBouncer a poll waits this way for a
// server connection while PostgreSQL restarts, and the sidecar's readiness
// and its leases queued behind it).
func TestHistoryChangesPollIsBounded(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	mustMigrated(t, url)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	st := mustOpen(t, url+sep+"pool_max_conns=1&application_name=leasehold-one-conn")
	mustClaim(t, st, "before", "a", time.Minute)

	locker := mustConn(t, url)
	tx, err := locker.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `LOCK TABLE leasehold_history IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatalf("lock the history: %v", err)
	}
	if _, err := st.HistoryChanges(t.Context(), 0); err != nil {
		t.Fatalf("history changes: %v", err)
	}
	admin := mustConn(t, url)
	poll(t, "the poll to wait on the lock", func() bool {
		var waiting int
		err := admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
 WHERE application_name = 'leasehold-one-conn' AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting > 0
	})
	// The lock is still held: only the poll's timeout can free the pool's
	// one connection for this read of the leases.
	ctx, cancel := context.WithTimeout(t.Context(), feedWait)
	defer cancel()
	if l, err := st.Get(ctx, "before"); err != nil || l == nil {
		t.Fatalf("a read while a poll waits on the locked history: %v, %v; want the lease", l, err)
	}
}

// A store's own commits of history are signalled at once, without waiting
// for a poll: with polls an hour apart, each kind of write that records an
// event still wakes the store's HistoryChanges.
func TestHistoryChangesOwnCommits(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	st.changesPoll = time.Hour
	ch, err := st.HistoryChanges(t.Context(), 0)
	if err != nil {
		t.Fatalf("history changes: %v", err)
	}
	waitSignal(t, ch, "after the first poll")

	l := mustClaim(t, st, "own", "a", leasecore.MinTTL)
	waitSignal(t, ch, "the store's own claim")
	if _, err := st.Release(t.Context(), leasecore.ReleaseParams{Task: "own", Owner: "a", Token: l.Token}); err != nil {
		t.Fatalf("release: %v", err)
	}
	waitSignal(t, ch, "the store's own release")

	// Concurrent claims, which go out as one batch statement.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { mustClaim(t, st, fmt.Sprintf("batch-%d", i), "a", leasecore.MinTTL) })
	}
	wg.Wait()
	waitSignal(t, ch, "the store's own claims")
	// The claims may have gone out in more than one batch, each signalled:
	// let the later signals arrive, so that the quiet below is about the
	// reads that follow.
	drainSignals(ch, 200*time.Millisecond)

	// The leases run out: a renewal refused records "lost", and the
	// expiry sweep records "expired" for the others.
	waitExpired(t, st, "batch-0")
	mustQuiet(t, ch, "before the renewal") // waitExpired lists, which writes nothing
	if _, err := st.Renew(t.Context(), leasecore.RenewParams{Task: "batch-0", Owner: "a", TTL: leasecore.MinTTL}); !errors.Is(err, leasecore.ErrLost) {
		t.Fatalf("renewal of an expired lease: %v, want lost", err)
	}
	waitSignal(t, ch, "the store's own refused renewal")
	if sw, err := st.RecordExpiries(t.Context(), 100); err != nil || sw.Recorded == 0 {
		t.Fatalf("record expiries: %+v, %v; want some recorded", sw, err)
	}
	waitSignal(t, ch, "the store's own expiry sweep")
}

// notifications reports whether claims, batched claims, renewals (granted
// and refused), releases and the expiry sweep on the store at url notify
// on the channel migration 0004's trigger used: a session LISTENing there
// must get, first, the notification a statement sends after all of them.
// PostgreSQL delivers notifications in commit order, so one sent by any of
// the writes would come before it.
func notifications(t *testing.T, url string) (first string) {
	t.Helper()
	st := mustOpen(t, url)
	listener := mustConn(t, url)
	if _, err := listener.Exec(t.Context(), "LISTEN leasehold_history"); err != nil {
		t.Fatalf("listen: %v", err)
	}
	// A minute, so that on a busy machine the lease is still live when it
	// is renewed.
	l := mustClaim(t, st, "n", "a", time.Minute)
	if _, err := st.Renew(t.Context(), leasecore.RenewParams{Task: "n", Owner: "a", TTL: time.Minute, Token: l.Token}); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if _, err := st.Release(t.Context(), leasecore.ReleaseParams{Task: "n", Owner: "a", Token: l.Token}); err != nil {
		t.Fatalf("release: %v", err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { mustClaim(t, st, fmt.Sprintf("n-%d", i), "a", leasecore.MinTTL) })
	}
	wg.Wait()
	waitExpired(t, st, "n-0")
	if _, err := st.Renew(t.Context(), leasecore.RenewParams{Task: "n-0", Owner: "a", TTL: leasecore.MinTTL}); !errors.Is(err, leasecore.ErrLost) {
		t.Fatalf("renewal of an expired lease: %v, want lost", err)
	}
	if _, err := st.RecordExpiries(t.Context(), 100); err != nil {
		t.Fatalf("record expiries: %v", err)
	}
	if _, err := mustConn(t, url).Exec(t.Context(), "NOTIFY leasehold_history, 'after the writes'"); err != nil {
		t.Fatalf("notify: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), feedWait)
	defer cancel()
	n, err := listener.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("wait for the notification sent after the writes: %v", err)
	}
	return n.Payload
}

// No transaction of a claim, renewal, release or expiry sweep notifies:
// migration 0007 dropped 0004's trigger, whose NOTIFY made every grant's
// commit take a lock on the whole instance. The checker catches the trigger
// put back, as 0004 created it.
func TestWritesDoNotNotify(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	mustMigrated(t, url)
	if first := notifications(t, url); first != "after the writes" {
		t.Errorf("a lease statement notified (payload %q) before the notification sent after them all", first)
	}
	var triggers int
	err := mustConn(t, url).QueryRow(t.Context(), `
SELECT count(*) FROM pg_trigger
 WHERE NOT tgisinternal AND tgrelid IN ('leasehold_history'::regclass, 'leasehold_leases'::regclass)`).Scan(&triggers)
	if err != nil || triggers != 0 {
		t.Errorf("%d triggers on the lease and history tables (%v), want none", triggers, err)
	}

	// The mutant: the same checks on a store with 0004's trigger back.
	mutant := pgtest.NewDatabase(t)
	mustMigrated(t, mutant)
	sql, err := migrationFiles.ReadFile("migrations/0004_watch.sql")
	if err != nil {
		t.Fatal(err)
	}
	trigger := string(sql)[:strings.Index(string(sql), "-- No new index.")]
	if _, err := mustConn(t, mutant).Exec(t.Context(), trigger); err != nil {
		t.Fatalf("put 0004's trigger back: %v", err)
	}
	if first := notifications(t, mutant); first == "after the writes" {
		t.Error("the checker did not catch 0004's trigger put back")
	}
}

// Closing the store closes the channels of HistoryChanges, and it refuses
// new ones.
func TestHistoryChangesClosedWithStore(t *testing.T) {
	t.Parallel()
	st := mustMigrated(t, pgtest.NewDatabase(t))
	ch, err := st.HistoryChanges(t.Context(), 0)
	if err != nil {
		t.Fatalf("history changes: %v", err)
	}
	_ = st.Close()
	for range ch { // drains a pending value, ends when closed
	}
	if _, err := st.HistoryChanges(t.Context(), 0); !errors.Is(err, leasecore.ErrUnavailable) {
		t.Fatalf("history changes on a closed store: %v, want unavailable", err)
	}
}

// RecordExpiries skips a row another transaction holds locked, without
// waiting for it, and records it on a later call.
func TestRecordExpiriesSkipsLockedRows(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	conn := mustConn(t, url)
	mustClaim(t, st, "locked", "a", leasecore.MinTTL)
	mustClaim(t, st, "free", "a", leasecore.MinTTL)
	waitExpired(t, st, "locked", "free")

	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `SELECT FROM leasehold_leases WHERE task = 'locked' FOR UPDATE`); err != nil {
		t.Fatalf("lock: %v", err)
	}
	// A sweep that waited for the lock would run into this deadline.
	ctx, cancel := context.WithTimeout(t.Context(), feedWait)
	defer cancel()
	sw, err := st.RecordExpiries(ctx, 10)
	if err != nil || sw.Recorded != 1 {
		t.Fatalf("sweep with a row locked: %+v, %v; want 1 recorded (the unlocked one)", sw, err)
	}
	checkHistory(t, st, "free", event{kind: leasecore.EventAcquired, owner: "a", token: 1}, event{kind: leasecore.EventExpired, owner: "a", token: 1})
	checkHistory(t, st, "locked", event{kind: leasecore.EventAcquired, owner: "a", token: 1})
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if sw, err := st.RecordExpiries(t.Context(), 10); err != nil || sw.Recorded != 1 || !sw.NextExpiry.IsZero() {
		t.Fatalf("sweep after the lock: %+v, %v; want 1 recorded, no live lease", sw, err)
	}
	checkHistory(t, st, "locked", event{kind: leasecore.EventAcquired, owner: "a", token: 1}, event{kind: leasecore.EventExpired, owner: "a", token: 1})
}
