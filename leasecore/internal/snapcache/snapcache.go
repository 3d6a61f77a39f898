// Package snapcache is a copy of something read from the store that may be
// at most so old: leasecore's task declarations (applied to claims) and the
// PostgreSQL driver's copy of its role's scope (applied before batching).
//
// A caller finds the copy fresh, or waits for the one load in flight, or
// starts it; callers arriving meanwhile wait for that load and use its
// result. So no caller is judged by a copy whose load was sent longer than
// MaxAge before it asked. A load in flight longer than MaxAge (a slow
// store) is not joined: its answer may predate a change the caller must
// see. Invalidate (after the process changed the thing itself) makes the
// next caller load afresh, and a load already in flight, which may have read
// the store before the change, is neither kept nor joined.
package snapcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Cache holds the newest copy of a T and the load in flight, if any. Its
// zero value has no copy; set MaxAge before use.
type Cache[T any] struct {
	// MaxAge bounds how long after its load was sent a copy is used.
	MaxAge time.Duration

	snap atomic.Pointer[snapshot[T]]

	mu       sync.Mutex
	inflight *load[T]
	gen      uint64 // bumped by Invalidate: a load sent before must not be kept
}

type snapshot[T any] struct {
	at    time.Time // when its load was sent; zero once marked stale
	value T         // never changed once published
}

// load is one read of the store, shared by the callers that wait for it.
type load[T any] struct {
	sent time.Time
	done chan struct{}
	snap *snapshot[T]
	err  error
}

// errNoResult is a load that ended with neither a value nor an error (its
// function panicked): its waiters get this rather than a zero value.
var errNoResult = errors.New("the load ended without a result")

// Get returns the copy when it is fresh, else the result of a load: the one
// in flight, or one it starts with fetch. fetch runs without the caller's
// cancellation (the first caller giving up must not fail the others
// waiting for it), so it bounds itself. A caller whose ctx ends while it
// waits gets ctx.Err(); a failed load, fetch's error.
func (c *Cache[T]) Get(ctx context.Context, fetch func(context.Context) (T, error)) (T, error) {
	var zero T
	if snap := c.snap.Load(); snap != nil && time.Since(snap.at) < c.MaxAge {
		return snap.value, nil
	}
	c.mu.Lock()
	// Again under the lock: a load may have published its copy, and left,
	// between the look above and taking the lock.
	if snap := c.snap.Load(); snap != nil && time.Since(snap.at) < c.MaxAge {
		c.mu.Unlock()
		return snap.value, nil
	}
	if l := c.inflight; l != nil && time.Since(l.sent) < c.MaxAge {
		c.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return zero, ctx.Err()
		}
		return l.result()
	}
	l := &load[T]{sent: time.Now(), done: make(chan struct{})}
	c.inflight = l
	gen := c.gen
	c.mu.Unlock()
	c.run(context.WithoutCancel(ctx), l, gen, fetch)
	return l.result()
}

func (l *load[T]) result() (T, error) {
	if l.err != nil {
		var zero T
		return zero, l.err
	}
	return l.snap.value, nil
}

// run runs one load and publishes it, unless Invalidate was called since
// it was sent. Whatever happens, the load ends for its waiters.
func (c *Cache[T]) run(ctx context.Context, l *load[T], gen uint64, fetch func(context.Context) (T, error)) {
	defer func() {
		if l.snap == nil && l.err == nil {
			l.err = errNoResult
		}
		c.mu.Lock()
		if c.inflight == l {
			c.inflight = nil
		}
		if l.err == nil && c.gen == gen {
			c.snap.Store(l.snap)
		}
		c.mu.Unlock()
		close(l.done)
	}()
	v, err := fetch(ctx)
	if err != nil {
		l.err = err
		return
	}
	l.snap = &snapshot[T]{at: l.sent, value: v}
}

// Latest returns the newest copy however old, and whether there is one.
func (c *Cache[T]) Latest() (T, bool) {
	if snap := c.snap.Load(); snap != nil {
		return snap.value, true
	}
	var zero T
	return zero, false
}

// Invalidate makes the next Get load afresh and drops any load in flight.
// With keep, Latest still answers the old copy until a load replaces it;
// without, the copy is dropped.
func (c *Cache[T]) Invalidate(keep bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.inflight = nil
	if old := c.snap.Load(); keep && old != nil {
		c.snap.Store(&snapshot[T]{value: old.value}) // at zero: too old for Get
	} else {
		c.snap.Store(nil)
	}
}
