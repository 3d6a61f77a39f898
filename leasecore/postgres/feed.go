package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/leasecore"
)

// The driver's side of the watch (leasecore.HistoryFeed): a cursor that
// reads leasehold_history in id order without ever skipping an event that
// commits late, a poll of the newest committed event that says when to read
// (with this Store's own commits signalled at once), and the sweep that
// records expiries nobody else noticed.
//
// No transaction that claims, renews or releases notifies anybody. Until
// migration 0007 a trigger ran pg_notify in every one that wrote history,
// and a transaction that has notified takes a lock on the whole instance
// while it commits (PostgreSQL keeps its notification queue in commit
// order): every grant of every sidecar, and every notifying transaction of
// any other application on the instance, committed one at a time.
// docs/design.md ("The history feed") weighs the poll against the other
// ways of telling watchers.

// GapSettleTimeout is the longest a cursor holds events back behind a
// missing id whose transaction it cannot prove ended (see cursor.Next):
// after it, the missing ids are skipped. A transaction that holds a
// history id open this long is not a lease statement (those are one short
// autocommit statement each) but something else keeping the snapshot's
// xmin down: a transaction that holds a transaction id, in any database of
// the cluster, such as another application's open write transaction or a
// prepared (two-phase) one; a session that only holds a snapshot does not.
// Without the bound it would stall every watcher for as long as it stays
// open.
const GapSettleTimeout = 30 * time.Second

// defaultReadLimit is how many events Next reads when its limit is not
// positive.
const defaultReadLimit = 1000

// ChangesPoll is how often HistoryChanges asks the database for its newest
// committed event id while somebody follows it, unless its caller says
// (leasecore.DefaultWatchPoll, which the watch asks for by default): the longest an event that
// another process commits waits before this one is told of it. The
// question is one short read through the pool (followFromNowSQL: the last
// entry of the history's primary key), so it goes through PgBouncer in
// transaction mode like every other statement and needs no session of its
// own. Events this Store commits are signalled at once, without a poll.
const ChangesPoll = 100 * time.Millisecond

// changesRetryMax bounds the pause between failed polls.
const changesRetryMax = 5 * time.Second

// changesPollTimeout bounds one poll, which takes a millisecond when the
// database answers. The poll holds a connection of the store's pool while
// it waits, and a pool may have two; behind PgBouncer a query waits for a
// server connection as long as PgBouncer's query_wait_timeout (two minutes
// by default) while PostgreSQL is away. Unbounded, a poll issued during a
// restart would hold its connection that long, and the sidecar's
// readiness check and its lease statements would queue behind it.
// (docs/design.md: this bound does not cure the slow recovery that the
// thousand-pod simulation finds after a restart when sidecars serve
// watchers; its cause is open.)
const changesPollTimeout = time.Second

// opHistoryChanges names HistoryChanges in its errors.
const opHistoryChanges = "history_changes"

// FollowHistory returns a cursor after the event with ID after, or, for an
// after below zero, after the newest event committed when it is called. An
// event that took its id before that moment and commits after it is
// concurrent with the call and may be left out; every later one is read.
// An after above the id high-water mark (highWaterExpr) is a
// *leasecore.PositionAheadError.
func (s *Store) FollowHistory(ctx context.Context, after int64) (leasecore.HistoryCursor, error) {
	const op = leasecore.OpFollowHistory
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	if after < 0 {
		if err := s.pool.QueryRow(ctx, followFromNowSQL).Scan(&after); err != nil {
			return nil, interpretError(op, err)
		}
	} else if after > 0 {
		var newest int64
		if err := s.pool.QueryRow(ctx, highWaterSQL).Scan(&newest); err != nil {
			return nil, interpretError(op, err)
		}
		if after > newest {
			return nil, &leasecore.PositionAheadError{Position: after, Newest: newest}
		}
	}
	return &cursor{s: s, pos: after}, nil
}

