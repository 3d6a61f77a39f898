package watch

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
)

// The expiry sweep's pace.
const (
	// sweepLimit is how many expiries one RecordExpiries call records.
	sweepLimit = 256
	// sweepMaxWait bounds the pause between two expiry sweeps: a lease
	// claimed after a sweep, with a ttl shorter than the wait to the
	// earliest expiry the sweep saw, is noticed at most this late.
	sweepMaxWait = time.Second
	// sweepMinWait keeps a sweep whose clock runs ahead of the store's
	// from sweeping in a loop until the store's clock catches up.
	sweepMinWait = 50 * time.Millisecond
)

// sweep records the expiry of leases that ran out unreleased and
// unclaimed, at their expiry, so that watchers hear of them; until ctx
// ends.
func (h *Hub) sweep(ctx context.Context) {
	bo := backoff.New(pendingRetry, readPoll)
	for {
		sw, err := h.feed.RecordExpiries(ctx, sweepLimit)
		wait := sweepMaxWait
		switch {
		case err != nil:
			wait = bo.Next()
		case sw.Recorded >= sweepLimit:
			wait = 0 // more may be waiting
		case !sw.NextExpiry.IsZero():
			bo = backoff.New(pendingRetry, readPoll)
			// The store's clock judges expiry; the local clock only paces
			// the sweeps, bounded both ways.
			wait = min(max(time.Until(sw.NextExpiry), sweepMinWait), sweepMaxWait)
		}
		if backoff.Sleep(ctx, wait) != nil {
			return
		}
	}
}
