package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// nowMS is the store's clock in whole milliseconds since the Unix epoch.
// SQLite reads its clock once per statement step, so every use of it in one
// statement sees the same instant.
const nowMS = `CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)`

// rowsSQL reads the store's now, the id the next event gets, and the rows of
// the tasks in :tasks (see hexList), in one statement. It always yields a
// row: the clock and the event id, then a row's columns (NULL for all when
// none of the tasks has a row). The lease operations of a batch decide on
// these rows and the one instant (see txStmts.rows).
const rowsSQL = `
SELECT n.ms, n.next_event, l.task, l.owner, l.token, l.acquired_at, l.renewed_at, l.expires_at, l.ttl_ms, l.renew_count,
       l.note, l.released_at, l.end_recorded, l.last_event, l.hold_until, l.lost_token
FROM (SELECT ` + nowMS + ` AS ms, ` + nextEventExpr + ` AS next_event) AS n
LEFT JOIN leasehold_leases AS l ON l.task IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:tasks))`

// hexList is tasks as rowsSQL takes them: a JSON array of the names'
// bytes in hex, which no name's bytes can change on the way (JSON would
// replace invalid UTF-8).
func hexList(tasks []string) string {
	var b strings.Builder
	b.Grow(2 + len(tasks)*3)
	b.WriteByte('[')
	for i, t := range tasks {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(hex.EncodeToString([]byte(t)))
		b.WriteByte('"')
	}
	b.WriteByte(']')
	return b.String()
}

// leaseColumns are the columns rawLease.dest reads, in its order.
const leaseColumns = `task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note, hold_until`

// grantSQL hands a task that has a row to a new holder with :token, the
// next token: the caller read the row's token as :token - 1 in the same
// transaction (a task's first row goes in with insertLeasesSQL). Its
// acquired event (:event) is now the task's newest. The caller has seen that
// no lease is live; the WHERE repeats the checks, so that the statement
// alone can never take a live lease away from its holder nor skip or repeat
// a token, nor end a minimum hold early: it changes no row then, which the
// caller reports as errVanished. :hold is the grant's hold_until, NULL for
// none.
// The caller knows every column it writes, so the statement returns none (a
// RETURNING clause costs SQLite a temporary table per statement).
const grantSQL = `
INSERT INTO leasehold_leases AS l
       (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note, released_at, end_recorded, last_event, hold_until)
VALUES (:task, :owner, :token, :now, :now, :now + :ttl, :ttl, 0, :note, NULL, 0, :event, :hold)
ON CONFLICT (task) DO UPDATE SET
       owner = excluded.owner,
       token = excluded.token,
       acquired_at = excluded.acquired_at,
       renewed_at = excluded.renewed_at,
       expires_at = excluded.expires_at,
       ttl_ms = excluded.ttl_ms,
       renew_count = 0,
       note = excluded.note,
       released_at = NULL,
       end_recorded = 0,
       last_event = excluded.last_event,
       hold_until = excluded.hold_until
WHERE (l.released_at IS NOT NULL OR l.expires_at <= :now) AND coalesce(l.hold_until, 0) <= :now
  AND l.token = excluded.token - 1`

// extendSQL extends the owner's live lease under the given token: a
// same-owner claim (which also replaces the note) or a renewal (which keeps
// it). Like grantSQL, it returns nothing: the caller knows the row. :hold
// is the lease's hold_until after it (NULL for none): a refresh may move it
// later, never earlier.
const extendSQL = `
UPDATE leasehold_leases
SET expires_at = :now + :ttl,
    renewed_at = :now,
    ttl_ms = :ttl,
    renew_count = renew_count + 1,
    note = :note,
    hold_until = :hold
WHERE task = :task AND owner = :owner AND token = :token
  AND released_at IS NULL AND expires_at > :now`

// releaseSQL ends the lease whose release was just recorded (the same
// transaction has just seen it live), as of that event's time :at.
const releaseSQL = `
UPDATE leasehold_leases
SET released_at = :at, expires_at = min(expires_at, :at), last_event = :event
WHERE task = :task AND released_at IS NULL`

