package watch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// Hub defaults.
const (
	// DefaultBuffer is the size of the ring of recent events a Hub's live
	// watchers read from: how many events a watcher may fall behind
	// before it is cut.
	DefaultBuffer = 4096
	// Linger is how long a Hub keeps following after its last watcher
	// left, so that a watcher reconnecting finds it running.
	Linger = 30 * time.Second
)

// Option configures a Hub.
type Option func(*Hub)

// withBuffer sets the size of the ring of recent events that live
// watchers read from: how many events a watcher may fall behind before it
// is cut (default DefaultBuffer). n of 0 or less keeps the default.
func withBuffer(n int) Option {
	return func(h *Hub) {
		if n > 0 {
			h.buffer = n
		}
	}
}

// WithPoll sets how often a watched Hub asks its store for the commits of
// other processes (default leasecore.DefaultWatchPoll); this process's own
// commits wake the watch at once. Zero turns the change signal off: the
// watch then reads the store once a second, and nothing else, the least a
// watch can cost the store. A negative d keeps the default.
func WithPoll(d time.Duration) Option {
	return func(h *Hub) {
		if d >= 0 {
			h.changesPoll = d
		}
	}
}

// WithEncoding has the Hub encode each event it reads once, with enc, for
// all its watchers: Item.Frame carries the result. A watcher that replays
// the history encodes the events it replays itself. enc must be safe for
// concurrent use and may not keep the event.
func WithEncoding(enc func(leasecore.Event) []byte) Option {
	return func(h *Hub) { h.enc = enc }
}

// Hub follows one Service's store history for all its watchers.
type Hub struct {
	feed        leasecore.HistoryFeed // the Service's: every call through its interceptors
	feedErr     error                 // why there is no feed
	buffer      int
	changesPoll time.Duration
	linger      time.Duration // Linger; shorter in tests
	enc         func(leasecore.Event) []byte

	life  context.Context    // ended by Close, under mu: every goroutine of the hub and its watchers stops
	close context.CancelFunc // called under mu, so a joiner that finds life alive counts on wg before Close waits
	wg    sync.WaitGroup     // the hub's goroutines and its watchers'

	mu       sync.Mutex
	open     int // watchers, live or catching up
	cut      int64
	ring     []Item        // the recent events, the one of sequence number n at n % len(ring)
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
	rewound *leasecore.PositionAheadError
	stop    context.CancelFunc
	timer   *time.Timer // the linger's
	gen     uint64      // counts starts, so that a stopped generation's reads are dropped
}

// New returns the Hub of svc's store. It reads nothing until the first
// watch. A store that cannot follow its history gives a Hub whose watches
// answer unavailable.
func New(svc *leasecore.Service, opts ...Option) *Hub {
	h := &Hub{buffer: DefaultBuffer, changesPoll: leasecore.DefaultWatchPoll, linger: Linger, wake: make(chan struct{})}
	for _, o := range opts {
		o(h)
	}
	h.ring = make([]Item, h.buffer)
	h.feed, h.feedErr = svc.HistoryFeed()
	h.life, h.close = context.WithCancel(context.Background())
	return h
}

// errHubClosed answers a watch asked of a closed Hub.
var errHubClosed = errors.New("the watch hub is closed")

// Close stops the Hub: it ends its watchers (their Err is then nil, as
// after Watcher.Close), stops following the store, and returns once every
// goroutine of the Hub and its watchers has returned, so the store may be
// closed after it. A watch asked of a closed Hub answers unavailable.
// Close may be called more than once.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	h.running = false
	h.close() // the hub's reads run under a context of life's
	h.mu.Unlock()
	h.wg.Wait()
}

// Stats describes a Hub.
type Stats struct {
	Watchers int   // open watchers, live or catching up
	Position int64 // the hub's position: the last event it read (0 when not following)
	Cut      int64 // watchers cut for falling behind, since the Hub was made
}

// Stats reports the Hub's watchers.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := Stats{Watchers: h.open, Cut: h.cut}
	if h.running {
		st.Position = h.pos
	}
	return st
}

// join counts a new watcher and makes sure the hub runs.
func (h *Hub) join(ctx context.Context) error {
	h.mu.Lock()
	if h.life.Err() != nil {
		h.mu.Unlock()
		return leasecore.Unavailable(leasecore.OpFollowHistory, errHubClosed)
	}
	h.open++
	h.wg.Add(1) // the watcher's: done when it finishes, or leaves unstarted
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	if !h.running && h.starting == nil {
		h.starting = make(chan struct{})
		h.gen++
		h.wg.Add(1)
		go h.start(h.gen)
	}
	starting := h.starting
	h.mu.Unlock()
	if starting != nil {
		select {
		case <-starting:
		case <-ctx.Done():
			h.leave()
			return leasecore.Unavailable(leasecore.OpFollowHistory, ctx.Err())
		case <-h.life.Done():
			h.leave()
			return leasecore.Unavailable(leasecore.OpFollowHistory, errHubClosed)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running {
		err := h.startErr
		h.open--
		h.wg.Done()
		if err == nil {
			err = leasecore.Unavailable(leasecore.OpFollowHistory, errors.New("the watch stopped"))
		}
		return err
	}
	return nil
}

// leave uncounts a watcher that never started.
func (h *Hub) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open--
	h.wg.Done()
	h.lingerLocked()
}

// start opens the hub's cursor at the newest event and runs the hub: its
// reads of the history and its expiry sweep.
func (h *Hub) start(gen uint64) {
	defer h.wg.Done()
	ctx, cancel := context.WithCancel(h.life)
	cur, err := h.feed.FollowHistory(ctx, FromNow)
	h.mu.Lock()
	starting := h.starting
	h.starting = nil
	if err == nil && h.life.Err() != nil {
		_ = cur.Close()
		err = leasecore.Unavailable(leasecore.OpFollowHistory, errHubClosed)
	}
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

	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.sweep(ctx)
	}()
	h.follow(ctx, cur, gen)
}

// finishLocked ends a watcher, once: its items close, and when it was the
// last the hub lingers, then stops. The caller is the watcher's goroutine
// (the only sender on w.items), or Watch before it started one.
func (h *Hub) finishLocked(w *Watcher, err error) {
	if w.closed {
		return
	}
	if errors.Is(err, errClosed) {
		err = nil
	}
	if errors.Is(err, ErrCut) {
		h.cut++
	}
	w.closed, w.err = true, err
	close(w.items)
	h.open--
	h.wg.Done()
	h.lingerLocked()
}

// lingerLocked arms the timer that stops a hub running without watchers
// linger from now, unless one is armed.
func (h *Hub) lingerLocked() {
	if h.open != 0 || !h.running || h.timer != nil {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(h.linger, func() {
		h.mu.Lock() // before reading t, which was set under the lock
		defer h.mu.Unlock()
		h.stopIfIdleLocked(t)
	})
	h.timer = t
}

// stopIfIdleLocked stops the hub if t is still its linger timer (no
// watcher came and went since it was armed) and it still has no watchers.
func (h *Hub) stopIfIdleLocked(t *time.Timer) {
	if h.timer != t || h.open != 0 || !h.running {
		return
	}
	h.timer = nil
	h.running = false
	h.stop()
}
