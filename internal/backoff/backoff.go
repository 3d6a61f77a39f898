// Package backoff paces retries: a pause that starts small and doubles up to
// a bound, and a sleep that a context cuts short. Each caller names its own
// schedule; leasehold's retry loops (a locked SQLite file, a store that is
// down at start, a held task) all pace themselves with it.
package backoff

import (
	"context"
	"time"
)

// Backoff hands out the pauses of a doubling schedule: the first is given,
// each next one twice the last, never more than a limit. It is not safe for
// concurrent use; each retry loop has its own.
type Backoff struct {
	next, max time.Duration
}

// New starts a schedule from first doubling up to limit (limit is raised to
// first if it is smaller).
func New(first, limit time.Duration) *Backoff {
	return &Backoff{next: first, max: max(first, limit)}
}

// Next returns the pause to take now and moves on to the following one.
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	return d
}

// Sleep pauses for d, or less if ctx ends first; it returns ctx's error in
// that case, nil otherwise.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