// nextEventExpr is the id the next event of the history gets, as
// AUTOINCREMENT would choose it: one more than the largest id the table ever
// held (sqlite_sequence) or holds. A batch reads it with its rows (rowsSQL),
// under the write lock its transaction holds from its start, and numbers its
// events from it (see txStmts.events).
const nextEventExpr = `
max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'leasehold_history'), 0),
    coalesce((SELECT max(id) FROM leasehold_history), 0)) + 1`

// insertEventsSQL appends n events with the ids the batch gave them, in one
// statement: eleven parameters per event (id, task, kind, owner, token, at,
// detail, prev_id, credential, hold_until, run).
func insertEventsSQL(n int) string {
	return multiRow(`INSERT INTO leasehold_history (id, task, kind, owner, token, at, detail, prev_id, credential, hold_until, run) VALUES `,
		`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, n)
}

// insertLeasesSQL writes the first rows of n tasks, each its first lease
// (token 1), in one statement: nine parameters per row (task, owner,
// acquired_at, renewed_at, expires_at, ttl_ms, note, last_event,
// hold_until). The caller
// has read, in the same transaction, that the tasks have no row; if one had,
// the primary key would fail the statement, and the batch.
func insertLeasesSQL(n int) string {
	return multiRow(`INSERT INTO leasehold_leases
       (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note, released_at, end_recorded, last_event, hold_until)
VALUES `, `(?, ?, 1, ?, ?, ?, ?, 0, ?, NULL, 0, ?, ?)`, n)
}

// multiRow is head followed by n copies of row, separated by commas.
func multiRow(head, row string, n int) string {
	return head + strings.Repeat(row+", ", n-1) + row
}

// newestSQL makes :event the task's newest event; with :ended, it also
// notes that the end of the lease, which ran out unreleased, is recorded
// (expired), and with :lost that its loss is (lost, under its token).
const newestSQL = `
UPDATE leasehold_leases
SET last_event = :event, end_recorded = CASE WHEN :ended THEN 1 ELSE end_recorded END,
    lost_token = CASE WHEN :lost THEN token ELSE lost_token END
WHERE task = :task`

// liveSQL selects live leases with the store's now as the last column.
const liveSQL = `
SELECT ` + leaseColumns + `, n.ms
FROM leasehold_leases, (SELECT ` + nowMS + ` AS ms) AS n
WHERE released_at IS NULL AND expires_at > n.ms`

// errVanished reports a write that matched no row although the same
// transaction had just read it: it cannot happen while transactions are
// serialised, and is reported as unavailable if it ever does.
var errVanished = errors.New("lease row changed inside its own transaction")

// current is a task's row as the batch knows it (see txStmts.rows), and
// the batch's now.
type current struct {
	now        int64
	exists     bool
	owner      string
	token      int64
	acquiredAt int64
	renewedAt  int64
	expiresAt  int64
	ttlMS      int64
	renewCount int64
	note       string
	released   bool
	// endRecorded: the lease ran out unreleased and its end (expired) is
	// in the history already.
	endRecorded bool
	// lostToken is the token of the lease whose loss (lost: a refused late
	// renewal) the history holds, 0 for none: the row's lease's loss is
	// recorded when it is the row's token.
	lostToken int64
	// lastEvent is the id of the task's newest event, 0 when it has none.
	lastEvent int64
	// holdUntil is the end of the lease's minimum hold, 0 for none.
	holdUntil int64
	// unwritten: the row is the task's first, not yet in the table (see
	// txStmts.newRows).
	unwritten bool
}

// endUnrecorded reports whether the row holds a lease that ran out
// unreleased and whose end the history does not show yet.
func (c current) endUnrecorded() bool {
	return c.exists && !c.released && !c.endRecorded && c.expiresAt <= c.now
}

// lossUnrecorded reports whether the row holds a lease that ran out
// unreleased and whose loss the history does not show yet.
func (c current) lossUnrecorded() bool {
	return c.exists && !c.released && c.expiresAt <= c.now && c.lostToken != c.token
}

func (c current) live() bool { return c.exists && !c.released && c.expiresAt > c.now }

// resting reports whether the row's lease has ended (released or expired)
// before its minimum hold did: the task is granted to nobody until then.
func (c current) resting() bool { return c.exists && !c.live() && c.holdUntil > c.now }

// holder is the row's lease as a refused claimant sees it.
func (c current) holder() leasecore.Holder {
	h := leasecore.Holder{Owner: c.owner, ExpiresAt: fromMS(c.expiresAt), AcquiredAt: fromMS(c.acquiredAt), Resting: c.resting()}
	if c.holdUntil != 0 {
		h.HoldUntil = fromMS(c.holdUntil)
	}
	if h.Resting {
		h.ExpiresAt = h.HoldUntil
	}
	h.TTLRemaining = h.ExpiresAt.Sub(fromMS(c.now))
	return h
}

// nullMS is a time in ms for a column where 0 is NULL.
func nullMS(ms int64) sql.NullInt64 { return sql.NullInt64{Int64: ms, Valid: ms != 0} }

// lease is the row's lease on task, as the store answers it.
func (c current) lease(task string) *leasecore.Lease {
	l := &leasecore.Lease{
		Task: task, Owner: c.owner, Token: c.token, Note: c.note, RenewCount: c.renewCount,
		AcquiredAt: fromMS(c.acquiredAt), RenewedAt: fromMS(c.renewedAt), ExpiresAt: fromMS(c.expiresAt),
		TTL:          time.Duration(c.ttlMS) * time.Millisecond,
		TTLRemaining: time.Duration(c.expiresAt-c.now) * time.Millisecond,
	}
	if c.holdUntil != 0 {
		l.HoldUntil = fromMS(c.holdUntil)
	}
	return l
}

// readCurrent is the task's row as the batch knows it. The first lease
// operation of a run of them reads the rows of all their tasks at once
// (txStmts.upcoming).
func readCurrent(ctx context.Context, st *txStmts, task string) (current, error) {
	if c, ok := st.rows[task]; ok {
		return c, nil
	}
	if err := st.load(ctx, append(st.upcoming, task)); err != nil {
		return current{}, err
	}
	st.upcoming = nil
	return st.rows[task], nil
}

// load reads the store's now and the next event id, unless this run of lease
// operations has read them, and the rows of tasks into st.rows: a task
// without a row is there as one that does not exist.
func (st *txStmts) load(ctx context.Context, tasks []string) error {
	missing := make([]string, 0, len(tasks))
	for _, t := range tasks {
		if _, ok := st.rows[t]; !ok {
			missing = append(missing, t)
		}
	}
	tasks = missing
	rows, err := st.current.QueryContext(ctx, sql.Named("tasks", hexList(tasks)))
	if err != nil {
		return err
	}
	defer rows.Close()
	if st.rows == nil {
		st.rows = make(map[string]current, len(tasks))
	}
	var now, next int64
	for _, t := range tasks {
		st.rows[t] = current{}
	}
	for rows.Next() {
		var (
			c                                      current
			ms                                     int64
			task, owner, note                      sql.NullString
			token, acq, ren, exp, ttl, count, last sql.NullInt64
			release, ended, hold, lostToken        sql.NullInt64
		)
		if err := rows.Scan(&ms, &next, &task, &owner, &token, &acq, &ren, &exp, &ttl, &count, &note, &release, &ended, &last, &hold, &lostToken); err != nil {
			return err
		}
		now = ms
		if !task.Valid {
			continue
		}
		c.exists = true
		c.owner, c.token, c.acquiredAt, c.renewedAt, c.expiresAt = owner.String, token.Int64, acq.Int64, ren.Int64, exp.Int64
		c.ttlMS, c.renewCount, c.note = ttl.Int64, count.Int64, note.String
		c.released = release.Valid
		c.endRecorded = ended.Int64 != 0
		c.lastEvent = last.Int64
		c.holdUntil = hold.Int64
		c.lostToken = lostToken.Int64
		st.rows[task.String] = c
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if st.now == 0 {
		st.now = now
	}
	if st.nextEvent == 0 {
		st.nextEvent = next
	}
	for _, t := range tasks {
		c := st.rows[t]
		c.now = st.now
		st.rows[t] = c
	}
	return nil
}

// record appends an event to the task's history after prev, the task's
// newest event until now (0: none), in the transaction of the lease change
// it records, and returns its id. The caller makes it the task's newest in
// the lease row. The event is numbered at once and written with the batch's
// other events (txStmts.flush), before anything else reads the history
// and before the commit.
func record(ctx context.Context, st *txStmts, e leasecore.Event, atMS, prev int64) (int64, error) {
	if st.nextEvent == 0 {
		// Cannot happen: every operation reads its row, and the next id
		// with it, before it records anything.
		return 0, errors.New("a history event was recorded before the batch read the next event id")
	}
	id := st.nextEvent
	st.nextEvent++
	st.events = append(st.events, pendingEvent{id: id, event: e, at: atMS, prev: prev})
	return id, nil
}

// Claim acquires a free or expired lease with the next token, refreshes the
// owner's own live lease under its token, or returns *leasecore.HeldError.
// It runs in one of the writer's IMMEDIATE transactions, after the
// operations queued before it, so of concurrent claimants in any number of
// processes exactly one acquires; the answer comes after the commit.
func (s *Store) Claim(ctx context.Context, p leasecore.ClaimParams) (*leasecore.Lease, error) {
	res := s.submit(ctx, "claim", func(ctx context.Context, st *txStmts) (answer, error) {
		return claim(ctx, st, p)
	}, p.Task)
	return res.lease, res.err
}

// claim is Claim's read-decide-write inside a batch. A grant is recorded
// in the history (acquired), after the end of the lease it replaces when
// that ran out unrecorded (expired: at the lease's expiry, for nobody,
// whoever claims, as the expiry sweep would have recorded it; see
// recordExpiries); a refresh is not.
func claim(ctx context.Context, st *txStmts, p leasecore.ClaimParams) (answer, error) {
	cur, err := readCurrent(ctx, st, p.Task)
	if err != nil {
		return answer{}, err
	}
	ttl, minHold := p.TTL.Milliseconds(), p.MinHold.Milliseconds()
	switch {
	case cur.live() && cur.owner != p.Owner, cur.resting():
		return answer{err: &leasecore.HeldError{Task: p.Task, Holder: cur.holder()}}, nil
	case cur.live():
		hold := cur.holdUntil
		if minHold > 0 {
			hold = max(hold, cur.acquiredAt+minHold)
		}
		return extend(ctx, st, p.Task, p.Owner, cur, ttl, p.Note, hold)
	}
	var hold int64 // the grant's hold_until, 0 for none
	if minHold > 0 {
		hold = cur.now + minHold
	}
	newest := cur.lastEvent
	if cur.endUnrecorded() {
		if newest, err = record(ctx, st, expiredEvent(p.Task, cur), cur.expiresAt, newest); err != nil {
			return answer{}, err
		}
	}
	// The grant's token is known before it is written (the row was read in
	// this transaction), so its event goes first and the grant points at it.
	token := cur.token + 1 // 1 for a new row
	acquired := leasecore.Event{Task: p.Task, Kind: leasecore.EventAcquired, Owner: p.Owner, Token: token, Credential: p.Credential}
	if newest, err = record(ctx, st, acquired, cur.now, newest); err != nil {
		return answer{}, err
	}
	c := current{
		now: cur.now, exists: true, owner: p.Owner, token: token,
		acquiredAt: cur.now, renewedAt: cur.now, expiresAt: cur.now + ttl, ttlMS: ttl, note: p.Note,
		lastEvent: newest, holdUntil: hold,
	}
	if !cur.exists {
		// The task's first row goes in with the batch's other first rows
		// (txStmts.newRows).
		c.unwritten = true
		st.newRows = append(st.newRows, p.Task)
		st.rows[p.Task] = c
		return answer{lease: c.lease(p.Task)}, nil
	}
	if err := st.written(ctx, &cur); err != nil {
		return answer{}, err
	}
	res, err := st.grant.ExecContext(ctx,
		sql.Named("task", p.Task), sql.Named("owner", p.Owner), sql.Named("token", token),
		sql.Named("now", cur.now), sql.Named("ttl", ttl), sql.Named("note", p.Note), sql.Named("event", newest),
		sql.Named("hold", nullMS(hold)))
	if err != nil {
		return answer{}, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return answer{}, cmp.Or(err, fmt.Errorf("%w: the grant of token %d changed no row", errVanished, token))
	}
	st.rows[p.Task] = c
	return answer{lease: c.lease(p.Task)}, nil
}

// extend extends the owner's live lease cur by ttl (ms), with note and the
// minimum hold's end hold (ms, 0 for none), and answers it.
func extend(ctx context.Context, st *txStmts, task, owner string, cur current, ttl int64, note string, hold int64) (answer, error) {
	if err := st.written(ctx, &cur); err != nil {
		return answer{}, err
	}
	res, err := st.extend.ExecContext(ctx,
		sql.Named("task", task), sql.Named("owner", owner), sql.Named("token", cur.token),
		sql.Named("now", cur.now), sql.Named("ttl", ttl), sql.Named("note", note), sql.Named("hold", nullMS(hold)))
	if err != nil {
		return answer{}, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return answer{}, cmp.Or(err, errVanished)
	}
	cur.expiresAt, cur.renewedAt, cur.ttlMS, cur.renewCount, cur.note = cur.now+ttl, cur.now, ttl, cur.renewCount+1, note
	cur.holdUntil = hold
	st.rows[task] = cur
	return answer{lease: cur.lease(task)}, nil
}

// Renew extends the owner's live lease (a zero TTL keeps its TTL, a nil note
// its note), or returns *leasecore.LostError with the reason. It never revives an expired lease.
// Like Claim, it runs in one of the writer's batches.
func (s *Store) Renew(ctx context.Context, p leasecore.RenewParams) (*leasecore.Lease, error) {
	res := s.submit(ctx, "renew", func(ctx context.Context, st *txStmts) (answer, error) {
		return renew(ctx, st, p)
	}, p.Task)
	return res.lease, res.err
}

// maxRenewBatch bounds the renewals RenewBatch puts in one operation of the
// writer's batches (leasecore.MaxRenewBatch); a larger RenewBatch is split
// into several.
const maxRenewBatch = leasecore.MaxRenewBatch

// RenewBatch renews many leases in the writer's transactions: up to
// maxRenewBatch renewals as one operation of a batch, in order, each judged
// as by Renew (a task named twice is renewed twice, the second seeing the
// first). It is leasecore.BatchRenewer.
func (s *Store) RenewBatch(ctx context.Context, ps []leasecore.RenewParams) ([]leasecore.RenewResult, error) {
	results := make([]leasecore.RenewResult, 0, len(ps))
	for len(ps) > 0 {
		chunk := ps[:min(len(ps), maxRenewBatch)]
		ps = ps[len(chunk):]
		tasks := make([]string, len(chunk))
		for i, p := range chunk {
			tasks[i] = p.Task
		}
		res := s.submit(ctx, "renew", func(ctx context.Context, st *txStmts) (answer, error) {
			batch := make([]leasecore.RenewResult, len(chunk))
			for i, p := range chunk {
				a, err := renew(ctx, st, p)
				if err != nil {
					return answer{}, err
				}
				batch[i] = leasecore.RenewResult{Lease: a.lease, Err: a.err}
			}
			return answer{batch: batch}, nil
		}, tasks...)
		if res.err != nil {
			return nil, res.err
		}
		results = append(results, res.batch...)
	}
	return results, nil
}

// expiredEvent is the end of cur's lease, which ran out unreleased: an
// expired event with the lease's owner and token, at its expiry (the
// caller passes cur.expiresAt), for nobody. Whoever notices the end first
// records it, and the same way, so that the history does not depend on who
// that was (docs/design.md, "History").
func expiredEvent(task string, cur current) leasecore.Event {
	return leasecore.Event{Task: task, Kind: leasecore.EventExpired, Owner: cur.owner, Token: cur.token}
}

// renew is Renew's read-decide-write inside a batch. The first renewal an
// owner tries after its lease ran out records the lease's loss (lost, for
// the renewal's credential), after its end (expired) unless that is
// recorded already.
func renew(ctx context.Context, st *txStmts, p leasecore.RenewParams) (answer, error) {
	cur, err := readCurrent(ctx, st, p.Task)
	if err != nil {
		return answer{}, err
	}
	state := leasecore.LeaseState{Exists: cur.exists, Owner: cur.owner, Token: cur.token, Released: cur.released, Live: cur.live()}
	if lost := leasecore.RenewRefusal(p, state); lost != nil {
		if lost.Reason == leasecore.LostExpired && cur.lossUnrecorded() {
			newest, ended := cur.lastEvent, cur.endUnrecorded()
			if ended {
				if newest, err = record(ctx, st, expiredEvent(p.Task, cur), cur.expiresAt, newest); err != nil {
					return answer{}, err
				}
			}
			loss := leasecore.Event{Task: p.Task, Kind: leasecore.EventLost, Owner: cur.owner, Token: cur.token, Credential: p.Credential}
			if newest, err = record(ctx, st, loss, cur.now, newest); err != nil {
				return answer{}, err
			}
			if err := setNewest(ctx, st, p.Task, newest, ended, true); err != nil {
				return answer{}, err
			}
		}
		return answer{err: lost}, nil
	}
	ttl := p.TTL.Milliseconds()
	if ttl == 0 {
		ttl = cur.ttlMS
	}
	note := cur.note
	if p.Note != nil {
		note = *p.Note
	}
	return extend(ctx, st, p.Task, p.Owner, cur, ttl, note, cur.holdUntil)
}

// Release ends the owner's live lease (checking the token when given) and
// reports whether it did. What is not held is left alone: (false, nil).
// Like Claim, it runs in one of the writer's batches.
func (s *Store) Release(ctx context.Context, p leasecore.ReleaseParams) (bool, error) {
	res, err := s.ReleaseHold(ctx, p)
	return res.Released, err
}

// ReleaseHold is Release, answering also the end of the released lease's
// minimum hold when it has not passed. It is leasecore.HoldReleaser.
func (s *Store) ReleaseHold(ctx context.Context, p leasecore.ReleaseParams) (leasecore.ReleaseResult, error) {
	res := s.submit(ctx, "release", func(ctx context.Context, st *txStmts) (answer, error) {
		return release(ctx, st, p)
	}, p.Task)
	return res.released, res.err
}

// release is Release's read-decide-write inside a batch: the released
// event, recorded only when the owner holds the lease live (under the token,
// when one is given), then the lease ended.
func release(ctx context.Context, st *txStmts, p leasecore.ReleaseParams) (answer, error) {
	cur, err := readCurrent(ctx, st, p.Task)
	if err != nil {
		return answer{}, err
	}
	if !cur.live() || cur.owner != p.Owner || (p.Token != 0 && p.Token != cur.token) {
		return answer{}, nil
	}
	end := leasecore.Event{Task: p.Task, Kind: leasecore.EventReleased, Owner: cur.owner, Token: cur.token, Credential: p.Credential, Detail: p.Detail, Run: p.Run}
	if cur.holdUntil > cur.now {
		end.HoldUntil = fromMS(cur.holdUntil)
	}
	event, err := record(ctx, st, end, cur.now, cur.lastEvent)
	if err != nil {
		return answer{}, err
	}
	if err := st.written(ctx, &cur); err != nil {
		return answer{}, err
	}
	res, err := st.release.ExecContext(ctx, sql.Named("task", p.Task), sql.Named("at", cur.now), sql.Named("event", event))
	if err != nil {
		return answer{}, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return answer{}, cmp.Or(err, errVanished)
	}
	cur.released, cur.expiresAt, cur.lastEvent = true, min(cur.expiresAt, cur.now), event
	st.rows[p.Task] = cur
	a := answer{released: leasecore.ReleaseResult{Released: true}}
	if cur.resting() {
		a.released.HoldUntil = fromMS(cur.holdUntil)
	}
	return a, nil
}

// setNewest makes event the task's newest; ended notes that the end of its
// lease, which ran out unreleased, is recorded, and lost that its loss is.
func setNewest(ctx context.Context, st *txStmts, task string, event int64, ended, lost bool) error {
	cur := st.rows[task]
	if err := st.written(ctx, &cur); err != nil {
		return err
	}
	res, err := st.newest.ExecContext(ctx, sql.Named("task", task), sql.Named("event", event), sql.Named("ended", ended), sql.Named("lost", lost))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return cmp.Or(err, errVanished)
	}
	cur.lastEvent, cur.endRecorded = event, cur.endRecorded || ended
	if lost {
		cur.lostToken = cur.token
	}
	st.rows[task] = cur
	return nil
}

// Get returns the task's live lease, or nil when there is none.
func (s *Store) Get(ctx context.Context, task string) (*leasecore.Lease, error) {
	leases, err := s.live(ctx, "get", liveSQL+` AND task = :task`, sql.Named("task", task))
	if err != nil || len(leases) == 0 {
		return nil, err
	}
	return &leases[0], nil
}

// List returns a page of the live leases, ordered by task (bytewise: the
// column's BINARY collation), by the primary key's range (task > after).
func (s *Store) List(ctx context.Context, p leasecore.ListParams) ([]leasecore.Lease, error) {
	return s.live(ctx, "list", liveSQL+` AND task > :after`+inPrefix("task")+` ORDER BY task LIMIT :limit`,
		sql.Named("after", p.After), sql.Named("limit", sqlLimit(p.Limit)), sql.Named("from", p.Prefix), sql.Named("below", leasecore.PrefixEnd(p.Prefix)))
}

// inPrefix keeps a list to the range of ListParams.Prefix (:from, and
// :below, empty when there is no end): a range of the key's index.
func inPrefix(col string) string {
	return ` AND ` + col + ` >= :from AND (:below = '' OR ` + col + ` < :below)`
}

// sqlLimit is a ListParams limit for SQLite's LIMIT: -1, no limit, for 0.
func sqlLimit(limit int) int {
	if limit <= 0 {
		return -1
	}
	return limit
}

func (s *Store) live(ctx context.Context, op, query string, args ...any) ([]leasecore.Lease, error) {
	if err := s.usable(op); err != nil {
		return nil, err
	}
	rows, err := s.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError(op, err)
	}
	defer rows.Close()
	leases := []leasecore.Lease{}
	for rows.Next() {
		var (
			l   leasecore.Lease
			raw rawLease
			now int64
		)
		if err := rows.Scan(append(raw.dest(&l), &now)...); err != nil {
			return nil, interpretError(op, err)
		}
		leases = append(leases, raw.lease(l, now))
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(op, err)
	}
	return leases, nil
}

// Ping checks that the Store can grant leases: the path still names the
// file it opened, this process may write the file and its directory, the
// file opens, the schema exists, and it is at least at the version this
// build needs.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.usable("ping"); err != nil {
		return err
	}
	if err := s.file.check(true); err != nil {
		return interpretError("ping", err)
	}
	// Naming both tables makes a missing one fail the statement.
	var version, none int
	err := s.reader.QueryRowContext(ctx, `
SELECT (SELECT coalesce(max(version), 0) FROM leasehold_schema_migrations),
       (SELECT count(*) FROM (SELECT 1 FROM leasehold_leases LIMIT 0))`).Scan(&version, &none)
	if err != nil {
		return interpretError("ping", err)
	}
	if want := len(s.migrations); version < want {
		return interpretError("ping", fmt.Errorf("%w (version %d, needs %d)", leasecore.ErrSchemaBehind, version, want))
	}
	return nil
}

// rawLease holds the integer columns of leaseColumns while they are scanned.
type rawLease struct {
	acquiredAt, renewedAt, expiresAt, ttlMS int64
	holdUntil                               sql.NullInt64
}

// dest returns scan destinations for leaseColumns, in order.
func (r *rawLease) dest(l *leasecore.Lease) []any {
	return []any{&l.Task, &l.Owner, &l.Token, &r.acquiredAt, &r.renewedAt, &r.expiresAt, &r.ttlMS, &l.RenewCount, &l.Note, &r.holdUntil}
}

// lease completes l with the times, measured against the store's now.
func (r *rawLease) lease(l leasecore.Lease, now int64) leasecore.Lease {
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt = fromMS(r.acquiredAt), fromMS(r.renewedAt), fromMS(r.expiresAt)
	l.TTL = time.Duration(r.ttlMS) * time.Millisecond
	l.TTLRemaining = time.Duration(r.expiresAt-now) * time.Millisecond
	if r.holdUntil.Valid {
		l.HoldUntil = fromMS(r.holdUntil.Int64)
	}
	return l
}

func fromMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
