package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/internal/runjson"
)

// The history feed (leasecore.HistoryFeed): a cursor that reads the history
// by id, a change signal that follows the file whichever process writes it,
// and the recording of expiries nobody else noticed.
//
// Why a cursor never needs to hold events back here (HistoryCursor.Pending is
// always false): every event is written by some process's writer inside a
// BEGIN IMMEDIATE transaction, which holds the file's one write lock from
// before it reads the next id (nextEventExpr) until its commit. Its ids are
// explicit, and writing them advances sqlite_sequence as AUTOINCREMENT would,
// so the next transaction, in any process, numbers its events above them. Ids
// therefore commit in increasing order, one transaction after another: once a
// reader has seen an event, every event with a smaller id has committed
// already, and none can appear behind it. (PostgreSQL takes ids from a
// sequence before commit, and its cursor must wait; see leasecore.HistoryCursor.)

var _ leasecore.HistoryFeed = (*Store)(nil)

// changesPoll is how often HistoryChanges asks SQLite whether another
// connection committed to the file. Other processes cannot tell this one
// that they wrote, so polling is the only way to see their events; the
// question (PRAGMA data_version) is answered from the WAL index in shared
// memory without reading the database, so asking it often costs next to
// nothing, while the interval is the longest an event written by another
// process waits before a watcher is told of it, short next to what a person
// or a script watching notices. This Store's own commits signal at once
// (see Store.committed).
const changesPoll = 100 * time.Millisecond

// changesRetryMax bounds the pause between failed polls (file locked while
// it is recovered, the file replaced, the connection lost).
const changesRetryMax = 5 * time.Second

// followSQL reads the events after :after in id order: a range of the
// table's rowid, no sort.
const followSQL = `
SELECT id, task, kind, owner, token, at, detail, credential, hold_until, run FROM leasehold_history
WHERE id > :after ORDER BY id LIMIT :limit`

// newestEventSQL is the id of the newest event ever committed (0: none):
// events committed later have larger ids, even when the newest ones were
// pruned meanwhile (see nextEventExpr). It is the history's id high-water
// mark: a position above it was never this history's, or the history went
// back (the file was restored in place, by SQLite's backup API or its
// shell's .restore, from an older copy).
const newestEventSQL = `SELECT ` + nextEventExpr + ` - 1`

// dueSQL finds, in one statement (one snapshot, one reading of the clock),
// the leases that ran out unreleased and whose end is not recorded, at most
// :limit, earliest first, each as a row (task, expires_at); and the earliest
// expiry among the live leases as the row whose task is NULL (its expiry
// NULL when none is live).
const dueSQL = `
WITH n(ms) AS (SELECT ` + nowMS + `)
SELECT NULL, (SELECT min(expires_at) FROM leasehold_leases, n WHERE released_at IS NULL AND expires_at > n.ms)
UNION ALL
SELECT * FROM (
    SELECT task, expires_at FROM leasehold_leases, n
    WHERE released_at IS NULL AND end_recorded = 0 AND expires_at <= n.ms
    ORDER BY expires_at, task
    LIMIT :limit)`

// FollowHistory returns a cursor after the event with id after, or, when
// after is below zero, after the newest event committed so far. An after
// above that newest id is a *leasecore.PositionAheadError.
func (s *Store) FollowHistory(ctx context.Context, after int64) (leasecore.HistoryCursor, error) {
	const op = leasecore.OpFollowHistory
	if err := s.readable(op); err != nil {
		return nil, err
	}
	if after != 0 {
		var newest int64
		if err := s.reader.QueryRowContext(ctx, newestEventSQL).Scan(&newest); err != nil {
			return nil, interpretError(op, err)
		}
		if after > newest {
			return nil, &leasecore.PositionAheadError{Position: after, Newest: newest}
		}
		if after < 0 {
			after = newest
		}
	}
	return &cursor{s: s, pos: after}, nil
}

// readable is usable, and the file guard's check that the path still names
// the Store's file: a reader connection opened before the file was replaced
// or deleted would go on reading the old file, where no new event will ever
// appear, so the feed answers unavailable instead, as writes and Ping do.
func (s *Store) readable(op string) error {
	if err := s.usable(op); err != nil {
		return err
	}
	if err := s.file.check(false); err != nil {
		return interpretError(op, err)
	}
	return nil
}

// cursor is the SQLite HistoryCursor: a position, read on the reader pool.
type cursor struct {
	s   *Store
	pos int64
}

