package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/internal/runjson"
)

// maxBatch caps the operations one write transaction carries: the model's
// bound (see leasecore.MaxBatch); it keeps one transaction's share of the
// file lock, and the delay it adds for other processes, short.
const maxBatch = leasecore.MaxBatch

// batchTimeout bounds one batch, from preparing its statements to the
// commit: the wait for another process's write lock (BusyTimeout), plus time
// for the statements and the commit's fsync on a slow disk. It belongs to no
// caller: a caller that stops waiting does not end the batch for the others.
const batchTimeout = BusyTimeout + 5*time.Second

// request is one write (Claim, Renew, Release, or a catalog write) waiting
// for, or running in, a batch.
type request struct {
	// ctx is the caller's context. The writer reads it only to skip the
	// operation when the caller has already stopped waiting.
	ctx context.Context
	// op names the operation in an *UnavailableError: claim, renew,
	// release, create_task, prune, ….
	op string
	// tasks are the tasks a lease operation decides on, read together with
	// those of the lease operations around it in the batch (txStmts.rows);
	// none for a catalog operation.
	tasks []string
	// apply does the operation's read-decide-write inside the batch's
	// transaction. Its error is an SQL failure, which fails the batch; a
	// lease outcome (held, lost) is in the answer.
	apply func(ctx context.Context, st *txStmts) (answer, error)
	// done receives the caller's answer exactly once, after the commit
	// (or the failure) of its batch; buffered, so the writer never waits
	// for a caller who has left.
	done chan answer
}

// answer is what a caller is told.
type answer struct {
	lease    *leasecore.Lease        // Claim and Renew, when err is nil
	released leasecore.ReleaseResult // Release
	batch    []leasecore.RenewResult // RenewBatch: one result per renewal

	task    *leasecore.TaskDecl        // CreateTask, UpdateTask
	policy  *leasecore.RetentionPolicy // CreatePolicy, UpdatePolicy
	deleted bool                       // DeleteTask, DeletePolicy
	pruned  int64                      // a round of PruneHistory: events deleted
	// recorded is how many "expired" events RecordExpiries recorded.
	recorded int
	// next is where the next round of PruneHistory starts: the last task
	// this round visited, "" when no task was left; unfinished when that
	// task has events left to delete.
	next       string
	unfinished bool

	// err is an outcome (*leasecore.HeldError, *leasecore.LostError, or a
	// catalog outcome such as *leasecore.ExistsError) or, when the batch
	// failed, unavailable.
	err error
}

// submit queues an operation for the writer and waits for its answer, or
// for ctx to end, whichever comes first. A caller who stops waiting is told
// unavailable; its operation may still run and commit with its batch, as a
// statement cut off by a timeout may have committed before.
//
// A lease operation names the tasks it decides on.
func (s *Store) submit(ctx context.Context, op string, apply func(context.Context, *txStmts) (answer, error), tasks ...string) answer {
	if err := ctx.Err(); err != nil {
		return answer{err: interpretError(op, err)}
	}
	r := &request{ctx: ctx, op: op, tasks: tasks, apply: apply, done: make(chan answer, 1)}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return answer{err: interpretError(op, errClosed)}
	}
	s.pending = append(s.pending, r)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // the writer has a wake-up waiting already
	}

	select {
	case res := <-r.done:
		return res
	case <-ctx.Done():
		select {
		case res := <-r.done: // the answer came at the same moment: it is true
			return res
		default:
			return answer{err: interpretError(op, ctx.Err())}
		}
	}
}

// write is the Store's one writer goroutine. It sleeps until a request is
// queued, then commits batches of whatever is pending until nothing is, and
// returns when Close cancels s.ctx. It never waits on a timer: a lone request
// goes out at once, and under load the requests that arrive while one batch
// commits make up the next.
func (s *Store) write() {
	defer close(s.writerDone)
	defer func() {
		if s.stmts != nil {
			s.stmts.close()
		}
	}()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		}
		for s.ctx.Err() == nil {
			batch, ok := s.take()
			if !ok {
				break
			}
			s.commit(batch)
		}
	}
}

// take removes up to maxBatch pending requests, oldest first, and returns
// those whose callers still wait (possibly none); ok is false when nothing
// was pending.
func (s *Store) take() (batch []*request, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(len(s.pending), maxBatch)
	if n == 0 {
		return nil, false
	}
	batch = make([]*request, 0, n)
	for _, r := range s.pending[:n] {
		if r.ctx.Err() == nil {
			batch = append(batch, r)
		}
	}
	// The rest move to a new array, so that the old one, and the requests
	// it points to, can be freed.
	s.pending = append([]*request(nil), s.pending[n:]...)
	s.batches.Add(1)
	s.taken.Add(int64(len(batch)))
	return batch, true
}

