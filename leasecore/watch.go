package leasecore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
)

// The watch: every change of holder on the store, as it is recorded in the
// history, whichever process made it (docs/design.md, "The watch").
//
// A Service follows its store's history with one hub, however many watchers
// it has: one cursor reads the new events and fans them out, so the store's
// load does not grow with the watchers. The hub runs while the Service has
// watchers (and WatchLinger after the last leaves), and while it runs it
// also records the expiry of leases that run out with nobody claiming them
// again, so that watchers hear of them.
//
// The hub appends the events it reads to one ring that all its watchers
// read from (WithWatchBuffer sets its size), each at its own pace, so a
// watcher costs an index into the ring rather than a copy of every event,
// and a burst of events is no reason to drop anyone. A watcher whose reader
// falls more than the ring behind the hub is cut (ErrWatchCut) rather than
// buffered without bound, and resumes from its last event with a new watch.
//
// A watcher that gives a position first catches up from the history with a
// cursor of its own, paced by its reader, and joins the ring only once it
// has read up to the hub's position: no event is lost or repeated in the
// hand-over, and the catch-up holds no events in memory.
//
// Positions are the store's event IDs, which only rise, so a position
// above every ID the store has handed out means its history went back (a
// restore from an older copy, an asynchronous failover) or was never this
// store's. Watch refuses such a position (ErrPositionAhead), and the hub,
// whose own cursor finds the same when the store goes back under it,
// follows again from the store's newest event and ends every watcher with
// ErrPositionAhead: each starts over from the oldest event the history
// holds, so none waits, silent, for IDs that will be handed out again to
// other events.

// WatchFromNow as WatchParams.Since starts a watch at the newest event.
const WatchFromNow = -1

