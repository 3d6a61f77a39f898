package watch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// feedStore is a HistoryFeed seam for the watch's tests: an in-memory
// history that the test appends to, with a change signal. leasecore.Event i has ID
// i+1, so the high-water mark is the number of events, pruned ones
// included; rewind puts the history back as a restore would. The other
// leasecore.Store methods are not used.
type feedStore struct {
	leasecore.Store
	mu      sync.Mutex
	events  []leasecore.Event
	changes chan struct{}
	sweeps  atomic.Int64
	failing atomic.Bool // FollowHistory and Next fail
	reads   atomic.Int64
	polls   chan time.Duration // each HistoryChanges call's poll, when not nil
	pruned  map[int64]bool     // events deleted: no cursor sees them

	// hooks, when set: onFollow runs in FollowHistory, onCatchUpEmpty
	// when a catch-up cursor (one that was given a position) is about
	// to return no events.
	onFollow       func(after int64)
	onCatchUpEmpty func()

	// blockReads, when set, has Next and RecordExpiries wait for their
	// context to end; inflight counts their calls not yet returned, and
	// calls every call of FollowHistory, Next and RecordExpiries.
	blockReads atomic.Bool
	inflight   atomic.Int64
	calls      atomic.Int64
}

// blocked waits for ctx to end when reads are blocked; the caller has
// counted itself in flight.
func (f *feedStore) blocked(ctx context.Context) error {
	if !f.blockReads.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func newFeedStore() *feedStore { return &feedStore{changes: make(chan struct{}, 1)} }

func (f *feedStore) add(task string, kind leasecore.EventKind) int64 {
	f.mu.Lock()
	id := int64(len(f.events) + 1)
	f.events = append(f.events, leasecore.Event{ID: id, Task: task, Kind: kind, Owner: "o", Token: id, At: time.Unix(id, 0)})
	f.mu.Unlock()
	select {
	case f.changes <- struct{}{}:
	default:
	}
	return id
}

// rewind puts the history back to its first n events, as a restore of a
// copy taken then would: the IDs above n are handed out again.
func (f *feedStore) rewind(n int) {
	f.mu.Lock()
	f.events = f.events[:n]
	f.mu.Unlock()
}

func (f *feedStore) FollowHistory(_ context.Context, after int64) (leasecore.HistoryCursor, error) {
	f.calls.Add(1)
	if f.onFollow != nil {
		f.onFollow(after)
	}
	if f.failing.Load() {
		return nil, errors.New("store down")
	}
	catchUp := after >= 0
	f.mu.Lock()
	defer f.mu.Unlock()
	if newest := int64(len(f.events)); after > newest {
		return nil, &leasecore.PositionAheadError{Position: after, Newest: newest}
	}
	if after < 0 {
		after = int64(len(f.events))
	}
	return &feedCursor{f: f, pos: after, catchUp: catchUp}, nil
}

func (f *feedStore) HistoryChanges(ctx context.Context, poll time.Duration) (<-chan struct{}, error) {
	if f.polls != nil {
		f.polls <- poll
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case <-f.changes:
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}

func (f *feedStore) RecordExpiries(ctx context.Context, _ int) (leasecore.ExpirySweep, error) {
	f.calls.Add(1)
	f.inflight.Add(1)
	defer f.inflight.Add(-1)
	f.sweeps.Add(1)
	return leasecore.ExpirySweep{}, f.blocked(ctx)
}

type feedCursor struct {
	f       *feedStore
	pos     int64
	catchUp bool
}

func (c *feedCursor) Next(ctx context.Context, limit int) ([]leasecore.Event, error) {
	c.f.calls.Add(1)
	c.f.inflight.Add(1)
	defer c.f.inflight.Add(-1)
	if err := c.f.blocked(ctx); err != nil {
		return nil, err
	}
	if c.f.failing.Load() {
		return nil, errors.New("store down")
	}
	c.f.reads.Add(1)
	c.f.mu.Lock()
	if newest := int64(len(c.f.events)); c.pos > newest {
		c.f.mu.Unlock()
		return nil, &leasecore.PositionAheadError{Position: c.pos, Newest: newest}
	}
	var out []leasecore.Event
	for _, ev := range c.f.events[c.pos:] {
		if len(out) == limit {
			break
		}
		if !c.f.pruned[ev.ID] {
			out = append(out, ev)
		}
		c.pos = ev.ID
	}
	hook := c.f.onCatchUpEmpty
	c.f.mu.Unlock()
	if len(out) == 0 && c.catchUp && hook != nil {
		hook()
	}
	return out, nil
}

func (c *feedCursor) Position() int64 { return c.pos }
func (c *feedCursor) Pending() bool   { return false }
func (c *feedCursor) Close() error    { return nil }

// newHub returns the Hub of a Service over f.
func newHub(f *feedStore, opts ...Option) *Hub { return New(leasecore.New(f), opts...) }

// receive reads n events from w, passing over the ready mark, failing on a timeout (a generous bound:
// the test fails rather than waits forever; it asserts no duration).
func receive(t *testing.T, w *Watcher, n int) []leasecore.Event {
	t.Helper()
	var got []leasecore.Event
	deadline := time.After(30 * time.Second)
	for len(got) < n {
		select {
		case it, ok := <-w.Items():
			if !ok {
				t.Fatalf("watch ended after %d of %d events: %v", len(got), n, w.Err())
			}
			if !it.Ready {
				got = append(got, it.Event)
			}
		case <-deadline:
			t.Fatalf("got %d of %d events", len(got), n)
		}
	}
	return got
}

// ended waits (a generous bound: the test fails rather than waits
// forever) for w's events to close and returns those it had left.
func ended(t *testing.T, w *Watcher) []leasecore.Event {
	t.Helper()
	var left []leasecore.Event
	deadline := time.After(30 * time.Second)
	for {
		select {
		case it, ok := <-w.Items():
			if !ok {
				return left
			}
			if !it.Ready {
				left = append(left, it.Event)
			}
		case <-deadline:
			t.Fatalf("the watch did not end (it had %d events left)", len(left))
		}
	}
}

// awaitReady reads w's items up to its ready mark (a generous bound: the
// test fails rather than waits forever) and returns the events before it
// and the mark's position.
func awaitReady(t *testing.T, w *Watcher) ([]leasecore.Event, int64) {
	t.Helper()
	var before []leasecore.Event
	deadline := time.After(30 * time.Second)
	for {
		select {
		case it, ok := <-w.Items():
			if !ok {
				t.Fatalf("watch ended before it was ready, after %d events: %v", len(before), w.Err())
			}
			if it.Ready {
				return before, it.Position
			}
			before = append(before, it.Event)
		case <-deadline:
			t.Fatalf("not ready after %d events", len(before))
		}
	}
}

func checkIDs(t *testing.T, evs []leasecore.Event, first int64) {
	t.Helper()
	for i, ev := range evs {
		if ev.ID != first+int64(i) {
			t.Fatalf("event %d has id %d, want %d (ids must rise by one: none lost, none repeated)", i, ev.ID, first+int64(i))
		}
	}
}

func TestWatchFromNowSkipsOldEvents(t *testing.T) {
	f := newFeedStore()
	f.add("old", leasecore.EventAcquired)
	hub := newHub(f)
	w, err := hub.Watch(t.Context(), Params{Since: FromNow})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	awaitReady(t, w)
	id := f.add("new", leasecore.EventAcquired)
	got := receive(t, w, 1)
	if got[0].ID != id || got[0].Task != "new" {
		t.Fatalf("got %+v, want the new event %d", got[0], id)
	}
}

// TestWatchPoll: the watch asks its store for changes at the poll
// WithPoll sets (leasecore.DefaultWatchPoll without it); with zero it asks for
// no signal at all and still delivers, from its once-a-second read.
func TestWatchPoll(t *testing.T) {
	for _, c := range []struct {
		opts []Option
		want time.Duration // 0: HistoryChanges is not called
	}{
		{nil, leasecore.DefaultWatchPoll},
		{[]Option{WithPoll(-time.Second)}, leasecore.DefaultWatchPoll},
		{[]Option{WithPoll(250 * time.Millisecond)}, 250 * time.Millisecond},
		{[]Option{WithPoll(0)}, 0},
	} {
		f := newFeedStore()
		f.polls = make(chan time.Duration, 1)
		hub := newHub(f, c.opts...)
		w, err := hub.Watch(t.Context(), Params{Since: FromNow})
		if err != nil {
			t.Fatal(err)
		}
		awaitReady(t, w)
		id := f.add("t", leasecore.EventAcquired)
		if got := receive(t, w, 1); got[0].ID != id {
			t.Fatalf("poll %v: got %+v, want event %d", c.want, got[0], id)
		}
		// The hub asks for the signal before its first read, and the event
		// came after that: any call has been made by now.
		select {
		case poll := <-f.polls:
			if c.want == 0 || poll != c.want {
				t.Errorf("HistoryChanges asked to poll every %v, want %v (0: not asked)", poll, c.want)
			}
		default:
			if c.want != 0 {
				t.Errorf("HistoryChanges was not asked, want a poll every %v", c.want)
			}
		}
		w.Close()
	}
}

// TestWatchCatchUpHandOver: watchers that start from a position while
// events keep coming each get every event exactly once, in order, whether
// they join during the catch-up or after.
func TestWatchCatchUpHandOver(t *testing.T) {
	f := newFeedStore()
	for range 300 {
		f.add("t", leasecore.EventAcquired)
	}
	hub := newHub(f)
	ctx := t.Context()
	// A first watcher starts the hub.
	w0, err := hub.Watch(ctx, Params{Since: FromNow})
	if err != nil {
		t.Fatal(err)
	}
	defer w0.Close()
	const total = 3000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 300; i < total; i++ {
			f.add(fmt.Sprintf("t%d", i%7), leasecore.EventReleased)
		}
	}()
	var watchers []*Watcher
	for _, after := range []int64{0, 1, 150, 299, 300} {
		w, err := hub.Watch(ctx, Params{Since: after})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		watchers = append(watchers, w)
	}
	wg.Wait()
	for i, after := range []int64{0, 1, 150, 299, 300} {
		got := receive(t, watchers[i], int(total-after))
		checkIDs(t, got, after+1)
	}
}

func TestWatchPrefix(t *testing.T) {
	f := newFeedStore()
	f.add("jobs/a", leasecore.EventAcquired)
	f.add("other", leasecore.EventAcquired)
	f.add("jobs/b", leasecore.EventAcquired)
	hub := newHub(f)
	w, err := hub.Watch(t.Context(), Params{Prefix: "jobs/", Since: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f.add("other", leasecore.EventReleased)
	f.add("jobs/a", leasecore.EventReleased)
	got := receive(t, w, 3)
	for i, want := range []int64{1, 3, 5} {
		if got[i].ID != want {
			t.Fatalf("event %d: id %d, want %d (%+v)", i, got[i].ID, want, got)
		}
	}
	if err := (Params{Prefix: "bad prefix"}).Validate(); err == nil {
		t.Fatal("a prefix with a space was accepted")
	}
}

// TestWatchSlowWatcherIsCut: a watcher that stops reading is cut once the
// ring has gone round past what it read; the others go on receiving, and
// what it holds meanwhile is bounded.
func TestWatchSlowWatcherIsCut(t *testing.T) {
	f := newFeedStore()
	hub := newHub(f, withBuffer(8))
	slow, err := hub.Watch(t.Context(), Params{Since: FromNow})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := hub.Watch(t.Context(), Params{Since: FromNow})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	for range 60 {
		f.add("t", leasecore.EventAcquired)
		receive(t, fast, 1)
	}
	// slow never read: its events end, with ErrCut, after at most
	// what waits on its channel and the batch it took from the ring.
	n := 0
	for range slow.Items() {
		n++
	}
	if !errors.Is(slow.Err(), ErrCut) {
		t.Fatalf("slow watcher ended with %v after %d events, want ErrCut", slow.Err(), n)
	}
	if n > watchQueue+watchBatch {
		t.Fatalf("slow watcher was sent %d items, more than its queue and one batch (%d)", n, watchQueue+watchBatch)
	}
	if st := hub.Stats(); st.Cut != 1 || st.Watchers != 1 {
		t.Fatalf("stats %+v, want 1 cut and 1 watcher left", st)
	}
}

// TestWatchBurstCutsNobody: a burst of events, many more than one read of
// the history returns, reaches watchers that keep reading, all of it.
func TestWatchBurstCutsNobody(t *testing.T) {
	f := newFeedStore()
	hub := newHub(f)
	var ws []*Watcher
	for range 3 {
		w, err := hub.Watch(t.Context(), Params{Since: FromNow})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}
	const burst = 3000
	f.mu.Lock()
	for i := range burst {
		id := int64(len(f.events) + 1)
		f.events = append(f.events, leasecore.Event{ID: id, Task: fmt.Sprintf("t%d", i%5), Kind: leasecore.EventAcquired, Owner: "o", Token: id})
	}
	f.mu.Unlock()
	f.changes <- struct{}{}
	for _, w := range ws {
		checkIDs(t, receive(t, w, burst), 1)
	}
	if st := hub.Stats(); st.Cut != 0 {
		t.Fatalf("a burst cut %d watchers", st.Cut)
	}
}

// TestWatchOneReaderForManyWatchers: the store is read by the hub, not by
// each watcher.
func TestWatchOneReaderForManyWatchers(t *testing.T) {
	f := newFeedStore()
	hub := newHub(f)
	var ws []*Watcher
	for range 50 {
		w, err := hub.Watch(t.Context(), Params{Since: FromNow})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}
	before := f.reads.Load()
	f.add("t", leasecore.EventAcquired)
	for _, w := range ws {
		receive(t, w, 1)
	}
	if reads := f.reads.Load() - before; reads > 5 {
		t.Fatalf("one event for 50 watchers took %d reads of the store", reads)
	}
	if f.sweeps.Load() == 0 {
		t.Fatal("the hub never swept for expiries")
	}
}

func TestWatchUnavailableStore(t *testing.T) {
	f := newFeedStore()
	f.failing.Store(true)
	hub := newHub(f)
	if _, err := hub.Watch(t.Context(), Params{Since: FromNow}); !errors.Is(err, leasecore.ErrUnavailable) {
		t.Fatalf("watch on a failing store: %v, want leasecore.ErrUnavailable", err)
	}
	if st := hub.Stats(); st.Watchers != 0 {
		t.Fatalf("a failed watch is still counted: %+v", st)
	}
	// Once the store is back, the watch works.
	f.failing.Store(false)
	w, err := hub.Watch(t.Context(), Params{Since: FromNow})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f.add("t", leasecore.EventAcquired)
	receive(t, w, 1)
}

func TestWatchEndsWithContext(t *testing.T) {
	f := newFeedStore()
	hub := newHub(f)
	ctx, cancel := context.WithCancel(t.Context())
	w, err := hub.Watch(ctx, Params{Since: FromNow})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for range w.Items() {
	}
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", w.Err())
	}
	if st := hub.Stats(); st.Watchers != 0 {
		t.Fatalf("stats %+v after the watch ended", st)
	}
}

// TestWatchHubClose: Close ends every watcher, live or catching up (their
// Err nil, as after their own Close), and returns only once no call of the
// hub's is left in its store, so that the store may be closed after it; a
// watch asked afterwards answers unavailable.
func TestWatchHubClose(t *testing.T) {
	f := newFeedStore()
	for range 3 * watchQueue {
		f.add("old", leasecore.EventAcquired)
	}
	hub := newHub(f)
	live, err := hub.Watch(t.Context(), Params{Since: FromNow})
	if err != nil {
		t.Fatal(err)
	}
	awaitReady(t, live)
	// Never read: it stops in the middle of its catch-up, its queue full.
	stuck, err := hub.Watch(t.Context(), Params{Since: 0})
	if err != nil {
		t.Fatal(err)
	}
	f.blockReads.Store(true)
	f.add("new", leasecore.EventAcquired) // the hub's next read stays in the store
	for deadline := time.Now().Add(30 * time.Second); f.inflight.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the hub never read the store")
		}
	}
	closed := make(chan struct{})
	go func() { hub.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second): // a generous bound: fail rather than hang
		t.Fatal("Close did not return: a watcher or a read of the hub's did not end")
	}
	if n := f.inflight.Load(); n != 0 {
		t.Fatalf("Close returned with %d of the hub's calls still in its store", n)
	}
	calls := f.calls.Load()
	for name, w := range map[string]*Watcher{"live": live, "catching up": stuck} {
		ended(t, w)
		if err := w.Err(); err != nil {
			t.Errorf("%s watcher ended with %v, want nil after the hub's Close", name, err)
		}
	}
	if st := hub.Stats(); st.Watchers != 0 {
		t.Fatalf("stats %+v after Close", st)
	}
	if _, err := hub.Watch(t.Context(), Params{Since: FromNow}); !errors.Is(err, leasecore.ErrUnavailable) {
		t.Fatalf("watch of a closed hub: %v, want leasecore.ErrUnavailable", err)
	}
	hub.Close() // a second Close is harmless
	if n := f.calls.Load() - calls; n != 0 {
		t.Fatalf("the hub called its store %d times after Close returned", n)
	}
}