// Next returns up to limit events after the position (at least one is asked
// for when limit is below one); a *leasecore.PositionAheadError when the
// history's newest id went below the position.
func (c *cursor) Next(ctx context.Context, limit int) ([]leasecore.Event, error) {
	const op = leasecore.OpReadHistory
	if err := c.s.readable(op); err != nil {
		return nil, err
	}
	var events []leasecore.Event
	err := c.s.read(ctx, op, followSQL, []any{sql.Named("after", c.pos), sql.Named("limit", max(limit, 1))},
		func(rows *sql.Rows) error {
			e, err := scanEvent(rows)
			if err == nil {
				events = append(events, e)
			}
			return err
		})
	if err != nil {
		return nil, err
	}
	// Only a read that finds nothing can be below a history that went
	// back: events after the position prove the mark above it.
	newest := c.pos
	if len(events) == 0 {
		if err := c.s.read(ctx, op, newestEventSQL, nil, func(rows *sql.Rows) error { return rows.Scan(&newest) }); err != nil {
			return nil, err
		}
	}
	// Checked again, so that nothing read from a file that was replaced
	// meanwhile is handed out or taken for this file's history.
	if err := c.s.readable(op); err != nil {
		return nil, err
	}
	if c.pos > newest {
		// The file's history went back below ids this cursor has passed.
		return nil, &leasecore.PositionAheadError{Position: c.pos, Newest: newest}
	}
	if n := len(events); n > 0 {
		c.pos = events[n-1].ID
	}
	return events, nil
}

func (c *cursor) Position() int64 { return c.pos }

// Pending is always false: ids commit in order here (see the top of this
// file).
func (c *cursor) Pending() bool { return false }

// Close is a no-op: the cursor holds no connection between calls.
func (c *cursor) Close() error { return nil }

// scanEvent reads id, task, kind, owner, token, at, detail, credential,
// hold_until, run.
func scanEvent(rows *sql.Rows) (leasecore.Event, error) {
	var (
		e    leasecore.Event
		kind string
		at   int64
		hold sql.NullInt64
		run  *string
	)
	if err := rows.Scan(&e.ID, &e.Task, &kind, &e.Owner, &e.Token, &at, &e.Detail, &e.Credential, &hold, &run); err != nil {
		return e, err
	}
	e.Kind, e.At = leasecore.EventKind(kind), fromMS(at)
	if hold.Valid {
		e.HoldUntil = fromMS(hold.Int64)
	}
	var err error
	e.Run, err = runjson.Decode(run)
	return e, err
}

// HistoryChanges follows the file: a goroutine holds one connection of its
// own, asks it every poll (zero or less: changesPoll) whether any other connection, in this
// process or another, committed (PRAGMA data_version), and when one did and
// the newest event id moved, sends a value. A commit of this Store's writer
// that wrote history makes it ask at once. A failed poll sends a value too
// (the reader then reads, and meets the failure itself: a replaced file is
// unavailable) and is retried with a growing pause. The channel is closed
// when ctx ends or the Store is closed.
//
// Each call holds a connection until it ends, so a process should follow a
// store through one call and fan its signal out (the watch, package leasecore/watch, does).
func (s *Store) HistoryChanges(ctx context.Context, poll time.Duration) (<-chan struct{}, error) {
	if poll <= 0 {
		poll = s.changesPoll
	}
	const op = leasecore.OpFollowHistory
	if err := s.readable(op); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	w := &watcher{s: s}
	// The first reading is the baseline: a commit after HistoryChanges
	// returns is signalled.
	if _, err := w.poll(ctx); err != nil {
		w.close()
		stop()
		cancel()
		return nil, interpretError(op, err)
	}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		w.close()
		stop()
		cancel()
		return nil, interpretError(op, errClosed)
	}
	s.feeds.Add(1)
	s.mu.Unlock()

	ch := make(chan struct{}, 1)
	go func() {
		defer s.feeds.Done()
		defer close(ch)
		defer cancel()
		defer stop()
		defer w.close()
		w.follow(ctx, ch, poll)
	}()
	return ch, nil
}

// watcher is one HistoryChanges loop's state.
type watcher struct {
	s *Store
	// conn is the connection data_version is asked on: the value means
	// something only when compared with an earlier one on the same
	// connection. nil after a failure, until the next poll opens another.
	conn *sql.Conn
	// version is the last data_version read on conn (valid when known).
	version int64
	known   bool
	// newest is the newest event id last seen.
	newest int64
}

