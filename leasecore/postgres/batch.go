package postgres

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/leasecore"
)

// Batching. Concurrent claims (and renewals, and releases) of one Store are
// queued and sent together: a flusher takes what is pending, up to maxBatch
// calls with distinct tasks, and sends them as one statement, which is one
// transaction and one commit. At most batchFlushers statements of a kind are
// in flight at once. There is no timer. A call that finds nothing queued and
// fewer than batchFlushers statements in flight is sent at once, alone, by
// its caller's own goroutine (a batch of one, with no hand-over to a flusher
// and back, which would cost every call two goroutine switches), so a quiet
// store answers as fast as with one statement per call. Calls that arrive while every slot
// has a statement in flight queue up, and the flushers send them together as
// slots come free: a busy store sends fewer, larger statements, up to the
// point where the flushers keep the server busy.

// batchFlushers is how many statements of one kind (claims, renewals,
// releases) may be in flight at once, each on its own connection, and how
// many flusher goroutines send the queued calls.
//
// Why 2: more flushers split the same queue into smaller batches, more
// statements and commits for the same calls, which is the cost batching is
// there to save (BenchmarkClaim and BenchmarkRenew at 32 clients fall with
// each flusher added; docs/design.md, "Measurements behind the constants",
// has the figures). One flusher would batch best, but a call arriving
// while its batch is in flight would always wait for it, and one batch
// waiting on a row lock (another sidecar's batch holding one of its tasks)
// would hold up every claim of the store; with two, a lone call goes out at
// once and one stalled batch leaves the other slot working.
const batchFlushers = 2

// maxBatch bounds the calls in one statement: the model's bound (see
// leasecore.MaxBatch for why there is one).
const maxBatch = leasecore.MaxBatch

// batchTimeout bounds one batch statement. A batch of many calls runs under
// this timeout alone, not under any caller's context: one caller giving up
// must not cancel the others' operations. (A call sent alone by its own
// caller runs under the caller's context, bounded by this too.) It matches
// leasecore's default operation timeout, so a batch that cannot reach the
// server fails no later than a lone statement would have.
const batchTimeout = 5 * time.Second

// A batcher queues the calls of one operation and sends them in batches
// through send. Q is one call's request, R its answer; send answers a batch's
// requests in order, or fails them all.
type batcher[Q, R any] struct {
	op   string                                           // the operation, for errors
	task func(Q) string                                   // a request's task: one per batch
	send func(ctx context.Context, reqs []Q) ([]R, error) // runs one batch statement

	mu       sync.Mutex
	wake     sync.Cond // signalled when a flusher may have work: calls queued and a slot free, or closing
	queue    []*call[Q, R]
	inFlight int // statements being sent, at most batchFlushers
	closed   bool

	flushers sync.WaitGroup

	// statements and operations count the statements sent and the calls
	// they carried, for Store.WriteCounts.
	statements, operations atomic.Uint64
	// sent, when set (by tests, before the first call), sees each batch's
	// tasks as the batch is taken from the queue, in that order; calls sent
	// alone by their callers are not batches and are not reported.
	sent func(tasks []string)

	// refused and admit (readmitWith) handle a batch that the database
	// refused as a whole for one call's sake: refused says whether a
	// batch's error is such a refusal, admit judges one call again (nil:
	// send it). See run.
	refused func(err error) bool
	admit   func(ctx context.Context, req Q) error
}

// A call is one caller's request, waiting for its batch.
type call[Q, R any] struct {
	ctx   context.Context
	req   Q
	state atomic.Uint32 // queued, then taken by a batch or given up by its caller
	done  chan answer[R]
}

// States of a call. Exactly one of the flusher (queued → taken) and the
// caller (queued → dropped) wins, so a call given up before its batch was
// built is never sent.
const (
	queued uint32 = iota
	taken
	dropped
)

// answer is a call's outcome: its value, or the error of its batch.
type answer[R any] struct {
	val R
	err error
}

// newBatcher starts a batcher's flushers. stop ends them.
func newBatcher[Q, R any](op string, task func(Q) string, send func(context.Context, []Q) ([]R, error)) *batcher[Q, R] {
	b := &batcher[Q, R]{op: op, task: task, send: send}
	b.wake.L = &b.mu
	for range batchFlushers {
		b.flushers.Go(b.flush)
	}
	return b
}

