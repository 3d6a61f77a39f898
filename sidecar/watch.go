package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/watch"
	"github.com/leasehold/leasehold/sidecar/api"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// The watch stream: GET /v1/watch relays a watch.Watcher's items as
// server-sent events on the hijacked connection, as the keepalive stream
// does, so that the server's timeouts do not end it.

// DefaultMaxWatchers caps concurrent watch streams per sidecar.
const DefaultMaxWatchers = 1000

// watchPingInterval spaces the comment lines that reveal a client that is
// gone (and keep proxies from closing an idle stream).
const watchPingInterval = 15 * time.Second

// watchEndGrace bounds how long a stream whose client stopped reading
// (a write did not finish in streamWriteTimeout) is kept open to finish
// the frame it was cut in and send its end event, for a client that reads
// again: whatever it reads then ends with a whole event and `end` (slow).
const watchEndGrace = 10 * time.Second

// watches is the sidecar's book of watch streams: a cap, and a way to end
// them all at shutdown.
type watches struct {
	slots
	closing chan struct{} // closed by shutdown

	mu       sync.Mutex // orders add against shutdown
	shutDown bool
	running  sync.WaitGroup

	// stalled counts the streams ended because their client stopped
	// reading.
	stalled atomic.Int64
}

func newWatches(max int) *watches {
	if max <= 0 {
		max = DefaultMaxWatchers
	}
	return &watches{slots: newSlots(int64(max), auth.Read), closing: make(chan struct{})}
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
	since := int64(watch.FromNow)
	if params.Since != nil {
		since = *params.Since
	}
	if params.LastEventID != nil {
		since = *params.LastEventID
	}
	cred := caller(c)
	if err := h.watches.enter(cred.Name); err != nil {
		return tooMany(err, "Too many watchers", fmt.Sprintf("this sidecar serves at most %d watch streams (--max-watchers)", h.watches.max))
	}
	if !h.watches.add() {
		h.watches.leave(cred.Name)
		return newProblem(http.StatusServiceUnavailable, problemUnavailable, "Shutting down", "this sidecar is shutting down: try another sidecar")
	}
	handedOver := false // to the stream's goroutine, which leaves the book when it ends
	defer func() {
		if !handedOver {
			h.watches.running.Done()
			h.watches.leave(cred.Name)
		}
	}()
	// The watch outlives the request: the connection is the stream's once
	// hijacked, and the stream ends the watch.
	ctx, cancel := context.WithCancel(context.Background())
	wp := watch.Params{Prefix: deref(params.Prefix), Since: since}
	w, err := h.hub.Watch(ctx, wp)
	var ahead *leasecore.PositionAheadError
	if errors.As(err, &ahead) {
		// The position is not in the store's history: the stream says
		// reset, then replays the history the store holds.
		wp.Since = 0
		w, err = h.hub.Watch(ctx, wp)
	}
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
		defer h.watches.leave(cred.Name)
		defer cancel()
		ws := &watchStream{conn: conn, w: w, closing: h.watches.closing,
			hub: h.hub, ctx: ctx, prefix: wp.Prefix, stalled: &h.watches.stalled, cred: cred, grant: grantOf(c)}
		ws.serve(buf.Reader, ahead)
	}()
	return nil
}

// watchStream is one watch stream after the hijack.
type watchStream struct {
	conn    net.Conn
	w       *watch.Watcher // replaced when the stream starts over after a reset
	closing <-chan struct{}
	cred    *auth.Credential // events of tasks it may not read are not sent
	grant   grant            // while the stream runs, its token must keep cred's scope
	out     []byte
	stalled *atomic.Int64

	// What starting over takes: a new watch of the prefix, from 0, that
	// lives as long as the stream (ctx).
	hub    *watch.Hub
	ctx    context.Context
	prefix string
}