// Watch defaults.
const (
	// DefaultWatchBuffer is the size of the ring of recent events a
	// Service's live watchers read from: how many events a watcher may fall
	// behind before it is cut.
	DefaultWatchBuffer = 4096
	// watchBatch is how many events a watcher takes from the ring at a
	// time, and watchQueue how many wait on its Events for the reader.
	watchBatch = 64
	watchQueue = 16
	// DefaultWatchPoll is how often a watched Service's store is asked
	// for other processes' commits (HistoryChanges), unless WithWatchPoll
	// says otherwise: the longest such a commit waits before the watch
	// reads it, besides the read's own pace (watchReadEvery).
	DefaultWatchPoll = 100 * time.Millisecond
	// WatchLinger is how long the hub keeps following after its last
	// watcher left, so that a watcher reconnecting finds it running.
	WatchLinger = 30 * time.Second
	// watchPoll bounds the wait between two reads of the history when the
	// store's change signal says nothing (it is a hint, not the source of
	// truth; a signal that was lost costs at most this much delay).
	watchPoll = time.Second
	// watchReadEvery is the shortest pause between two reads of the
	// history: commits that come closer together are read together, so a
	// busy store costs each following sidecar at most 1/watchReadEvery
	// reads a second, at the price of that much delay.
	watchReadEvery = 100 * time.Millisecond
	// watchPendingRetry is the pause before reading again when the cursor
	// held events back behind a transaction still in flight.
	watchPendingRetry = 20 * time.Millisecond
	// watchReadLimit is how many events one read of the history returns.
	watchReadLimit = 512
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

// ErrWatchCut ends a watcher whose reader fell too far behind the store's
// events: resume with a new watch after the last event read.
var ErrWatchCut = errors.New("watcher fell too far behind and was cut: resume after the last event read")

// WatchParams says which events a watch delivers.
type WatchParams struct {
	// Prefix limits the watch to tasks whose names start with it; empty
	// watches every task.
	Prefix string
	// Since is the ID of the last event the watcher has seen: the watch
	// delivers the events with larger IDs that the history still holds,
	// then the new ones as they happen. WatchFromNow starts at the newest
	// event.
	Since int64
}

// Validate checks the parameters.
func (p WatchParams) Validate() error {
	if len(p.Prefix) > MaxTaskLen {
		return &ValidationError{Field: "Prefix", Rule: fmt.Sprintf("must be at most %d characters", MaxTaskLen)}
	}
	for i := 0; i < len(p.Prefix); i++ {
		if !isTaskChar(p.Prefix[i]) {
			return &ValidationError{Field: "Prefix", Rule: fmt.Sprintf("must be characters of %s; %q at position %d is not", taskCharsetMsg, rune(p.Prefix[i]), i+1)}
		}
	}
	if p.Since < WatchFromNow {
		return &ValidationError{Field: "Since", Rule: "must be an event id (0 or more), or WatchFromNow"}
	}
	return nil
}

// WithWatchBuffer sets the size of the ring of recent events that live
// watchers read from: how many events a watcher may fall behind before it
// is cut (default DefaultWatchBuffer).
func WithWatchBuffer(n int) Option {
	return func(s *Service) {
		if n > 0 {
			s.watchBuffer = n
		}
	}
}

// WithWatchPoll sets how often a watched Service asks its store for the
// commits of other processes (default DefaultWatchPoll); this process's own
// commits wake the watch at once. Zero turns the change signal off: the
// watch then reads the store once a second (watchPoll), and nothing else,
// the least a watch can cost the store. A negative d keeps the default.
func WithWatchPoll(d time.Duration) Option {
	return func(s *Service) {
		if d >= 0 {
			s.watchChangesPoll = d
		}
	}
}

// WatchItem is one item of a watch's stream: a history event, or the mark
// that the watch has caught up. A watch delivers the mark once, in order
// with the events: after every event it replayed from the history, before
// every event that happened after it caught up.
type WatchItem struct {
	// Event is the history event; the zero Event when Ready.
	Event Event
	// Ready marks the item that says the watch caught up.
	Ready bool
	// Position, when Ready, is where the watch caught up: the events
	// before the mark have IDs up to it, the events after it larger IDs.
	Position int64
}

// Watcher is one watch: its events arrive on Items in ID order, each once,
// with the mark that it caught up (WatchItem.Ready) between the replayed
// events and the new ones. One goroutine of its own sends them, and closes
// Items when the watch ends.
type Watcher struct {
	hub    *watchHub
	prefix string
	events chan WatchItem
	stop   chan struct{} // closed by Close
	once   sync.Once
	pos    atomic.Int64 // the last event ID sent (or skipped by the prefix)

	// Guarded by hub.mu.
	epoch   uint64 // the hub's epoch when it joined (see watchHub.epoch)
	next    uint64 // live: the ring sequence number it reads next
	livePos int64  // pos when it joined the ring
	err     error
	closed  bool // events is closed
}

// Items delivers the watch's events, and once the mark that it caught up,
// in the order a reader acts on them. It is closed when the watch ends;
// Err then says why.
func (w *Watcher) Items() <-chan WatchItem { return w.events }

// Err says why Items was closed: ErrWatchCut, the watch's context's error,
// an error wrapping ErrUnavailable (the store failed while catching up), a
// *PositionAheadError (the store's history went back: start over from the
// oldest event it holds, with Since 0), or nil after Close.
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

// WatchStats describes a Service's watch.
type WatchStats struct {
	Watchers int   // open watchers, live or catching up
	Position int64 // the hub's position: the last event it read (0 when not following)
	Cut      int64 // watchers cut for falling behind, since the Service started
}

// WatchStats reports the Service's watchers.
func (s *Service) WatchStats() WatchStats {
	h := s.hub()
	h.mu.Lock()
	defer h.mu.Unlock()
	st := WatchStats{Watchers: h.open, Cut: h.cut}
	if h.running {
		st.Position = h.pos
	}
	return st
}

// Watch starts a watch of the store's history. It returns once the watch
// knows where it starts; its events then arrive on the Watcher until ctx
// ends, the Watcher is closed, or it is cut. It answers ErrUnavailable when
// the store cannot be read or followed, and a *PositionAheadError when
// p.Since is above every event ID the store has handed out: the caller
// starts over from the oldest event the history holds (Since 0).
func (s *Service) Watch(ctx context.Context, p WatchParams) (*Watcher, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	feed, ok := s.store.(HistoryFeed)
	if !ok {
		return nil, Unavailable(OpFollowHistory, errors.New("the store cannot follow its history"))
	}
	h := s.hub()
	w := &Watcher{hub: h, prefix: p.Prefix, events: make(chan WatchItem, watchQueue), stop: make(chan struct{})}
	if err := h.join(ctx, feed); err != nil {
		return nil, err
	}
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
		go w.run(ctx, nil)
		return w, nil
	}
	h.mu.Unlock()
	// Catch up with a cursor of the watcher's own, opened before returning
	// so that a store that cannot be read answers unavailable now, and a
	// position ahead of the hub's is checked against the store's history
	// (it may be ahead of it too, and would then wait for nothing).
	var cur HistoryCursor
	if err := s.callBounded(ctx, OpFollowHistory, func(ctx context.Context) (err error) {
		cur, err = feed.FollowHistory(ctx, since)
		return err
	}); err != nil {
		h.mu.Lock()
		h.finishLocked(w, err)
		h.mu.Unlock()
		return nil, outcome(OpFollowHistory, err, ErrPositionAhead)
	}
	go w.run(ctx, cur)
	return w, nil
}