// commit runs batch in one transaction and then answers every caller in it:
// each its own outcome once the commit succeeded, or all of them
// unavailable when the batch failed.
func (s *Store) commit(batch []*request) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.batchTimeout)
	defer cancel()
	answers, err := s.execute(ctx, batch)
	if err != nil && s.ctx.Err() != nil {
		err = fmt.Errorf("%w (the batch was cut off: %w)", errClosed, err)
	}
	for i, r := range batch {
		switch {
		case err != nil:
			r.done <- answer{err: interpretError(r.op, err)}
		case answers[i] == nil: // skipped: its caller had left
			r.done <- answer{err: interpretError(r.op, r.ctx.Err())}
		default:
			r.done <- *answers[i]
		}
	}
}

// execute runs the operations of batch, in order, in one IMMEDIATE
// transaction and commits it. Each operation sees the effects of those
// before it, exactly as if they had run one after another. An operation
// whose caller has left by its turn is skipped (its answer is nil). Any SQL
// error rolls the whole transaction back and is returned: no outcome of a
// write that was rolled back is ever reported.
func (s *Store) execute(ctx context.Context, batch []*request) ([]*answer, error) {
	// The file is checked before the batch, so that nothing is written to
	// a file that was deleted or replaced (or may not be written), and
	// again after the commit, so that no outcome committed to a file that
	// was deleted meanwhile is reported: its callers are told unavailable,
	// as for any write whose fate they cannot know.
	if err := s.file.check(true); err != nil {
		return nil, err
	}
	ws, err := s.statements(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }() // a no-op once committed
	st := ws.in(ctx, tx)
	answers := make([]*answer, len(batch))
	ran := 0
	for i, r := range batch {
		if r.ctx.Err() != nil {
			continue // the caller was told unavailable; write nothing for it
		}
		switch {
		case !leaseOp(r.op):
			// A catalog operation may read the history (prune) or write it,
			// or read or change lease rows: it sees the rows and events
			// written before it, and the operations after it read the
			// rows, the clock and the next event id again.
			if err := st.flush(ctx); err != nil {
				return nil, fmt.Errorf("writing the new lease rows and history of the batch's operations before operation %d (%s) failed, so none was committed: %w", i+1, r.op, err)
			}
			st.rows, st.now, st.nextEvent = nil, 0, 0
		case st.rows == nil && st.upcoming == nil:
			st.upcoming = runTasks(batch[i:])
		}
		res, err := r.apply(ctx, st)
		if err != nil {
			return nil, fmt.Errorf("operation %d of the batch's %d (%s) failed, so none was committed: %w", i+1, len(batch), r.op, err)
		}
		answers[i] = &res
		ran++
	}
	if ran == 0 {
		return answers, nil
	}
	if err := st.flush(ctx); err != nil {
		return nil, fmt.Errorf("writing the new lease rows and history of the batch's operations failed, so none was committed: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	if err := s.file.check(false); err != nil {
		return nil, err
	}
	if st.recorded > 0 {
		s.committed.Notify()
	}
	s.countWrites(batch, answers)
	return answers, nil
}

// writeOps are the operations WriteCounts reports, in its order.
var writeOps = [...]string{"claim", "renew", "release"}

// runTasks lists the tasks of the lease operations at the head of batch, up
// to the first catalog operation, whose callers still wait.
func runTasks(batch []*request) []string {
	var tasks []string
	for _, r := range batch {
		if !leaseOp(r.op) {
			break
		}
		if r.ctx.Err() == nil {
			tasks = append(tasks, r.tasks...)
		}
	}
	return tasks
}

// leaseOp reports whether op is one of Claim, Renew and Release (RenewBatch
// included) or RecordExpiries, which decide on the batch's copy of their
// rows (txStmts.rows) and record their history events through
// txStmts.events.
func leaseOp(op string) bool {
	return op == "claim" || op == "renew" || op == "release" || op == leasecore.OpRecordExpiries
}

// writeCount is one operation's counters: committed transactions that
// carried it, and how many of it they carried.
type writeCount struct{ statements, operations atomic.Uint64 }

// countWrites records a committed batch in s.writes.
func (s *Store) countWrites(batch []*request, answers []*answer) {
	var ops [len(writeOps)]uint64
	for i, r := range batch {
		if answers[i] == nil {
			continue
		}
		n := uint64(1)
		if b := answers[i].batch; b != nil {
			n = uint64(len(b))
		}
		for k, op := range writeOps {
			if r.op == op {
				ops[k] += n
			}
		}
	}
	for k, n := range ops {
		if n > 0 {
			s.writes[k].statements.Add(1)
			s.writes[k].operations.Add(n)
		}
	}
}

// WriteCounts reports, per operation, the committed transactions that
// carried it and how many of it they carried: a transaction of claims and
// renewals counts once for each. It is leasecore.WriteCounter.
func (s *Store) WriteCounts() []leasecore.WriteCount {
	counts := make([]leasecore.WriteCount, len(writeOps))
	for k, op := range writeOps {
		counts[k] = leasecore.WriteCount{Op: op, Statements: s.writes[k].statements.Load(), Operations: s.writes[k].operations.Load()}
	}
	return counts
}

// writeStmts are the statements of Claim, Renew and Release, prepared once on
// the writer: parsing them is a sizeable share of an operation's CPU
// (docs/design.md, "Measurements behind the constants"), and with a single
// writer connection each is prepared only once.
type writeStmts struct {
	current, grant, extend, release, newest *sql.Stmt
	// insertEvents[k] appends 1<<k events in one statement, and
	// insertLeases[k] writes the first rows of 1<<k tasks.
	insertEvents, insertLeases [insertChunks]*sql.Stmt
}

// insertChunks is how many sizes of the multi-row inserts (insertEventsSQL,
// insertLeasesSQL) are prepared: 1, 2, 4, … 1<<(insertChunks-1) rows per
// statement.
const insertChunks = 7

// txStmts are the write statements bound to one batch's transaction, and
// the transaction itself, for the catalog's rarer writes.
type txStmts struct {
	tx                                      *sql.Tx
	current, grant, extend, release, newest *sql.Stmt
	// insertEvents and insertLeases are writeStmts' multi-row inserts,
	// bound to tx when first used (execChunks): a batch uses few of them.
	insertEvents, insertLeases chunkStmts

	// newRows are the tasks whose first row a grant of the batch made and
	// flush has not written yet: one multi-row insert for a batch's new
	// tasks rather than a statement each. A write to such a row writes the
	// pending rows first (written).
	newRows []string
	// events are the history events the batch's lease operations recorded
	// and flush has not written yet. Writing them together, a few
	// statements per batch rather than one per event, is what makes the
	// history cheap; nothing reads the history between two lease
	// operations, and execute writes them before any other operation and
	// before the commit.
	events []pendingEvent
	// recorded counts the events flush wrote: after the commit, the
	// Store's HistoryChanges are told when there were any.
	recorded int
	// rows are the lease rows the batch's lease operations decide on, as
	// they stand after the operations so far, and now is the batch's
	// instant: the store's clock, read with the rows by the first lease
	// operation (see rowsSQL). Reading the rows of a run of lease operations
	// in one statement, deciding each operation on them in order, and
	// writing its changes both to the table and here, spares a statement
	// per operation; every operation still sees the effects of those
	// before it. nil, and 0, until read; upcoming are the tasks to read
	// then (runTasks).
	rows     map[string]current
	now      int64
	upcoming []string
	// nextEvent is the id the next recorded event gets (0: not read yet
	// in this run of lease operations; see nextEventExpr). The batch's
	// transaction holds the write lock, so no other connection takes an
	// id meanwhile.
	nextEvent int64
}

// pendingEvent is an event numbered but not yet written.
type pendingEvent struct {
	id       int64
	event    leasecore.Event
	at, prev int64
}

// flush writes the batch's pending first rows of tasks and history events.
func (st *txStmts) flush(ctx context.Context) error {
	if err := st.flushRows(ctx); err != nil {
		return err
	}
	err := st.insertEvents.exec(ctx, st.tx, len(st.events), func(args []any, i int) []any {
		e := st.events[i]
		var prev any // NULL for a task's first event
		if e.prev != 0 {
			prev = e.prev
		}
		var hold any // NULL for none
		if !e.event.HoldUntil.IsZero() {
			hold = e.event.HoldUntil.UnixMilli()
		}
		return append(args, e.id, e.event.Task, string(e.event.Kind), e.event.Owner, e.event.Token, e.at, e.event.Detail, prev, e.event.Credential,
			hold, runjson.Encode(e.event.Run))
	})
	st.recorded += len(st.events)
	st.events = st.events[:0]
	return err
}

// flushRows writes the pending first rows of tasks.
func (st *txStmts) flushRows(ctx context.Context) error {
	err := st.insertLeases.exec(ctx, st.tx, len(st.newRows), func(args []any, i int) []any {
		task := st.newRows[i]
		c := st.rows[task]
		c.unwritten = false
		st.rows[task] = c
		return append(args, task, c.owner, c.acquiredAt, c.renewedAt, c.expiresAt, c.ttlMS, c.note, c.lastEvent, nullMS(c.holdUntil))
	})
	st.newRows = st.newRows[:0]
	return err
}

// written makes sure the row cur, which the caller is about to change in
// the table, is in it: a pending first row is written first, with the
// others pending.
func (st *txStmts) written(ctx context.Context, cur *current) error {
	if !cur.unwritten {
		return nil
	}
	cur.unwritten = false
	return st.flushRows(ctx)
}

// chunkStmts are the sizes of one multi-row insert for one batch:
// prepared[k] writes 1<<k rows, and bound[k] is it bound to the batch's
// transaction, once used.
type chunkStmts struct {
	prepared *[insertChunks]*sql.Stmt
	bound    [insertChunks]*sql.Stmt
}

// exec writes n rows in order, in as few statements as there are bits set
// in n (more beyond the largest size); add appends row i's parameters.
func (c *chunkStmts) exec(ctx context.Context, tx *sql.Tx, n int, add func(args []any, i int) []any) error {
	var args []any
	for done := 0; done < n; {
		k := min(bits.Len(uint(n-done))-1, insertChunks-1)
		args = args[:0]
		for i := done; i < done+1<<k; i++ {
			args = add(args, i)
		}
		if c.bound[k] == nil {
			c.bound[k] = tx.StmtContext(ctx, c.prepared[k])
		}
		if _, err := c.bound[k].ExecContext(ctx, args...); err != nil {
			return err
		}
		done += 1 << k
	}
	return nil
}

// statements returns the prepared write statements, preparing them on first
// use. Preparing fails while the schema is missing, and is tried again by
// the next batch. Only the writer goroutine calls it, outside a transaction
// (which would hold the writer's one connection).
func (s *Store) statements(ctx context.Context) (*writeStmts, error) {
	if s.stmts != nil {
		return s.stmts, nil
	}
	ws := &writeStmts{}
	type prep struct {
		dst   **sql.Stmt
		query string
	}
	preps := []prep{
		// grantSQL first: on a file with no schema, its error names the
		// missing leasehold_leases (rowsSQL would name sqlite_sequence).
		{&ws.grant, grantSQL},
		{&ws.current, rowsSQL},
		{&ws.extend, extendSQL},
		{&ws.release, releaseSQL},
		{&ws.newest, newestSQL},
	}
	for k := range insertChunks {
		preps = append(preps, prep{&ws.insertEvents[k], insertEventsSQL(1 << k)}, prep{&ws.insertLeases[k], insertLeasesSQL(1 << k)})
	}
	for _, p := range preps {
		st, err := s.writer.PrepareContext(ctx, p.query)
		if err != nil {
			ws.close()
			return nil, err
		}
		*p.dst = st
	}
	s.stmts = ws
	return ws, nil
}

// in binds the statements to tx, once per batch rather than once per
// operation (the multi-row inserts when first used). They are closed with
// the transaction.
func (ws *writeStmts) in(ctx context.Context, tx *sql.Tx) *txStmts {
	st := &txStmts{
		tx:      tx,
		current: tx.StmtContext(ctx, ws.current),
		grant:   tx.StmtContext(ctx, ws.grant),
		extend:  tx.StmtContext(ctx, ws.extend),
		release: tx.StmtContext(ctx, ws.release),
		newest:  tx.StmtContext(ctx, ws.newest),
	}
	st.insertEvents.prepared, st.insertLeases.prepared = &ws.insertEvents, &ws.insertLeases
	return st
}

func (ws *writeStmts) close() {
	for _, st := range append([]*sql.Stmt{ws.current, ws.grant, ws.extend, ws.release, ws.newest}, append(ws.insertEvents[:], ws.insertLeases[:]...)...) {
		if st != nil {
			_ = st.Close()
		}
	}
}
