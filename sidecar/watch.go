package sidecar

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// The watch stream: GET /v1/watch relays a leasecore.Watcher's events as
// server-sent events on the hijacked connection, as the keepalive stream
// does, so that the server's timeouts do not end it.

// DefaultMaxWatchers caps concurrent watch streams per sidecar.
const DefaultMaxWatchers = 1000

// watchPingInterval spaces the comment lines that reveal a client that is
// gone (and keep proxies from closing an idle stream).
const watchPingInterval = 15 * time.Second

// watches is the sidecar's book of watch streams: a cap, and a way to end
// them all at shutdown.
type watches struct {
	frames watchFrames
	slots
	closing chan struct{} // closed by shutdown

	mu       sync.Mutex // orders add against shutdown
	shutDown bool
	running  sync.WaitGroup
}

func newWatches(max int) *watches {
	if max <= 0 {
		max = DefaultMaxWatchers
	}
	return &watches{slots: slots{max: int64(max)}, closing: make(chan struct{})}
}

// add books a stream about to start, so that shutdown waits for it; false
// once shutdown has begun. The stream calls running.Done when it ends.
func (ws *watches) add() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.shutDown {
		return false
	}
	ws.running.Add(1)
	return true
}

// shutdown tells every watch stream to send its `end` event and close, and
// waits for them until ctx ends.
func (ws *watches) shutdown(ctx context.Context) error {
	ws.mu.Lock()
	if !ws.shutDown {
		ws.shutDown = true
		close(ws.closing)
	}
	ws.mu.Unlock()
	done := make(chan struct{})
	go func() { ws.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("watch streams still ending: %w", ctx.Err())
	}
}

// WatchLeases answers GET /v1/watch.
func (h *handlers) WatchLeases(c echo.Context, params api.WatchLeasesParams) error {
	since := int64(leasecore.WatchFromNow)
	if params.Since != nil {
		since = *params.Since
	}
	if params.LastEventID != nil {
		since = *params.LastEventID
	}
	if !h.watches.enter() {
		return newProblem(http.StatusServiceUnavailable, problemUnavailable, "Too many watchers",
			fmt.Sprintf("this sidecar already serves %d watch streams (--max-watchers); try another sidecar or later", h.watches.max))
	}
	if !h.watches.add() {
		h.watches.leave()
		return newProblem(http.StatusServiceUnavailable, problemUnavailable, "Shutting down", "this sidecar is shutting down: try another sidecar")
	}
	handedOver := false // to the stream's goroutine, which leaves the book when it ends
	defer func() {
		if !handedOver {
			h.watches.running.Done()
			h.watches.leave()
		}
	}()
	// The watch outlives the request: the connection is the stream's once
	// hijacked, and the stream ends the watch.
	ctx, cancel := context.WithCancel(context.Background())
	w, err := h.svc.Watch(ctx, leasecore.WatchParams{Prefix: deref(params.Prefix), Since: since})
	if err != nil {
		cancel()
		return err
	}
	conn, buf, err := c.Response().Hijack()
	if err != nil {
		cancel()
		w.Close()
		return fmt.Errorf("watch: take over the connection: %w", err)
	}
	c.Response().Status = http.StatusOK // for the request metrics; the stream writes its own
	handedOver = true
	go func() {
		defer h.watches.running.Done()
		defer h.watches.leave()
		defer cancel()
		ws := &watchStream{conn: conn, w: w, closing: h.watches.closing, frames: &h.watches.frames, cred: caller(c)}
		ws.serve(buf.Reader)
	}()
	return nil
}

// watchStream is one watch stream after the hijack.
type watchStream struct {
	conn    net.Conn
	w       *leasecore.Watcher
	closing <-chan struct{}
	frames  *watchFrames
	cred    *auth.Credential // events of tasks it may not read are not sent
	out     []byte
}