// do sends req alone when nothing is queued and a slot is free, and
// otherwise queues it and waits for its batch's answer. When ctx ends first,
// do returns unavailable at once: a call still queued is dropped and never
// sent; a call already sent may still take effect, exactly as a lone
// statement cancelled after it was sent may commit.
func (b *batcher[Q, R]) do(ctx context.Context, req Q) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, interpretError(b.op, err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return zero, interpretError(b.op, errClosed)
	}
	if len(b.queue) == 0 && b.inFlight < batchFlushers {
		b.inFlight++
		b.mu.Unlock()
		return b.alone(ctx, req)
	}
	c := &call[Q, R]{ctx: ctx, req: req, done: make(chan answer[R], 1)}
	b.queue = append(b.queue, c)
	// With every slot taken no flusher can send this call yet: the slot's
	// free wakes one when it comes free. Waking one now would only make it
	// find every slot still taken and wait again, a goroutine switch (and,
	// with an idle processor, a thread wake-up) for each call queued while
	// lone calls hold the slots.
	slotFree := b.inFlight < batchFlushers
	b.mu.Unlock()
	if slotFree {
		b.wake.Signal()
	}

	select {
	case a := <-c.done:
		return a.val, a.err
	case <-ctx.Done():
		if !c.state.CompareAndSwap(queued, dropped) {
			// Already in a batch. Its answer may have arrived meanwhile:
			// a definite answer beats "unavailable".
			select {
			case a := <-c.done:
				return a.val, a.err
			default:
			}
		}
		return zero, interpretError(b.op, ctx.Err())
	}
}

// alone sends req as a batch of one from the caller's goroutine, in a slot
// do has taken, under the caller's context bounded by batchTimeout: nobody
// else's call is in it.
func (b *batcher[Q, R]) alone(ctx context.Context, req Q) (R, error) {
	defer b.free()
	// A deadline already as near as batchTimeout (leasecore.Service's
	// operation timeout, by default) bounds the statement: a second timer
	// would cost every lone call without changing when it ends.
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > batchTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, batchTimeout)
		defer cancel()
	}
	vals, err := b.send(ctx, []Q{req})
	b.count(1)
	if err != nil {
		var zero R
		return zero, interpretError(b.op, err)
	}
	return vals[0], nil
}

// free gives back the slot of a call sent alone, and wakes a flusher if
// calls are waiting for one.
func (b *batcher[Q, R]) free() {
	b.mu.Lock()
	b.inFlight--
	waiting := len(b.queue) > 0
	b.mu.Unlock()
	if waiting {
		b.wake.Signal()
	}
}

// flush is one flusher: it sends batches until the batcher stops. A
// flusher whose batch is answered gives back its slot and takes the next
// batch in one step, under the lock, rather than through free: what is
// queued is its to send, and waking the other flusher for it (free's
// signal) would only have that one find the queue taken and wait again.
// next still wakes the other flusher when calls are left behind and a slot
// is free.
func (b *batcher[Q, R]) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		batch := b.next()
		if batch == nil {
			return
		}
		b.mu.Unlock()
		b.run(batch)
		b.mu.Lock()
		b.inFlight--
	}
}

// next waits until calls are queued and a slot is free, takes the slot and
// a batch of calls; nil once the batcher is stopped. b.mu is held.
func (b *batcher[Q, R]) next() []*call[Q, R] {
	for {
		for !b.closed && (len(b.queue) == 0 || b.inFlight == batchFlushers) {
			b.wake.Wait()
		}
		if b.closed {
			return nil
		}
		batch := b.take()
		if len(batch) == 0 {
			continue // every queued call was given up
		}
		b.inFlight++
		if b.sent != nil {
			tasks := make([]string, len(batch))
			for i, c := range batch {
				tasks[i] = b.task(c.req)
			}
			b.sent(tasks)
		}
		if len(b.queue) > 0 && b.inFlight < batchFlushers {
			// Calls left behind (beyond maxBatch, or a second call of a
			// task in this batch) and a slot free: another flusher may
			// send them now.
			b.wake.Signal()
		}
		return batch
	}
}

