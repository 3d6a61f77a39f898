package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/sse"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// FromNow, as WatchParams.Since, starts a watch at the events that come
// after it connects.
const FromNow = -1

// The bounds of one connection of a watch: an established stream may be
// quiet, but never silent.
const (
	// DefaultWatchAnswerTimeout bounds connecting and waiting for the
	// answer's header: the sidecar answers a watch once it knows where the
	// watch starts, a store operation or two.
	DefaultWatchAnswerTimeout = DefaultTimeout
	// DefaultWatchIdleTimeout is how long a stream may say nothing at all,
	// not even a ping (the sidecar sends one every 15 s), before it is taken
	// for dead.
	DefaultWatchIdleTimeout = 45 * time.Second
)

// The pauses between two connections of a watch.
const (
	watchRetryFirst = 100 * time.Millisecond
	watchRetryMax   = 5 * time.Second
)

// WatchParams choose what a watch follows.
type WatchParams struct {
	// Prefix limits the watch to tasks whose names start with it.
	Prefix string
	// Since is the last event already seen: the watch replays the
	// history's events after it, then follows. 0 replays the whole history;
	// FromNow starts with the events to come.
	Since int64
	// AnswerTimeout and IdleTimeout bound each connection; zero means
	// DefaultWatchAnswerTimeout and DefaultWatchIdleTimeout.
	AnswerTimeout, IdleTimeout time.Duration
}

// WatchHandler receives what a watch sees. Every field may be nil.
type WatchHandler struct {
	// Event gets each history event once, in order, across reconnections;
	// an error from it ends the watch with that error.
	Event func(leasecore.Event) error
	// Ready is told the position once the watch has replayed the history
	// it asked for (in the stream, in order with the events).
	Ready func(position int64)
	// Reset is told when the watch's position was ahead of the store's
	// history (restored from an older copy, or failed over): the watch
	// starts over from the oldest event the history holds, and is ready
	// again once it has replayed it.
	Reset func(position, newest int64)
	// Reconnect is told why a stream ended and how long the watch waits
	// before connecting again.
	Reconnect func(err error, wait time.Duration)
}

// watchEvents are the event names of a watch stream that carry a history
// event.
var watchEvents = map[string]bool{"acquired": true, "released": true, "expired": true, "taken_over": true, "lost": true}

// errStreamEnded: the sidecar ended the watch stream (an end event, or the
// end of the response).
var errStreamEnded = errors.New("the sidecar ended the watch stream")

// Watch follows the history of the sidecar's store (GET /v1/watch) until
// ctx ends (it then returns nil) or the watch fails. Whenever a stream
// ends it connects again, from the last event seen (Last-Event-ID), after
// a pause that grows while connections keep failing. Until a stream has
// shown itself to be a sidecar's watch (an event of the watch's own), any
// failure ends it: an address that is not a sidecar's is not retried, and
// is unavailable wrapping a *NotSidecarError. A refusal (401, 403, 422) ends
// it as the table says.
func (c *Client) Watch(ctx context.Context, p WatchParams, h WatchHandler) error {
	pos := p.Since // the last event seen, or where the sidecar said it was ready; FromNow: none yet
	retry := backoff.New(watchRetryFirst, watchRetryMax)
	for proven := false; ; {
		err := c.watchOnce(ctx, &p, &pos, &proven, &h)
		if ctx.Err() != nil {
			return nil
		}
		var he *handlerError
		if errors.As(err, &he) {
			return he.err
		}
		if !proven || !retryable(err) {
			return err // never a watch stream, or refused: asking again will not help
		}
		if errors.Is(err, errStreamEnded) {
			retry = backoff.New(watchRetryFirst, watchRetryMax) // a clean end: reconnect soon
		}
		wait := retry.Next()
		if err != nil && h.Reconnect != nil {
			h.Reconnect(err, wait)
		}
		if backoff.Sleep(ctx, wait) != nil {
			return nil
		}
	}
}

// retryable says whether a watch that failed with err may connect again:
// the stream ended, or the sidecar or its store was unavailable.
func retryable(err error) bool {
	var ns *NotSidecarError
	var pe *ProblemError
	switch {
	case errors.Is(err, errStreamEnded):
		return true
	case errors.As(err, &ns):
		return false
	case errors.As(err, &pe):
		return pe.Status == http.StatusServiceUnavailable
	default:
		return errors.Is(err, leasecore.ErrUnavailable)
	}
}

// handlerError is the error of the watch's Event handler, returned as is.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// notAWatch is the error of a stream that is no sidecar's watch.
func (c *Client) notAWatch(status int, format string, a ...any) error {
	return leasecore.Unavailable("watch", &NotSidecarError{Addr: c.name, Method: http.MethodGet, Path: "/v1/watch", Status: status, Reason: c.scrub(fmt.Sprintf(format, a...))})
}