// serve writes the stream until the watcher ends, the client hangs up or
// the sidecar shuts down.
func (ws *watchStream) serve(in *bufio.Reader) {
	defer ws.conn.Close()
	defer ws.w.Close()
	gone := make(chan struct{})
	go func() {
		// The client sends nothing more; a read that ends means it hung up.
		_, _ = io.Copy(io.Discard, in)
		close(gone)
	}()
	ws.out = append(ws.out[:0], streamHeader...)
	if ws.flush() != nil {
		return
	}
	ping := time.NewTicker(watchPingInterval)
	defer ping.Stop()
	ready := ws.w.Ready()
	for {
		select {
		case ev, ok := <-ws.w.Events():
			if !ok {
				switch err := ws.w.Err(); {
				case errors.Is(err, leasecore.ErrWatchCut):
					ws.end(api.WatchEndReasonSlow, "this watcher fell too far behind the store's events; reconnect with Last-Event-ID set to the last id received")
				case errors.Is(err, leasecore.ErrUnavailable):
					ws.end(api.WatchEndReasonUnavailable, "the store could not be read while replaying the history; reconnect with Last-Event-ID set to the last id received")
				}
				return
			}
			ws.appendEvent(ev)
			// Send what else is waiting in the same write.
			for more := true; more && len(ws.out) < 32<<10; {
				select {
				case ev, ok := <-ws.w.Events():
					if !ok {
						more = false
						break
					}
					ws.appendEvent(ev)
				default:
					more = false
				}
			}
			if ws.flush() != nil {
				return
			}
		case <-ready:
			// The replayed events are all queued by now: write them, then
			// ready, then whatever new ones were queued behind them.
			ready = nil
			pos := ws.w.ReadyPosition()
			var after []leasecore.Event
			for n := len(ws.w.Events()); n > 0; n-- {
				ev, ok := <-ws.w.Events()
				if !ok {
					break
				}
				if ev.ID <= pos {
					ws.appendEvent(ev)
				} else {
					after = append(after, ev)
				}
			}
			ws.out = append(ws.out, mustEvent("ready", api.WatchReady{Position: pos})...)
			for _, ev := range after {
				ws.appendEvent(ev)
			}
			if ws.flush() != nil {
				return
			}
		case <-ping.C:
			ws.out = append(ws.out, pingComment...)
			if ws.flush() != nil {
				return
			}
		case <-ws.closing:
			ws.end(api.WatchEndReasonShutdown, "this sidecar is shutting down; reconnect to another with Last-Event-ID set to the last id received")
			return
		case <-gone:
			return
		}
	}
}

// appendEvent adds one history event to the pending output: its id, its
// kind as the event name, and the Event as data.
func (ws *watchStream) appendEvent(ev leasecore.Event) {
	if ws.cred != auth.Anonymous && !ws.cred.Allows(auth.Read, ev.Task) {
		return
	}
	ws.out = append(ws.out, ws.frames.frame(ev)...)
}

// watchFrames encodes each history event once for all the sidecar's watch
// streams, which all send the same events: a stream takes an event's frame
// from a small ring, indexed by id, and encodes it itself only when the
// slot holds another event (the first stream to send it, or a stream
// replaying old events). Frames are never changed once stored.
type watchFrames struct {
	slots [watchFrameSlots]atomic.Pointer[watchFrame]
}

// watchFrameSlots is the ring's size: more than the events the streams
// that are live send between them at a time.
const watchFrameSlots = 4096

type watchFrame struct {
	id    int64
	bytes []byte
}

func (f *watchFrames) frame(ev leasecore.Event) []byte {
	slot := &f.slots[uint64(ev.ID)%watchFrameSlots]
	if fr := slot.Load(); fr != nil && fr.id == ev.ID {
		return fr.bytes
	}
	b := strconv.AppendInt([]byte("id: "), ev.ID, 10)
	b = append(b, '\n')
	b = append(b, mustEvent(string(ev.Kind), api.FromEvent(&ev))...)
	slot.Store(&watchFrame{id: ev.ID, bytes: b})
	return b
}

// end sends the end event; the stream then closes.
func (ws *watchStream) end(reason api.WatchEndReason, detail string) {
	ws.out = append(ws.out, mustEvent("end", api.WatchEnd{Reason: reason, Detail: detail})...)
	_ = ws.flush()
}

// flush writes the pending output whole, or fails: a client that cannot
// take it in streamWriteTimeout is treated as gone.
func (ws *watchStream) flush() error {
	_ = ws.conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	_, err := ws.conn.Write(ws.out)
	ws.out = ws.out[:0]
	return err
}