// follow polls until ctx ends, sending on ch (without waiting: a value
// already in it stands for this one too).
func (w *watcher) follow(ctx context.Context, ch chan<- struct{}, poll time.Duration) {
	signal := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var retry *backoff.Backoff // non-nil while polls fail
	// local is taken before each poll, so that a commit during the poll is
	// not missed. The first poll comes at once: this process's commits
	// between HistoryChanges' baseline and this goroutine's first wait
	// notified nobody (under load that gap is long), and the next may not
	// come before the ticker.
	local := w.s.committed.Wait()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-local:
			}
			local = w.s.committed.Wait()
		}
		changed, err := w.poll(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if retry == nil {
				retry = backoff.New(poll, changesRetryMax)
				signal()
			}
			if backoff.Sleep(ctx, retry.Next()) != nil {
				return
			}
			continue
		}
		retry = nil
		if changed {
			signal()
		}
	}
}

// poll asks whether history was committed since the last poll: data_version
// first, which changes with any commit by another connection (renewals
// too), then, only when it did, the newest event id.
func (w *watcher) poll(ctx context.Context) (changed bool, err error) {
	if err := w.s.file.check(false); err != nil {
		return false, err
	}
	if w.conn == nil {
		if w.conn, err = w.s.changes.Conn(ctx); err != nil {
			return false, err
		}
		w.known = false
	}
	var version int64
	if err := w.conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&version); err != nil {
		w.close()
		return false, err
	}
	if w.known && version == w.version {
		return false, nil
	}
	var newest int64
	if err := w.conn.QueryRowContext(ctx, newestEventSQL).Scan(&newest); err != nil {
		w.close()
		return false, err
	}
	w.version, w.known = version, true
	changed, w.newest = newest != w.newest, newest
	return changed, nil
}

func (w *watcher) close() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// RecordExpiries records an "expired" event, at its expiry, for at most
// limit leases that ran out unreleased and whose end the history does not
// show yet, and sets their end_recorded: a later grant of the task, or a
// late renewal, then records no second "expired" for it (the renewal still
// records its "lost"). A claim or a late renewal that comes first records
// the same event (expiredEvent), so the history does not depend on whether
// a sweep ran.
//
// The search reads the whole lease table, so it runs on the reader pool,
// beside the writer; only when it finds leases to record does a writer
// batch (FULL durability, the file guard, serialised with every claim in
// any process) check each again under the write lock and record it. A call
// that finds nothing due writes nothing. NextExpiry comes from the search's
// snapshot.
func (s *Store) RecordExpiries(ctx context.Context, limit int) (leasecore.ExpirySweep, error) {
	const op = leasecore.OpRecordExpiries
	if err := s.readable(op); err != nil {
		return leasecore.ExpirySweep{}, err
	}
	var (
		sweep leasecore.ExpirySweep
		due   []string
	)
	err := s.read(ctx, op, dueSQL, []any{sql.Named("limit", max(limit, 0))}, func(rows *sql.Rows) error {
		var (
			task sql.NullString
			at   sql.NullInt64
		)
		if err := rows.Scan(&task, &at); err != nil {
			return err
		}
		switch {
		case task.Valid:
			due = append(due, task.String)
		case at.Valid:
			sweep.NextExpiry = fromMS(at.Int64)
		}
		return nil
	})
	if err != nil || len(due) == 0 {
		return sweep, err
	}
	res := s.submit(ctx, op, func(ctx context.Context, st *txStmts) (answer, error) {
		return recordExpiries(ctx, st, due)
	}, due...)
	if res.err != nil {
		return leasecore.ExpirySweep{}, res.err
	}
	sweep.Recorded = res.recorded
	return sweep, nil
}

// recordExpiries is RecordExpiries' write inside a batch: each task whose
// lease still ran out with its end unrecorded (a claim, or the owner's
// renewal, may have recorded it since the search) gets its "expired" event.
func recordExpiries(ctx context.Context, st *txStmts, tasks []string) (answer, error) {
	var a answer
	for _, task := range tasks {
		cur, err := readCurrent(ctx, st, task)
		if err != nil {
			return answer{}, err
		}
		if !cur.endUnrecorded() {
			continue
		}
		id, err := record(ctx, st, expiredEvent(task, cur), cur.expiresAt, cur.lastEvent)
		if err != nil {
			return answer{}, err
		}
		if err := setNewest(ctx, st, task, id, true, false); err != nil {
			return answer{}, err
		}
		a.recorded++
	}
	return a, nil
}