// take removes from the queue, oldest first, up to maxBatch calls with
// distinct tasks, and drops the calls whose callers gave up. A later call of
// a task already in the batch stays queued, in its place, for a later batch:
// one statement cannot change a row twice, and each call is a decision of its
// own. b.mu is held.
func (b *batcher[Q, R]) take() []*call[Q, R] {
	var (
		batch []*call[Q, R]
		tasks = make(map[string]struct{}, min(len(b.queue), maxBatch))
		kept  = b.queue[:0] // the queue is compacted in place
	)
	for i, c := range b.queue {
		if len(batch) == maxBatch {
			kept = append(kept, b.queue[i:]...)
			break
		}
		if c.ctx.Err() != nil {
			c.state.CompareAndSwap(queued, dropped) // its caller returns on its own
			continue
		}
		t := b.task(c.req)
		if _, dup := tasks[t]; dup {
			kept = append(kept, c)
			continue
		}
		if !c.state.CompareAndSwap(queued, taken) {
			continue // given up
		}
		tasks[t] = struct{}{}
		batch = append(batch, c)
	}
	clear(b.queue[len(kept):])
	b.queue = kept
	return batch
}

// readmitWith makes b judge again, by s's scope for right, the calls of a
// batch that row-level security refused (refusedByPolicy): a claim of a
// task that left the role's scope after it was admitted fails its whole
// statement, and must not fail the calls batched with it.
func (b *batcher[Q, R]) readmitWith(s *Store, right string) {
	b.refused = func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "42501"
	}
	b.admit = func(ctx context.Context, req Q) error { return s.checkScope(ctx, b.op, right, b.task(req)) }
}

// run sends one batch and answers its callers. The statement runs under its
// own timeout, not under any caller's context.
//
// When the database refuses the batch for one call's sake (refused: a task
// that left the role's scope after its call was admitted), the calls are
// judged again (admit, by a copy of the scope read afresh: the refusal
// dropped the old one); those refused now get their refusal, and the rest
// are sent once more, as one batch. So a change of scope costs the other
// calls one more statement, not an error. A second refusal fails them all,
// as any failed statement does.
func (b *batcher[Q, R]) run(batch []*call[Q, R]) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	reqs := requests(batch)
	vals, err := b.send(ctx, reqs)
	b.count(len(reqs))
	if err != nil && len(batch) > 1 && b.refused != nil && b.refused(err) {
		batch = b.readmit(ctx, batch)
		if len(batch) == 0 {
			return
		}
		reqs = requests(batch)
		vals, err = b.send(ctx, reqs)
		b.count(len(reqs))
	}
	if err != nil {
		err = interpretError(b.op, err) // one failed statement fails every call in it
		for _, c := range batch {
			c.done <- answer[R]{err: err}
		}
		return
	}
	for i, c := range batch {
		c.done <- answer[R]{val: vals[i]}
	}
}

// requests are the requests of batch's calls, in order.
func requests[Q, R any](batch []*call[Q, R]) []Q {
	reqs := make([]Q, len(batch))
	for i, c := range batch {
		reqs[i] = c.req
	}
	return reqs
}

// readmit judges each call of batch again (admit), answers those it
// refuses with their refusal, and returns the others, in order.
func (b *batcher[Q, R]) readmit(ctx context.Context, batch []*call[Q, R]) []*call[Q, R] {
	kept := batch[:0]
	for _, c := range batch {
		if err := b.admit(ctx, c.req); err != nil {
			c.done <- answer[R]{err: err}
			continue
		}
		kept = append(kept, c)
	}
	return kept
}

// stop fails the queued calls with unavailable, lets the batches in flight
// finish and answer their callers, and ends the flushers. (Calls sent alone
// finish on their own; closing the pool waits for them.) Calls after stop
// are unavailable. stop is idempotent.
func (b *batcher[Q, R]) stop() {
	b.mu.Lock()
	queue := b.queue
	b.queue, b.closed = nil, true
	b.mu.Unlock()
	b.wake.Broadcast()
	err := interpretError(b.op, errClosed)
	for _, c := range queue {
		if c.state.CompareAndSwap(queued, taken) {
			c.done <- answer[R]{err: err}
		}
	}
	b.flushers.Wait()
}

// count records one statement sent, carrying n calls.
func (b *batcher[Q, R]) count(n int) {
	b.statements.Add(1)
	b.operations.Add(uint64(n))
}

// queuedCalls reports how many calls wait in the queue (for tests).
func (b *batcher[Q, R]) queuedCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}
