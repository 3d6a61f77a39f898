package watch

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/leasecore"
)

// The hub appends the events it reads to one ring that all its live
// watchers read from, each at its own pace, so a watcher costs an index
// into the ring rather than a copy of every event, and a burst of events is
// no reason to drop anyone. A watcher whose reader falls more than the ring
// behind the hub is cut (ErrCut) rather than buffered without bound, and
// resumes from its last event with a new watch. With an encoding
// (WithEncoding) each event in the ring carries its frame, made once for
// all the watchers.

// The pace of the hub's reads.
const (
	// readPoll bounds the wait between two reads of the history when the
	// store's change signal says nothing (it is a hint, not the source of
	// truth; a signal that was lost costs at most this much delay).
	readPoll = time.Second
	// readEvery is the shortest pause between two reads of the history:
	// commits that come closer together are read together, so a busy
	// store costs each following sidecar at most 1/readEvery reads a
	// second, at the price of that much delay.
	readEvery = 100 * time.Millisecond
	// pendingRetry is the pause before reading again when the cursor held
	// events back behind a transaction still in flight.
	pendingRetry = 20 * time.Millisecond
	// readLimit is how many events one read of the history returns.
	readLimit = 512
)

// follow reads the new events whenever the store signals a change, or
// readPoll passed, and fans them out, until ctx ends; then it closes its
// cursor.
func (h *Hub) follow(ctx context.Context, cur leasecore.HistoryCursor, gen uint64) {
	defer func() { _ = cur.Close() }()
	var changes <-chan struct{} // nil: read on the timer alone
	if h.changesPoll > 0 {
		if ch, err := h.feed.HistoryChanges(ctx, h.changesPoll); err == nil {
			changes = ch
		}
	}
	bo := backoff.New(pendingRetry, readPoll)
	wait := time.NewTimer(0)
	defer wait.Stop()
	var lastRead time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				changes = nil
			}
		case <-wait.C:
		}
		if d := readEvery - time.Since(lastRead); d > 0 {
			if backoff.Sleep(ctx, d) != nil {
				return
			}
		}
		lastRead = time.Now()
		next := readPoll
		for {
			evs, err := cur.Next(ctx, readLimit)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				var ahead *leasecore.PositionAheadError
				if errors.As(err, &ahead) {
					if cur = h.refollow(ctx, cur, gen, ahead); cur == nil {
						return
					}
					next = 0 // read the new history at once
					break
				}
				next = bo.Next() // the store failed: try again, keeping the position
				break
			}
			bo = backoff.New(pendingRetry, readPoll)
			h.fanOut(gen, evs, cur.Position())
			if len(evs) < readLimit {
				if cur.Pending() {
					next = pendingRetry
				}
				break
			}
		}
		if !wait.Stop() {
			select {
			case <-wait.C:
			default:
			}
		}
		wait.Reset(next)
	}
}

// refollow replaces the hub's cursor, which found the store's history gone
// back below its position, with one from the store's newest event, and
// then, under the lock, moves the hub's position there and starts a new
// epoch, which ends every watcher of the earlier ones with ahead: their
// positions, and the events in the ring, are the old history's. Until the
// new cursor is open, watchers that join belong to the old epoch and are
// ended with the others, so none goes live at the old position. It returns
// the new cursor, or nil when ctx ended first.
func (h *Hub) refollow(ctx context.Context, old leasecore.HistoryCursor, gen uint64, ahead *leasecore.PositionAheadError) leasecore.HistoryCursor {
	_ = old.Close()
	bo := backoff.New(pendingRetry, readPoll)
	for {
		cur, err := h.feed.FollowHistory(ctx, FromNow)
		if err == nil {
			h.mu.Lock()
			if gen == h.gen && h.running {
				h.epoch++
				h.rewound = ahead
				h.pos = cur.Position()
				close(h.wake)
				h.wake = make(chan struct{})
			}
			h.mu.Unlock()
			return cur
		}
		if backoff.Sleep(ctx, bo.Next()) != nil {
			return nil
		}
	}
}

// fanOut appends evs to the ring, each with its frame, wakes the watchers,
// and moves the hub's position to pos. It never waits for a watcher. A
// read of a generation that was stopped (and perhaps restarted since) is
// dropped.
func (h *Hub) fanOut(gen uint64, evs []leasecore.Event, pos int64) {
	items := make([]Item, len(evs))
	for i, ev := range evs {
		// Encoded before the lock, which the watchers' reads take.
		items[i] = Item{Event: ev, Frame: h.encode(ev, "")}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if gen != h.gen || !h.running {
		return
	}
	for _, it := range items {
		h.ring[h.seq%uint64(len(h.ring))] = it
		h.seq++
	}
	if len(evs) > 0 {
		close(h.wake)
		h.wake = make(chan struct{})
	}
	h.pos = max(h.pos, pos)
}

// encode is ev's frame by the hub's encoding, nil without one or when ev's
// task is outside prefix (a watcher replaying would not send it).
func (h *Hub) encode(ev leasecore.Event, prefix string) []byte {
	if h.enc == nil || !strings.HasPrefix(ev.Task, prefix) {
		return nil
	}
	return h.enc(ev)
}

// follow sends the events the hub appends to the ring, from the watcher's
// place in it, a batch at a time, until the watch ends or the watcher falls
// more than the ring behind.
func (w *Watcher) follow(ctx context.Context) error {
	h := w.hub
	batch := make([]Item, 0, watchBatch)
	for {
		h.mu.Lock()
		if w.epoch != h.epoch {
			err := h.rewound
			h.mu.Unlock()
			return err // the history went back: the ring's events are the old history's
		}
		if h.seq-w.next > uint64(len(h.ring)) {
			h.mu.Unlock()
			return ErrCut // the events it has not read are overwritten
		}
		batch = batch[:0]
		for ; w.next < h.seq && len(batch) < watchBatch; w.next++ {
			batch = append(batch, h.ring[w.next%uint64(len(h.ring))])
		}
		wake := h.wake
		h.mu.Unlock()
		for _, it := range batch {
			if it.Event.ID <= w.pos.Load() {
				continue // its catch-up sent it already
			}
			if err := w.send(ctx, it); err != nil {
				return err
			}
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-w.stop:
			return errClosed
		}
	}
}
