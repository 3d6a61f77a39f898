package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/pgtest"
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
	rows, err := tx.Query(t.Context(), claimSQL, task, "in-flight", int64(60000), "", "")
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
	rows, err := u.Query(t.Context(), claimSQL, "u-task", "u", int64(60000), "", "")
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
// that record nothing, again after its session is killed and reopened, and
// closes its channel when its context ends.
func TestHistoryChanges(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	other := mustOpen(t, url)
	admin := mustConn(t, url)

	ctx, cancel := context.WithCancel(t.Context())
	ch, err := st.HistoryChanges(ctx)
	if err != nil {
		t.Fatalf("history changes: %v", err)
	}
	waitSignal(t, ch, "after connecting")

	l := mustClaim(t, other, "task", "a", time.Minute)
	waitSignal(t, ch, "a claim by another store")

	// A refresh and a refused claim insert no history: no signal. (A
	// release after them does; its signal is the proof that the earlier
	// statements' notifications, had there been any, were delivered.)
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

	// Kill the listening session: the listener opens a new one and
	// signals (notifications may have been lost meanwhile), then hears
	// commits again.
	var killed int
	err = admin.QueryRow(t.Context(), `
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid() AND query = 'LISTEN `+HistoryChannel+`'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminating the listening session: killed %d, %v; want 1", killed, err)
	}
	waitSignal(t, ch, "after reconnecting")
	mustClaim(t, other, "task2", "a", time.Minute)
	waitSignal(t, ch, "a claim after reconnecting")

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

// Closing the store closes the channels of HistoryChanges, and it refuses
// new ones.
func TestHistoryChangesClosedWithStore(t *testing.T) {
	t.Parallel()
	st := mustMigrated(t, pgtest.NewDatabase(t))
	ch, err := st.HistoryChanges(t.Context())
	if err != nil {
		t.Fatalf("history changes: %v", err)
	}
	_ = st.Close()
	for range ch { // drains a pending value, ends when closed
	}
	if _, err := st.HistoryChanges(t.Context()); !errors.Is(err, leasecore.ErrUnavailable) {
		t.Fatalf("history changes on a closed store: %v, want unavailable", err)
	}
}

// The listening session goes to Options.ListenURL when it is given.
func TestListenURL(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	mustMigrated(t, url)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	st, err := OpenWith(t.Context(), url, Options{ListenURL: url + sep + "application_name=leasehold-listener"})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer st.Close()
	ch, err := st.HistoryChanges(t.Context())
	if err != nil {
		t.Fatalf("history changes: %v", err)
	}
	waitSignal(t, ch, "after connecting")
	var app string
	err = mustConn(t, url).QueryRow(t.Context(), `
SELECT application_name FROM pg_stat_activity
 WHERE datname = current_database() AND query = 'LISTEN `+HistoryChannel+`'`).Scan(&app)
	if err != nil || app != "leasehold-listener" {
		t.Fatalf("listening session's application_name %q (%v), want leasehold-listener", app, err)
	}
}

// A listen URL that cannot be parsed fails OpenWith, naming the listen
// URL, with its password masked.
func TestListenURLInvalid(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"postgres://u:s3cr3t@127.0.0.1:notaport/db",
		"postgres://u:s3cr3t@x@127.0.0.1:1/db",
	} {
		_, err := OpenWith(t.Context(), "postgres://u@127.0.0.1:1/db", Options{ListenURL: bad})
		if err == nil || !strings.Contains(err.Error(), "listen URL") || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("OpenWith(listen URL %q) = %v, want an error naming the listen URL without the password", bad, err)
		}
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