// TestWatchHandOverAfterPrunedHistory: a watcher catching up over history
// that was pruned joins the hub at the position the hub had before its
// read, not after: events the hub read meanwhile still reach it.
func TestWatchHandOverAfterPrunedHistory(t *testing.T) {
	f := newFeedStore()
	for range 10 {
		f.add("t", leasecore.EventAcquired)
	}
	hub := newHub(f)
	w0, err := hub.Watch(t.Context(), Params{Since: FromNow}) // the hub, at 10
	if err != nil {
		t.Fatal(err)
	}
	defer w0.Close()
	f.mu.Lock()
	f.pruned = map[int64]bool{}
	for id := int64(1); id <= 10; id++ {
		f.pruned[id] = true
	}
	var once sync.Once
	f.onCatchUpEmpty = func() {
		// While the catch-up read finds nothing, the hub reads 11..13.
		once.Do(func() {
			for range 3 {
				f.add("t", leasecore.EventReleased)
			}
			for hub.Stats().Position < 13 {
				time.Sleep(time.Millisecond)
			}
		})
	}
	f.mu.Unlock()
	w, err := hub.Watch(t.Context(), Params{Since: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	checkIDs(t, receive(t, w, 3), 11)
}

// TestWatchHubStopsWhenItsWatcherGaveUpStarting: a watch whose context
// ends while the hub is starting leaves no hub running for nobody.
func TestWatchHubStopsWhenItsWatcherGaveUpStarting(t *testing.T) {
	f := newFeedStore()
	release := make(chan struct{})
	f.onFollow = func(int64) { <-release }
	hub := newHub(f)
	hub.linger = time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		_, err := hub.Watch(ctx, Params{Since: FromNow})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, leasecore.ErrUnavailable) {
		t.Fatalf("watch given up while starting: %v, want unavailable", err)
	}
	close(release) // the hub's start finishes now, with no watcher
	deadline := time.Now().Add(30 * time.Second)
	for {
		h := hub
		h.mu.Lock()
		running, starting := h.running, h.starting != nil
		h.mu.Unlock()
		if !running && !starting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hub still runs with no watcher")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWatchPositionAhead: a position above every event ID the store has
// handed out is refused, whether or not it is above the hub's position,
// rather than answered with a watch that waits for nothing; the newest
// position itself is accepted, pruned or not.
func TestWatchPositionAhead(t *testing.T) {
	f := newFeedStore()
	for range 3 {
		f.add("t", leasecore.EventAcquired)
	}
	f.mu.Lock()
	f.pruned = map[int64]bool{3: true} // the newest event is pruned; its ID stays handed out
	f.mu.Unlock()
	hub := newHub(f)
	for _, since := range []int64{4, 1000} {
		w, err := hub.Watch(t.Context(), Params{Since: since})
		var ahead *leasecore.PositionAheadError
		if !errors.As(err, &ahead) || !errors.Is(err, leasecore.ErrPositionAhead) {
			if w != nil {
				w.Close()
			}
			t.Fatalf("watch since %d on a history whose newest id is 3: %v, want a *leasecore.PositionAheadError", since, err)
		}
		if ahead.Position != since || ahead.Newest != 3 {
			t.Fatalf("since %d: %+v, want position %d and newest 3", since, ahead, since)
		}
		if errors.Is(err, leasecore.ErrUnavailable) {
			t.Fatalf("a position ahead is reported as unavailable: %v", err)
		}
	}
	w, err := hub.Watch(t.Context(), Params{Since: 3})
	if err != nil {
		t.Fatalf("watch since the newest id: %v", err)
	}
	defer w.Close()
	awaitReady(t, w)
	id := f.add("t", leasecore.EventReleased)
	if got := receive(t, w, 1); got[0].ID != id {
		t.Fatalf("got %+v, want event %d", got[0], id)
	}
	if st := hub.Stats(); st.Watchers != 1 {
		t.Fatalf("refused watches are still counted: %+v", st)
	}
}

// TestWatchHubFollowsRewoundHistory: when the store's history goes back
// under a running hub (a restore), every watcher ends with
// leasecore.ErrPositionAhead, live or catching up, and a watch that starts over from
// 0 gets the restored history and every event written after the restore,
// IDs handed out again included, and then the new events live.
func TestWatchHubFollowsRewoundHistory(t *testing.T) {
	f := newFeedStore()
	for range 10 {
		f.add("t", leasecore.EventAcquired)
	}
	hub := newHub(f)
	live, err := hub.Watch(t.Context(), Params{Since: FromNow})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	awaitReady(t, live)
	prefixed, err := hub.Watch(t.Context(), Params{Prefix: "none/", Since: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer prefixed.Close()

	f.rewind(4)
	f.add("after", leasecore.EventAcquired) // id 5, handed out a second time
	f.add("after", leasecore.EventReleased) // id 6
	for _, w := range []*Watcher{live, prefixed} {
		if evs := ended(t, w); len(evs) > 0 {
			t.Fatalf("events %+v after the history went back", evs)
		}
		var ahead *leasecore.PositionAheadError
		if !errors.As(w.Err(), &ahead) || ahead.Position != 10 || ahead.Newest < 4 {
			t.Fatalf("watcher ended with %v, want a *leasecore.PositionAheadError from position 10", w.Err())
		}
	}

	again, err := hub.Watch(t.Context(), Params{Since: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	got, _ := awaitReady(t, again)
	if len(got) != 6 {
		t.Fatalf("replay after the restore: %+v, want 6 events", got)
	}
	checkIDs(t, got, 1)
	if got[4].Task != "after" || got[5].Kind != leasecore.EventReleased {
		t.Fatalf("replay after the restore: %+v, want the events written after it last", got)
	}
	id := f.add("later", leasecore.EventAcquired)
	if ev := receive(t, again, 1)[0]; ev.ID != id || ev.Task != "later" {
		t.Fatalf("live after the restore: %+v, want event %d of later", ev, id)
	}
	if pos := hub.Stats().Position; pos > 7 {
		t.Fatalf("hub position %d, want it to follow the restored history (7)", pos)
	}
}

// TestWatchReadyInBand: a watch that replays the history while new events
// keep coming delivers its ready mark once, after every replayed event
// (those up to its position, every one of them) and before every new one,
// whatever pace its reader takes.
func TestWatchReadyInBand(t *testing.T) {
	f := newFeedStore()
	for range 300 {
		f.add("t", leasecore.EventAcquired)
	}
	hub := newHub(f)
	ctx := t.Context()
	live, err := hub.Watch(ctx, Params{Since: FromNow}) // starts the hub
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	awaitReady(t, live)
	w, err := hub.Watch(ctx, Params{Since: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const total = 1000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range total - 300 {
			f.add("t", leasecore.EventReleased)
		}
	}()
	before, pos := awaitReady(t, w)
	if pos < 300 || int64(len(before)) != pos {
		t.Fatalf("ready at %d after %d events, want at 300 or later, after every event up to it", pos, len(before))
	}
	checkIDs(t, before, 1)
	wg.Wait()
	var after []leasecore.Event
	for int64(len(after)) < total-pos {
		it := <-w.Items()
		if it.Ready {
			t.Fatalf("a second ready mark, after %d events", len(before)+len(after))
		}
		after = append(after, it.Event)
	}
	checkIDs(t, after, pos+1)
}

// TestWatchEncodingOncePerEvent: with an encoding, the hub encodes each
// event it reads once, however many live watchers read it, and every
// watcher's item carries that frame; a watcher replaying the history gets
// frames too.
func TestWatchEncodingOncePerEvent(t *testing.T) {
	f := newFeedStore()
	f.add("old", leasecore.EventAcquired)
	var calls atomic.Int64
	hub := newHub(f, WithEncoding(func(ev leasecore.Event) []byte {
		calls.Add(1)
		return []byte(fmt.Sprintf("frame %d", ev.ID))
	}))
	var live []*Watcher
	for range 3 {
		w, err := hub.Watch(t.Context(), Params{Since: FromNow})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		awaitReady(t, w)
		live = append(live, w)
	}
	const n = 20
	for range n {
		f.add("t", leasecore.EventReleased)
	}
	for _, w := range live {
		for got := 0; got < n; {
			it := <-w.Items()
			if want := fmt.Sprintf("frame %d", it.Event.ID); string(it.Frame) != want {
				t.Fatalf("item %+v carries frame %q, want %q", it.Event, it.Frame, want)
			}
			got++
		}
	}
	if c := calls.Load(); c != n {
		t.Fatalf("%d encodings for %d events read by 3 watchers, want one each", c, n)
	}
	replay, err := hub.Watch(t.Context(), Params{Since: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Close()
	for id := int64(1); id <= n+1; id++ {
		it := <-replay.Items()
		if it.Event.ID != id || string(it.Frame) != fmt.Sprintf("frame %d", id) {
			t.Fatalf("replayed item %+v with frame %q, want event %d with its frame", it.Event, it.Frame, id)
		}
	}
}
