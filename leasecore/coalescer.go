package leasecore

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Coalescer gathers the renewals of many Keepers and sends them to the store
// together, so that a process holding thousands of leases renews them in a
// few statements a second instead of one each.
//
// A renewal handed to Renew waits at most Window, then goes out in one
// Service.RenewBatch with every other renewal that arrived meanwhile. Keepers
// that use a Coalescer set KeeperConfig.Lead to its Window: they hand each
// renewal over that much before it is due, so waiting in the Coalescer never
// makes a renewal later than the keeper's cadence promises. Each renewal is
// still owner-, token- and expiry-checked on its own, acts for its own
// RenewParams.Credential, and each caller gets its own answer.
//
// Batches do not wait for each other: a slow batch does not hold back the
// next window's renewals.
type Coalescer struct {
	svc    *Service
	window time.Duration
	clock  Clock

	mu      sync.Mutex
	queue   []*gathered
	armed   bool // a flush is scheduled for the queue
	closed  bool
	flushes sync.WaitGroup

	// sent, when set (by tests, before first use), sees the size of each
	// batch as it is sent.
	sent func(n int)
}

// gathered is one Renew call waiting for its batch.
type gathered struct {
	ctx  context.Context
	p    RenewParams
	done chan RenewResult // buffered: the flush never waits for a caller
}

// DefaultCoalesceWindow is the sidecar's window: at a ttl of 10 s, renewals
// are due every 4 s, and half a second of gathering turns the renewals of
// 10,000 leases into two or three statements a second.
const DefaultCoalesceWindow = 500 * time.Millisecond

// NewCoalescer returns a Coalescer that sends svc's renewals in batches
// gathered over window (which must be positive). clock may be nil for the
// system clock. Close it when done.
func NewCoalescer(svc *Service, window time.Duration, clock Clock) *Coalescer {
	if window <= 0 {
		panic("leasecore: coalescer window must be positive")
	}
	if clock == nil {
		clock = SystemClock
	}
	return &Coalescer{svc: svc, window: window, clock: clock}
}

// Window is the longest a renewal waits for its batch: a Keeper using the
// Coalescer sets KeeperConfig.Lead to it.
func (c *Coalescer) Window() time.Duration { return c.window }

// ErrCoalescerClosed is the cause of a renewal handed to a closed Coalescer.
var ErrCoalescerClosed = errors.New("the renewal coalescer is closed")

// Renew queues p for the next batch and waits for its answer: the renewed
// lease, or the same errors as Service.Renew. When ctx ends first the call
// returns unavailable at once; a renewal not yet sent is then not sent, one
// already sent may still take effect.
func (c *Coalescer) Renew(ctx context.Context, p RenewParams) (*Lease, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, Unavailable("renew", err)
	}
	g := &gathered{ctx: ctx, p: p, done: make(chan RenewResult, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, Unavailable("renew", ErrCoalescerClosed)
	}
	c.queue = append(c.queue, g)
	if !c.armed {
		c.armed = true
		c.flushes.Add(1)
		go c.flushAfterWindow()
	}
	c.mu.Unlock()

	select {
	case r := <-g.done:
		return r.Lease, r.Err
	case <-ctx.Done():
		select {
		case r := <-g.done: // a definite answer beats "unavailable"
			return r.Lease, r.Err
		default:
			return nil, Unavailable("renew", ctx.Err())
		}
	}
}

// Release passes straight through to the Service: releases are rare and
// should not wait.
func (c *Coalescer) Release(ctx context.Context, p ReleaseParams) (bool, error) {
	return c.svc.Release(ctx, p)
}

// flushAfterWindow waits out the window, then sends everything queued.
func (c *Coalescer) flushAfterWindow() {
	defer c.flushes.Done()
	<-c.clock.After(c.window)
	c.mu.Lock()
	queue := c.queue
	c.queue, c.armed = nil, false
	c.mu.Unlock()
	c.send(queue)
}

// send renews the queued calls whose callers still wait, in one batch, and
// answers each. The batch runs under the Service's operation timeout, not
// under any caller's context: one caller leaving must not cancel the others.
func (c *Coalescer) send(queue []*gathered) {
	live := queue[:0]
	for _, g := range queue {
		if g.ctx.Err() == nil {
			live = append(live, g)
		}
	}
	if len(live) == 0 {
		return
	}
	ps := make([]RenewParams, len(live))
	for i, g := range live {
		ps[i] = g.p
	}
	if c.sent != nil {
		c.sent(len(ps))
	}
	results := c.svc.RenewBatch(context.Background(), ps)
	for i, g := range live {
		g.done <- results[i]
	}
}

// Close sends what is queued, waits for the batches in flight, and makes
// later renewals unavailable.
func (c *Coalescer) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.flushes.Wait()
}