// cursor is the driver's HistoryCursor.
//
// Identity ids are taken when a row is inserted, before its transaction
// commits, so commits can make ids visible out of order: while a statement
// that took id 7 is still running, one that took id 8 may commit. A cursor
// that delivered 8 and moved on would never deliver 7. So the cursor
// delivers only ids that follow its position without a hole, and holds
// back at the first missing id (a gap) until it can prove that the missing
// ids will never commit: they were rolled back (a failed statement) or
// deleted (pruned).
//
// The proof uses the snapshot of the statement that found the gap: every
// read returns, from one statement, its snapshot's xmin and a bound above
// every transaction id assigned when that snapshot was taken (the next id
// to assign, read after it; readHistorySQL). Suppose a read with snapshot
// S sees id h but not id g < h. g was taken (nextval) before h, and h
// committed before S was taken, so g was taken before S. ("Taken before"
// relies on the identity's sequence handing ids out in the order they are
// asked for, which holds for its CACHE 1, the default that migration 0002
// keeps: with a per-session cache, a session could insert a smaller id
// from its cache long after another took a larger one.) Every statement
// that inserts history first writes a lease row in the same statement (the
// event insert reads the lease write's RETURNING; sql.go), so the
// transaction T that took g had its transaction id before it took g, so
// before S: T's id < S's bound. A later read whose snapshot S' has xmin ≥
// that bound sees every transaction below the bound ended, T included: if
// T committed g, S' sees g; if S' still does not, g was rolled back or
// pruned and is gone for good, and the cursor skips it. The same holds for
// every id missing below h, which is why a gap is remembered with the
// first id seen after it (end) and only ids below end are skipped on that
// proof.
//
// (S's xmax would not do as the bound, though it looks like one: it is one
// past the newest transaction that had ended at S, and a transaction
// running with a larger id, T for instance when it began after the one
// that committed h, is neither below it nor listed as running. A cursor
// that settled on xmax skipped events under concurrent writers.)
//
// A gap whose proof does not come within GapSettleTimeout (a long
// transaction elsewhere in the database holds xmin down) is skipped
// anyway, so that one long transaction cannot stall every watcher.
type cursor struct {
	s       *Store
	pos     int64
	gap     *gap // the gap right after pos, when one was seen; nil otherwise
	pending bool
	closed  bool
}

// gap is a run of missing ids, [start, end), as first seen, with the
// transaction id bound of the snapshot it was seen in (see cursor) and the
// time it was seen.
type gap struct {
	start, end int64
	bound      int64
	seen       time.Time
}