// watchOnce reads one watch stream until it ends. proven is set once the
// stream sent an event of the watch's own (ready, reset, end, or a history
// event), which a server other than a sidecar would not.
func (c *Client) watchOnce(ctx context.Context, p *WatchParams, pos *int64, proven *bool, h *WatchHandler) error {
	q := url.Values{}
	if p.Prefix != "" {
		q.Set("prefix", p.Prefix)
	}
	if *pos >= 0 && !*proven {
		q.Set("since", strconv.FormatInt(*pos, 10))
	}
	path := "/v1/watch"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.ep.URL(path), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *pos >= 0 && *proven {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*pos, 10))
	}
	c.authorize(req)
	answerIn := cmp.Or(p.AnswerTimeout, DefaultWatchAnswerTimeout)
	var late atomic.Bool
	answer := time.AfterFunc(answerIn, func() { late.Store(true); cancel() })
	resp, err := c.http.Do(req)
	answer.Stop()
	if err != nil {
		if late.Load() {
			return leasecore.Unavailable("watch", fmt.Errorf("sidecar %s did not answer the watch request within %s", c.name, answerIn))
		}
		return c.unreachable("watch", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBytes))
		x := &exchange{method: http.MethodGet, template: "/v1/watch", path: path, status: resp.StatusCode, header: resp.Header, body: data}
		if err := checkAnswer(x.method, x.template, x.status, x.header, x.body); err != nil {
			return c.notSidecar("watch", x, err)
		}
		return c.refusal("watch", "", x)
	}
	ct := resp.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "text/event-stream" {
		if ct == "" {
			ct = "no Content-Type"
		}
		return c.notAWatch(resp.StatusCode, "GET /v1/watch answered 200 with %s, not text/event-stream", ct)
	}
	body := newIdleReader(resp.Body, cmp.Or(p.IdleTimeout, DefaultWatchIdleTimeout), cancel)
	defer body.stop()
	r := sse.NewReader(body)
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return errStreamEnded
		}
		if err != nil {
			if body.fired.Load() {
				return leasecore.Unavailable("watch", fmt.Errorf("the watch stream of %s said nothing for %s (the sidecar pings every 15 s): taking it for dead", c.name, body.idle))
			}
			return leasecore.Unavailable("watch", fmt.Errorf("reading the watch stream: %w", err))
		}
		switch {
		case ev.Name == "ready":
			var d api.WatchReady
			if err := decodeEvent("WatchReady", ev.Data, &d); err != nil {
				return c.notAWatch(0, "a ready event whose data is not a position: %.200q", ev.Data)
			}
			*proven = true
			*pos = max(*pos, d.Position)
			if h.Ready != nil {
				h.Ready(d.Position)
			}
		case ev.Name == "reset":
			var d api.WatchReset
			if err := decodeEvent("WatchReset", ev.Data, &d); err != nil {
				return c.notAWatch(0, "a reset event whose data is not a position and the store's newest id: %.200q", ev.Data)
			}
			*proven = true
			// The history the stream replays next is the store's now:
			// every event of it is new to this watch.
			*pos = 0
			if h.Reset != nil {
				h.Reset(d.Position, d.Newest)
			}
		case ev.Name == "end":
			var d api.WatchEnd
			if err := decodeEvent("WatchEnd", ev.Data, &d); err != nil {
				return c.notAWatch(0, "an end event without a reason: %.200q", ev.Data)
			}
			*proven = true
			return fmt.Errorf("%w (%s: %s)", errStreamEnded, c.scrub(string(d.Reason)), c.scrub(d.Detail))
		case watchEvents[ev.Name]:
			var a api.Event
			err := json.Unmarshal([]byte(ev.Data), &a)
			var e leasecore.Event
			if err == nil && string(a.Kind) == ev.Name && ev.ID == strconv.FormatInt(a.Id, 10) {
				e, err = api.ToEvent(&a)
			} else if err == nil {
				err = errors.New("mismatch")
			}
			if err != nil {
				return c.notAWatch(0, "a %s event (id %q) whose data is not that event: %.200q", ev.Name, ev.ID, ev.Data)
			}
			*proven = true
			if e.ID <= *pos {
				continue // seen before a reconnection
			}
			if h.Event != nil {
				if err := h.Event(e); err != nil {
					return &handlerError{err}
				}
			}
			*pos = e.ID
		case !*proven:
			return c.notAWatch(0, "an event %q, which a watch stream does not send", ev.Name)
		default:
			// An event of a newer sidecar's: ignored, as the format says.
		}
	}
}

// decodeEvent decodes an event's data into out once it is the API's schema.
func decodeEvent(schema, data string, out any) error {
	if err := checkSchema(schema, []byte(data)); err != nil {
		return err
	}
	return json.Unmarshal([]byte(data), out)
}

// idleReader reads a stream, cancelling it (through cancel) when a read
// has brought nothing for idle.
type idleReader struct {
	r     io.Reader
	idle  time.Duration
	timer *time.Timer
	fired atomic.Bool
}

func newIdleReader(r io.Reader, idle time.Duration, cancel context.CancelFunc) *idleReader {
	ir := &idleReader{r: r, idle: idle}
	ir.timer = time.AfterFunc(idle, func() { ir.fired.Store(true); cancel() })
	return ir
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.timer.Reset(ir.idle)
	}
	return n, err
}

func (ir *idleReader) stop() { ir.timer.Stop() }
