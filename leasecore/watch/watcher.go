package watch

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/leasecore"
)

// FromNow as Params.Since starts a watch at the newest event.
const FromNow = -1

// How a watcher hands its items to its reader.
const (
	// watchBatch is how many events a watcher takes from the ring at a
	// time, and watchQueue how many items wait on its Items for the reader.
	watchBatch = 64
	watchQueue = 16
)

// ErrCut ends a watcher whose reader fell too far behind the store's
// events: resume with a new watch after the last event read.
var ErrCut = errors.New("watcher fell too far behind and was cut: resume after the last event read")

// errClosed ends a watcher that Close stopped.
var errClosed = errors.New("watch closed")

// Params say which events a watch delivers.
type Params struct {
	// Prefix limits the watch to tasks whose names start with it; empty
	// watches every task.
	Prefix string
	// Since is the ID of the last event the watcher has seen: the watch
	// delivers the events with larger IDs that the history still holds,
	// then the new ones as they happen. FromNow starts at the newest event.
	Since int64
}

// Validate checks the parameters: a *leasecore.ValidationError naming the
// field and the rule.
func (p Params) Validate() error {
	if err := leasecore.ValidateTaskPrefix(p.Prefix); err != nil {
		return err
	}
	if p.Since < FromNow {
		return &leasecore.ValidationError{Field: "Since", Rule: "must be an event id (0 or more), or FromNow"}
	}
	return nil
}

// Item is one item of a watch: a history event, or the mark that the watch
// has caught up. A watch delivers the mark once, in order with the events:
// after every event it replayed from the history, before every event that
// happened after it caught up.
type Item struct {
	// Event is the history event; the zero Event when Ready.
	Event leasecore.Event
	// Frame is Event as the Hub's encoding (WithEncoding) made it, nil
	// without one or when Ready. It is shared: never change it.
	Frame []byte
	// Ready marks the item that says the watch caught up.
	Ready bool
	// Position, when Ready, is where the watch caught up: the events
	// before the mark have IDs up to it, the events after it larger IDs.
	Position int64
}

// Watcher is one watch: its events arrive on Items in ID order, each once,
// with the mark that it caught up (Item.Ready) between the replayed events
// and the new ones. One goroutine of its own sends them, and closes Items
// when the watch ends.
type Watcher struct {
	hub    *Hub
	prefix string
	items  chan Item
	stop   chan struct{} // closed by Close
	once   sync.Once
	pos    atomic.Int64 // the last event ID sent (or skipped by the prefix)

	// Guarded by hub.mu.
	epoch   uint64 // the hub's epoch when it joined (see Hub.epoch)
	next    uint64 // live: the ring sequence number it reads next
	livePos int64  // pos when it joined the ring
	err     error
	closed  bool // items is closed
}

// Items delivers the watch's events, and once the mark that it caught up,
// in the order a reader acts on them. It is closed when the watch ends;
// Err then says why.
func (w *Watcher) Items() <-chan Item { return w.items }

// Err says why Items was closed: ErrCut, the watch's context's error, an
// error wrapping leasecore.ErrUnavailable (the store failed while catching
// up), a *leasecore.PositionAheadError (the store's history went back:
// start over from the oldest event it holds, with Since 0), or nil after
// Close or the Hub's Close.
func (w *Watcher) Err() error {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.err
}

// Position is the ID of the last event the watcher was sent, or skipped as
// outside its prefix.
func (w *Watcher) Position() int64 { return w.pos.Load() }

// Close ends the watch: its goroutine closes Items and leaves.
func (w *Watcher) Close() { w.once.Do(func() { close(w.stop) }) }

// Watch starts a watch of the store's history. It returns once the watch
// knows where it starts; its items then arrive on the Watcher until ctx
// ends, the Watcher or its Hub is closed, or it is cut. It answers
// leasecore.ErrUnavailable when the store cannot be read or followed, and a
// *leasecore.PositionAheadError when p.Since is above every event ID the
// store has handed out: the caller starts over from the oldest event the
// history holds (Since 0).
func (h *Hub) Watch(ctx context.Context, p Params) (*Watcher, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if h.feedErr != nil {
		return nil, h.feedErr
	}
	w := &Watcher{hub: h, prefix: p.Prefix, items: make(chan Item, watchQueue), stop: make(chan struct{})}
	if err := h.join(ctx); err != nil {
		return nil, err
	}
	// The watcher's goroutine stops when ctx ends or the hub is closed.
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(h.life, cancel)
	end := func() { unhook(); cancel() }
	h.mu.Lock()
	since := p.Since
	if since < 0 {
		since = h.pos
	}
	w.pos.Store(since)
	w.epoch = h.epoch
	if since == h.pos {
		// Nothing to catch up on: join the ring at once, under the lock
		// that appending to it takes, so no event falls between.
		h.goLiveLocked(w)
		h.mu.Unlock()
		go w.run(ctx, nil, end)
		return w, nil
	}
	h.mu.Unlock()
	// Catch up with a cursor of the watcher's own, opened before returning
	// so that a store that cannot be read answers unavailable now, and a
	// position ahead of the hub's is checked against the store's history
	// (it may be ahead of it too, and would then wait for nothing).
	cur, err := h.feed.FollowHistory(ctx, since)
	if err != nil {
		end()
		h.mu.Lock()
		h.finishLocked(w, err)
		h.mu.Unlock()
		return nil, err
	}
	go w.run(ctx, cur, end)
	return w, nil
}

// run is the watcher's goroutine: it catches up (when it has a cursor),
// sends the mark that it did, then sends what the hub appends to the ring,
// until the watch ends; then it closes the items and calls end.
func (w *Watcher) run(ctx context.Context, cur leasecore.HistoryCursor, end func()) {
	var err error
	if cur != nil {
		err = w.catchUp(ctx, cur)
		_ = cur.Close()
	}
	if err == nil {
		// livePos was set when it joined the ring, by this goroutine or by
		// Watch before it started this one, and is not written again.
		err = w.sendItem(ctx, Item{Ready: true, Position: w.livePos})
	}
	if err == nil {
		err = w.follow(ctx)
	}
	h := w.hub
	if h.life.Err() != nil && errors.Is(err, context.Canceled) {
		err = errClosed // the hub was closed, not the caller's context
	}
	end()
	h.mu.Lock()
	h.finishLocked(w, err)
	h.mu.Unlock()
}

// send hands an event to the reader when it is in the watcher's prefix,
// unless the watch ends first, and moves the watcher's position past it.
func (w *Watcher) send(ctx context.Context, it Item) error {
	if strings.HasPrefix(it.Event.Task, w.prefix) {
		if err := w.sendItem(ctx, it); err != nil {
			return err
		}
	}
	w.pos.Store(it.Event.ID)
	return nil
}

// sendItem hands it to the reader, unless the watch ends first.
func (w *Watcher) sendItem(ctx context.Context, it Item) error {
	select {
	case w.items <- it:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.stop:
		return errClosed
	}
}
