package watch

import (
	"context"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/leasecore"
)

// catchUp reads the history from the watcher's position with its own
// cursor, sending each event as the reader takes it, until it reaches the
// hub's position; then it joins the ring and returns nil. It holds no
// events beyond the one read it is sending.
func (w *Watcher) catchUp(ctx context.Context, cur leasecore.HistoryCursor) error {
	h := w.hub
	bo := backoff.New(pendingRetry, readPoll)
	for {
		// The hub's position before the read: every event up to it was
		// settled before the read began, so a read that finds nothing after
		// the cursor proves them read or pruned. (Not the position after
		// the read: the hub may have read newer events meanwhile, which
		// this read did not see.)
		h.mu.Lock()
		target := h.pos
		h.mu.Unlock()
		evs, err := cur.Next(ctx, readLimit)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if err := w.send(ctx, Item{Event: ev, Frame: h.encode(ev, w.prefix)}); err != nil {
				return err
			}
		}
		pos := max(w.pos.Load(), cur.Position())
		if len(evs) == 0 && !cur.Pending() {
			// Nothing after the cursor: every event up to target was read
			// (or pruned).
			pos = max(pos, target)
		}
		w.pos.Store(pos)
		h.mu.Lock()
		if w.epoch != h.epoch {
			// The hub found the history gone back meanwhile: what this
			// cursor read may be the old history's.
			err := h.rewound
			h.mu.Unlock()
			return err
		}
		if pos >= h.pos {
			h.goLiveLocked(w)
			h.mu.Unlock()
			return nil
		}
		h.mu.Unlock()
		if len(evs) == 0 {
			if err := backoff.Sleep(ctx, bo.Next()); err != nil {
				return err
			}
		} else {
			bo = backoff.New(pendingRetry, readPoll)
		}
	}
}

// goLiveLocked starts a caught-up watcher reading the ring at the events
// appended from now on; its goroutine then sends the ready mark.
func (h *Hub) goLiveLocked(w *Watcher) {
	w.next = h.seq
	w.livePos = w.pos.Load()
}