// Next returns up to limit events after the cursor's position (limit ≤ 0:
// defaultReadLimit), from one statement, holding events back behind a gap
// that is not settled yet (Pending then reports true).
func (c *cursor) Next(ctx context.Context, limit int) ([]leasecore.Event, error) {
	const op = leasecore.OpReadHistory
	if c.closed {
		return nil, interpretError(op, errors.New("the history cursor is closed"))
	}
	if c.s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	if limit <= 0 {
		limit = defaultReadLimit
	}
	// The fallback's clock starts before the read: a read that returns late
	// (a slow server, a frozen process) must not count the time it waited
	// against a gap its snapshot predates.
	asked := time.Now()
	rows, err := c.s.pool.Query(ctx, readHistorySQL, c.pos, limit)
	if err != nil {
		return nil, interpretError(op, err)
	}
	var (
		xmin, bound, newest int64
		evs                 []leasecore.Event
	)
	for rows.Next() {
		var (
			id, token                          *int64
			task, kind, who, about, actor, run *string
			at, hold                           *time.Time
		)
		if err := rows.Scan(&xmin, &bound, &newest, &id, &task, &kind, &who, &token, &at, &about, &actor, &hold, &run); err != nil {
			rows.Close()
			return nil, interpretError(op, err)
		}
		if id != nil {
			e := leasecore.Event{ID: *id, Task: *task, Kind: leasecore.EventKind(*kind),
				Owner: *who, Token: *token, At: at.UTC(), Detail: *about, Credential: *actor}
			if err := eventExtras(&e, hold, run); err != nil {
				rows.Close()
				return nil, interpretError(op, err)
			}
			evs = append(evs, e)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, interpretError(op, err)
	}
	if c.pos > newest {
		// The sequence went back below ids this cursor has passed: the
		// history was restored, and the ids it waits for will name other
		// events.
		return nil, &leasecore.PositionAheadError{Position: c.pos, Newest: newest}
	}
	return c.settle(evs, xmin, bound, asked), nil
}

// settle returns the prefix of evs (the events after pos, in id order, read
// in a snapshot with xmin and transaction id bound) that may be delivered now, advancing
// the position past them and past the gaps it proves settled; see cursor.
func (c *cursor) settle(evs []leasecore.Event, xmin, bound int64, now time.Time) []leasecore.Event {
	c.pending = false
	out := evs[:0]
	for _, e := range evs {
		if e.ID > c.pos+1 {
			g := c.gap
			if g != nil && g.start == c.pos+1 && (xmin >= g.bound || now.Sub(g.seen) >= GapSettleTimeout) {
				// Every id in [g.start, g.end) was missing when the gap was
				// first seen, and has ended since: skip those that are still
				// missing.
				c.pos = min(g.end, e.ID) - 1
				c.gap = nil
			}
			if e.ID > c.pos+1 {
				if c.gap == nil || c.gap.start != c.pos+1 {
					c.gap = &gap{start: c.pos + 1, end: e.ID, bound: bound, seen: now}
				}
				c.pending = true
				return out
			}
		}
		out = append(out, e)
		c.pos = e.ID
	}
	c.gap = nil
	return out
}

// Position is the id after which the next Next reads.
func (c *cursor) Position() int64 { return c.pos }

// Pending reports whether the last Next held events back behind a gap.
func (c *cursor) Pending() bool { return c.pending }

// Close ends the cursor. It holds no connection between calls.
func (c *cursor) Close() error {
	c.closed = true
	return nil
}

// RecordExpiries records an "expired" event for up to limit leases that
// expired unreleased with their end unrecorded, in one statement that marks
// each lease's end recorded (recordExpiriesSQL), and answers the earliest
// expiry among live leases.
func (s *Store) RecordExpiries(ctx context.Context, limit int) (leasecore.ExpirySweep, error) {
	const op = leasecore.OpRecordExpiries
	if s.closed.Load() {
		return leasecore.ExpirySweep{}, interpretError(op, errClosed)
	}
	if limit <= 0 {
		return leasecore.ExpirySweep{}, &leasecore.ValidationError{Field: "Limit", Rule: fmt.Sprintf("must be positive, not %d", limit)}
	}
	if err := s.recentReadOnly(); err != nil {
		return leasecore.ExpirySweep{}, interpretError(op, err)
	}
	var (
		n    int64
		next *time.Time
	)
	if err := s.pool.QueryRow(ctx, recordExpiriesSQL, limit).Scan(&n, &next); err != nil {
		s.noteReadOnly(err)
		return leasecore.ExpirySweep{}, interpretError(op, err)
	}
	if n > 0 {
		s.committed.Notify()
	}
	sweep := leasecore.ExpirySweep{Recorded: int(n)}
	if next != nil {
		sweep.NextExpiry = next.UTC()
	}
	return sweep, nil
}

// HistoryChanges returns a channel that receives a value soon after any
// process commits history events to the database: a goroutine asks the
// database for its newest committed event id every poll (zero or less:
// ChangesPoll) and sends a value when the id moved, and sends one
// at once when this Store commits history. It sends one after its first
// poll too, and after a failed poll (the reader then reads, and meets the
// failure itself, or the events committed while the database was away);
// failed polls are retried with a growing pause. The channel is closed when
// ctx ends or the store closes. It fails only on a closed store.
//
// A newest id that did not move does not mean that nothing committed: an
// event with a smaller id than one already seen may commit late. The cursor
// then holds the later events back behind the gap and says so (Pending), and
// its reader reads again soon on its own (the watch, package leasecore/watch, does), so no signal
// is needed for it.
func (s *Store) HistoryChanges(ctx context.Context, poll time.Duration) (<-chan struct{}, error) {
	if poll <= 0 {
		poll = s.changesPoll
	}
	s.changesMu.Lock()
	defer s.changesMu.Unlock()
	if s.closed.Load() || s.changesCtx.Err() != nil {
		return nil, interpretError(opHistoryChanges, errClosed)
	}
	ch := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.changesCtx, cancel)
	s.changes.Go(func() {
		defer close(ch)
		defer stop()
		defer cancel()
		s.followChanges(ctx, ch, poll)
	})
	return ch, nil
}

// signal sends on ch unless a value is waiting there already.
func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// followChanges polls the newest committed event id until ctx ends,
// signalling ch when it moves and whenever this Store commits history.
func (s *Store) followChanges(ctx context.Context, ch chan<- struct{}, poll time.Duration) {
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var (
		newest int64
		known  bool
		retry  *backoff.Backoff // non-nil while polls fail
		// local is taken before each poll, so that a commit of this Store
		// during the poll is signalled rather than lost between the two.
		local <-chan struct{}
	)
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-local:
				// This Store committed history: no need to ask.
				local = s.committed.Wait()
				signal(ch)
				continue
			case <-tick.C:
			}
		}
		local = s.committed.Wait()
		var n int64
		pollCtx, cancel := context.WithTimeout(ctx, changesPollTimeout)
		err := s.pool.QueryRow(pollCtx, followFromNowSQL).Scan(&n)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if retry == nil {
				retry = backoff.New(poll, changesRetryMax)
				signal(ch)
			}
			if backoff.Sleep(ctx, retry.Next()) != nil {
				return
			}
			continue
		}
		if !known || retry != nil || n != newest {
			signal(ch)
		}
		newest, known, retry = n, true, nil
	}
}