// errWatchClosed ends a watcher that Close stopped.
var errWatchClosed = errors.New("watch closed")

// run is the watcher's goroutine: it catches up (when it has a cursor),
// sends the mark that it did, then sends what the hub appends to the ring,
// until the watch ends; then it closes the items.
func (w *Watcher) run(ctx context.Context, cur HistoryCursor) {
	var err error
	if cur != nil {
		err = w.catchUp(ctx, cur)
		_ = cur.Close()
	}
	if err == nil {
		// livePos was set when it joined the ring, and is not written again.
		err = w.sendItem(ctx, WatchItem{Ready: true, Position: w.livePos})
	}
	if err == nil {
		err = w.follow(ctx)
	}
	h := w.hub
	h.mu.Lock()
	h.finishLocked(w, err)
	h.mu.Unlock()
}

// send hands ev to the reader, unless the watch ends first.
func (w *Watcher) send(ctx context.Context, ev Event) error {
	if err := w.sendItem(ctx, WatchItem{Event: ev}); err != nil {
		return err
	}
	w.pos.Store(ev.ID)
	return nil
}

// sendItem hands it to the reader, unless the watch ends first.
func (w *Watcher) sendItem(ctx context.Context, it WatchItem) error {
	select {
	case w.events <- it:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.stop:
		return errWatchClosed
	}
}