// serve writes the stream until the watcher ends, the client hangs up or
// the sidecar shuts down. A reset (the watch's position was ahead of the
// store's history, as asked or as the store went back under it) is sent
// first when ahead is given.
func (ws *watchStream) serve(in *bufio.Reader, ahead *leasecore.PositionAheadError) {
	defer ws.conn.Close()
	defer func() { ws.w.Close() }()
	gone := make(chan struct{})
	go func() {
		// The client sends nothing more; a read that ends means it hung up.
		_, _ = io.Copy(io.Discard, in)
		close(gone)
	}()
	ws.out = append(ws.out[:0], streamHeader...)
	if ahead != nil {
		ws.appendReset(ahead)
	}
	if ws.flush() != nil {
		return
	}
	ping := time.NewTicker(watchPingInterval)
	defer ping.Stop()
	changed := ws.grant.seen // nil with no book: never
	for {
		select {
		case <-changed:
			changed = ws.grant.changed() // before the check: a change during it is seen next
			if now, ok := ws.grant.current(); !ok || !now.Includes(ws.cred) {
				ws.end(api.WatchEndReasonForbidden, ws.cred.Principal()+" was removed, narrowed, revoked or rotated out of the credentials file: "+
					"this stream, opened with its old scope, ended; reconnect with a token of the credentials file")
				return
			}
		case it, ok := <-ws.w.Items():
			if !ok {
				var ahead *leasecore.PositionAheadError
				switch err := ws.w.Err(); {
				case errors.As(err, &ahead):
					// The store's history went back under the watch: tell
					// the client, and start over from its oldest event.
					if !ws.startOver(ahead) {
						return
					}
					continue
				case errors.Is(err, watch.ErrCut):
					ws.end(api.WatchEndReasonSlow, "this watcher fell too far behind the store's events; reconnect with Last-Event-ID set to the last id received")
				case errors.Is(err, leasecore.ErrUnavailable):
					ws.end(api.WatchEndReasonUnavailable, "the store could not be read while replaying the history; reconnect with Last-Event-ID set to the last id received")
				}
				return
			}
			ws.appendItem(it)
			// Send what else is waiting in the same write.
			for more := true; more && len(ws.out) < 32<<10; {
				select {
				case it, ok := <-ws.w.Items():
					if !ok {
						more = false
						break
					}
					ws.appendItem(it)
				default:
					more = false
				}
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

// startOver sends a reset, for a watch whose position is ahead of the
// store's history, and replaces the watch with one from the oldest event
// the history holds; false when the stream ended instead (it could not
// start over, or the client is gone).
func (ws *watchStream) startOver(ahead *leasecore.PositionAheadError) bool {
	ws.w.Close()
	ws.appendReset(ahead)
	w, err := ws.hub.Watch(ws.ctx, watch.Params{Prefix: ws.prefix, Since: 0})
	if err != nil {
		// The reset's id (0) is where the client reconnects from.
		ws.end(api.WatchEndReasonUnavailable, "the store's history went back and could not be read again; reconnect with Last-Event-ID set to the last id received")
		return false
	}
	ws.w = w
	return ws.flush() == nil
}

// appendReset adds a reset event: its id is 0, the position a client that
// is cut off before anything else arrives reconnects from, so that it
// replays the history too.
func (ws *watchStream) appendReset(ahead *leasecore.PositionAheadError) {
	ws.out = append(ws.out, "id: 0\n"...)
	ws.out = append(ws.out, mustEvent("reset", api.WatchReset{
		Position: ahead.Position,
		Newest:   ahead.Newest,
		Detail: fmt.Sprintf("position %d is ahead of the store's history, whose newest event id is %d: the store was restored from an older copy "+
			"or failed over to one without its newest events. Forget the events and leases seen so far; the history the store holds follows "+
			"from its oldest event, then ready", ahead.Position, ahead.Newest),
	})...)
}

// appendItem adds one item of the watch to the pending output, in the
// order the watch delivers them: the ready mark, or a history event as the
// hub encoded it (eventFrame), unless the stream's credential may not read
// its task.
func (ws *watchStream) appendItem(it watch.Item) {
	switch {
	case it.Ready:
		ws.out = append(ws.out, mustEvent("ready", api.WatchReady{Position: it.Position})...)
	case ws.cred != auth.Anonymous && !ws.cred.Allows(auth.Read, it.Event.Task):
	case it.Frame != nil:
		ws.out = append(ws.out, it.Frame...)
	default:
		ws.out = append(ws.out, eventFrame(it.Event)...)
	}
}

// eventFrame is one history event as a watch stream sends it: its id, its
// kind as the event name, and the Event as data. The watch's hub makes it
// once per event for all the sidecar's streams (watch.WithEncoding).
func eventFrame(ev leasecore.Event) []byte {
	b := strconv.AppendInt([]byte("id: "), ev.ID, 10)
	b = append(b, '\n')
	return append(b, mustEvent(string(ev.Kind), api.FromEvent(&ev))...)
}

// end sends the end event; the stream then closes.
func (ws *watchStream) end(reason api.WatchEndReason, detail string) {
	ws.out = append(ws.out, mustEvent("end", api.WatchEnd{Reason: reason, Detail: detail})...)
	_ = ws.flush()
}

// flush writes the pending output whole, or fails. A client that does not
// take it in streamWriteTimeout stopped reading: the stream ends, at a
// frame boundary, with `end` (slow; see endStalled).
func (ws *watchStream) flush() error {
	_ = ws.conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	n, err := ws.conn.Write(ws.out)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		ws.endStalled(n)
	}
	ws.out = ws.out[:0]
	return err
}

// endStalled ends the stream of a client that stopped reading, whose
// pending output was written up to n: nothing more is queued, and the last
// bytes on the wire are made a whole end event. The frame the write was cut
// in is finished, the frames after it are dropped (a reconnection with the
// last id received replays them), and `end` (slow) follows, unless the cut
// frame was an end already. The client has watchEndGrace (less, when the
// sidecar shuts down meanwhile) to read them; one that never reads again
// cannot tell.
func (ws *watchStream) endStalled(n int) {
	ws.stalled.Add(1)
	if n < len(streamHeader) && bytes.HasPrefix(ws.out, []byte(streamHeader)) {
		return // not even the response's header went out: nothing to finish
	}
	start, end := frameAround(ws.out, n)
	tail := slices.Clip(ws.out[n:end])
	if start == end || !bytes.HasPrefix(ws.out[start:], []byte("event: end\n")) {
		tail = append(tail, mustEvent("end", api.WatchEnd{Reason: api.WatchEndReasonSlow,
			Detail: "this watcher stopped reading its stream; reconnect with Last-Event-ID set to the last id received"})...)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ws.closing:
			_ = ws.conn.SetWriteDeadline(time.Now())
		case <-done:
		}
	}()
	_ = ws.conn.SetWriteDeadline(time.Now().Add(watchEndGrace))
	_, _ = ws.conn.Write(tail)
}

// frameAround returns where the frame of out that holds the byte at n
// starts and ends (just past its blank line). Frames end with "\n\n" and
// have no blank line inside (their data is one line of JSON); the response
// header, at the start of a stream's first write, ends with "\r\n\r\n" and
// counts as part of the frame after it. n at a boundary gives the empty
// frame [n, n); n past the end, the end.
func frameAround(out []byte, n int) (start, end int) {
	if n >= len(out) {
		return len(out), len(out)
	}
	if i := bytes.LastIndex(out[:n], []byte("\n\n")); i >= 0 {
		start = i + 2
	}
	if n == start {
		return n, n
	}
	// A cut between the two newlines that end a frame leaves one to send.
	from := max(n-1, start)
	if i := bytes.Index(out[from:], []byte("\n\n")); i >= 0 {
		return start, from + i + 2
	}
	return start, len(out)
}