// catchUp reads the history from the watcher's position with its own
// cursor, sending each event as the reader takes it, until it reaches the
// hub's position; then it joins the ring and returns nil.
func (w *Watcher) catchUp(ctx context.Context, cur HistoryCursor) error {
	s, h := w.hub.s, w.hub
	bo := backoff.New(watchPendingRetry, watchPoll)
	for {
		// The hub's position before the read: every event up to it was
		// settled before the read began, so a read that finds nothing after
		// the cursor proves them read or pruned. (Not the position after
		// the read: the hub may have read newer events meanwhile, which
		// this read did not see.)
		h.mu.Lock()
		target := h.pos
		h.mu.Unlock()
		var evs []Event
		err := s.callBounded(ctx, OpReadHistory, func(ctx context.Context) (err error) {
			evs, err = cur.Next(ctx, watchReadLimit)
			return err
		})
		if err != nil {
			return outcome(OpReadHistory, err, ErrPositionAhead)
		}
		for _, ev := range evs {
			if strings.HasPrefix(ev.Task, w.prefix) {
				if err := w.send(ctx, ev); err != nil {
					return err
				}
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
			bo = backoff.New(watchPendingRetry, watchPoll)
		}
	}
}

// follow sends the events the hub appends to the ring, from the watcher's
// place in it, a batch at a time, until the watch ends or the watcher falls
// more than the ring behind.
func (w *Watcher) follow(ctx context.Context) error {
	h := w.hub
	batch := make([]Event, 0, watchBatch)
	for {
		h.mu.Lock()
		if w.epoch != h.epoch {
			err := h.rewound
			h.mu.Unlock()
			return err // the history went back: the ring's events are the old history's
		}
		if h.seq-w.next > uint64(len(h.ring)) {
			h.mu.Unlock()
			return ErrWatchCut // the events it has not read are overwritten
		}
		batch = batch[:0]
		for ; w.next < h.seq && len(batch) < watchBatch; w.next++ {
			batch = append(batch, h.ring[w.next%uint64(len(h.ring))])
		}
		wake := h.wake
		h.mu.Unlock()
		for _, ev := range batch {
			switch {
			case ev.ID <= w.pos.Load():
				// Its catch-up sent it already.
			case strings.HasPrefix(ev.Task, w.prefix):
				if err := w.send(ctx, ev); err != nil {
					return err
				}
			default:
				w.pos.Store(ev.ID)
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
			return errWatchClosed
		}
	}
}

// watchHub follows the store's history for all of a Service's watchers.
type watchHub struct {
	s *Service

	mu       sync.Mutex
	open     int // watchers, live or catching up
	cut      int64
	ring     []Event       // the recent events, the one of sequence number n at n % len(ring)
	seq      uint64        // how many events were appended to the ring
	wake     chan struct{} // closed, and replaced, whenever events are appended
	running  bool
	starting chan struct{} // closed when a start attempt finished
	startErr error
	pos      int64 // the last event read and fanned out
	// epoch counts the times the hub found the store's history gone back
	// under it and followed again from its newest event; a watcher that
	// joined in an earlier epoch is ended with rewound.
	epoch   uint64
	rewound *PositionAheadError
	stop    context.CancelFunc
	linger  *time.Timer
	gen     uint64 // counts starts, so that a stopped generation's reads are dropped
}

func (s *Service) hub() *watchHub {
	s.watchOnce.Do(func() {
		s.watch = &watchHub{s: s, ring: make([]Event, s.watchBuffer), wake: make(chan struct{})}
	})
	return s.watch
}

// join counts a new watcher and makes sure the hub runs.
func (h *watchHub) join(ctx context.Context, feed HistoryFeed) error {
	h.mu.Lock()
	h.open++
	if h.linger != nil {
		h.linger.Stop()
		h.linger = nil
	}
	if !h.running && h.starting == nil {
		h.starting = make(chan struct{})
		h.gen++
		go h.start(feed, h.gen)
	}
	starting := h.starting
	h.mu.Unlock()
	if starting != nil {
		select {
		case <-starting:
		case <-ctx.Done():
			h.leave()
			return Unavailable(OpFollowHistory, ctx.Err())
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running {
		err := h.startErr
		h.open--
		if err == nil {
			err = errors.New("the watch stopped")
		}
		return outcome(OpFollowHistory, err)
	}
	return nil
}

// leave uncounts a watcher that never started.
func (h *watchHub) leave() {
	h.mu.Lock()
	h.open--
	h.mu.Unlock()
	h.maybeLinger()
}

// start opens the hub's cursor at the newest event and runs the hub.
func (h *watchHub) start(feed HistoryFeed, gen uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	var cur HistoryCursor
	err := h.s.callBounded(ctx, OpFollowHistory, func(ctx context.Context) (err error) {
		cur, err = feed.FollowHistory(ctx, WatchFromNow)
		return err
	})
	h.mu.Lock()
	starting := h.starting
	h.starting = nil
	if err != nil {
		h.startErr = err
		h.mu.Unlock()
		cancel()
		close(starting)
		return
	}
	h.running, h.startErr, h.stop = true, nil, cancel
	h.pos = cur.Position()
	h.lingerLocked() // every watcher that asked for it may have given up meanwhile
	h.mu.Unlock()
	close(starting)

	go h.sweep(ctx, feed)
	h.follow(ctx, feed, cur, gen)
}

// follow reads the new events whenever the store signals a change, or
// watchPoll passed, and fans them out, until ctx ends; then it closes its
// cursor.
func (h *watchHub) follow(ctx context.Context, feed HistoryFeed, cur HistoryCursor, gen uint64) {
	defer func() { _ = cur.Close() }()
	var changes <-chan struct{} // nil: read on the timer alone
	if poll := h.s.watchChangesPoll; poll > 0 {
		if ch, err := feed.HistoryChanges(ctx, poll); err == nil {
			changes = ch
		}
	}
	bo := backoff.New(watchPendingRetry, watchPoll)
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
		if d := watchReadEvery - time.Since(lastRead); d > 0 {
			if backoff.Sleep(ctx, d) != nil {
				return
			}
		}
		lastRead = time.Now()
		next := watchPoll
		for {
			var evs []Event
			err := h.s.callBounded(ctx, OpReadHistory, func(ctx context.Context) (err error) {
				evs, err = cur.Next(ctx, watchReadLimit)
				return err
			})
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				var ahead *PositionAheadError
				if errors.As(err, &ahead) {
					if cur = h.refollow(ctx, feed, cur, gen, ahead); cur == nil {
						return
					}
					next = 0 // read the new history at once
					break
				}
				next = bo.Next() // the store failed: try again, keeping the position
				break
			}
			bo = backoff.New(watchPendingRetry, watchPoll)
			h.fanOut(gen, evs, cur.Position())
			if len(evs) < watchReadLimit {
				if cur.Pending() {
					next = watchPendingRetry
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
func (h *watchHub) refollow(ctx context.Context, feed HistoryFeed, old HistoryCursor, gen uint64, ahead *PositionAheadError) HistoryCursor {
	_ = old.Close()
	bo := backoff.New(watchPendingRetry, watchPoll)
	for {
		var cur HistoryCursor
		err := h.s.callBounded(ctx, OpFollowHistory, func(ctx context.Context) (err error) {
			cur, err = feed.FollowHistory(ctx, WatchFromNow)
			return err
		})
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

// fanOut appends evs to the ring, wakes the watchers, and moves the hub's
// position to pos. It never waits for a watcher. A read of a generation
// that was stopped (and perhaps restarted since) is dropped.
func (h *watchHub) fanOut(gen uint64, evs []Event, pos int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if gen != h.gen || !h.running {
		return
	}
	for _, ev := range evs {
		h.ring[h.seq%uint64(len(h.ring))] = ev
		h.seq++
	}
	if len(evs) > 0 {
		close(h.wake)
		h.wake = make(chan struct{})
	}
	h.pos = max(h.pos, pos)
}

// sweep records the expiry of leases that ran out unreleased and unclaimed,
// at their expiry, so that watchers hear of them; until ctx ends.
func (h *watchHub) sweep(ctx context.Context, feed HistoryFeed) {
	bo := backoff.New(watchPendingRetry, watchPoll)
	for {
		var sw ExpirySweep
		err := h.s.callBounded(ctx, OpRecordExpiries, func(ctx context.Context) (err error) {
			sw, err = feed.RecordExpiries(ctx, sweepLimit)
			return err
		})
		wait := sweepMaxWait
		switch {
		case err != nil:
			wait = bo.Next()
		case sw.Recorded >= sweepLimit:
			wait = 0 // more may be waiting
		case !sw.NextExpiry.IsZero():
			bo = backoff.New(watchPendingRetry, watchPoll)
			// The store's clock judges expiry; the local clock only paces
			// the sweeps, bounded both ways.
			wait = min(max(time.Until(sw.NextExpiry), sweepMinWait), sweepMaxWait)
		}
		if backoff.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// goLiveLocked starts a caught-up watcher reading the ring at the
// events appended from now on; its goroutine then sends the ready mark.
func (h *watchHub) goLiveLocked(w *Watcher) {
	w.next = h.seq
	w.livePos = w.pos.Load()
}

// finishLocked ends a watcher, once: its events close, and when it was the
// last the hub lingers, then stops. The caller is the watcher's goroutine
// (the only sender on w.events), or Watch before it started one.
func (h *watchHub) finishLocked(w *Watcher, err error) {
	if w.closed {
		return
	}
	if errors.Is(err, errWatchClosed) {
		err = nil
	}
	if errors.Is(err, ErrWatchCut) {
		h.cut++
	}
	w.closed, w.err = true, err
	close(w.events)
	h.open--
	h.lingerLocked()
}

// maybeLinger starts the linger when the hub runs without watchers.
func (h *watchHub) maybeLinger() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lingerLocked()
}

// lingerLocked arms the timer that stops a hub running without watchers
// WatchLinger from now, unless one is armed.
func (h *watchHub) lingerLocked() {
	if h.open != 0 || !h.running || h.linger != nil {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(h.s.watchLinger, func() {
		h.mu.Lock() // before reading t, which was set under the lock
		defer h.mu.Unlock()
		h.stopIfIdleLocked(t)
	})
	h.linger = t
}

// stopIfIdleLocked stops the hub if t is still its linger timer (no
// watcher came and went since it was armed) and it still has no watchers.
func (h *watchHub) stopIfIdleLocked(t *time.Timer) {
	if h.linger != t || h.open != 0 || !h.running {
		return
	}
	h.linger = nil
	h.running = false
	h.stop()
}

// callBounded is call with the Service's operation timeout.
func (s *Service) callBounded(ctx context.Context, op string, fn func(context.Context) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.call(ctx, op, fn)
}
