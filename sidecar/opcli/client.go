package opcli

import (
	"bytes"
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
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/internal/sse"
	"github.com/leasehold/leasehold/sidecar/api"
)

// client asks a sidecar over its HTTP API.
type client struct {
	base  string // the base URL of requests, without a trailing slash
	name  string // the sidecar's address as given (--addr), its password masked, for messages
	token string // the bearer token; empty sends none
	http  *http.Client
	notes io.Writer // where watch reports reconnections

	// A watch's bounds when not zero, else watchAnswerTimeout and
	// watchIdleTimeout (tests shorten them).
	watchAnswer, watchIdle time.Duration
}

// newClient asks the sidecar at ep, over TCP or its Unix socket.
func newClient(ep endpoint.Endpoint, token string, notes io.Writer) *client {
	return &client{base: ep.Base(), name: cli.RedactAddr(ep.String()), token: token, http: &http.Client{Transport: ep.Transport()}, notes: notes}
}

// problemUndeclared is the problem type of a claim of an undeclared task.
const problemUndeclared = "urn:leasehold:problem:undeclared-task"

// do sends a request to path, an instance of the operation (method,
// template) of openapi.yaml, and decodes a 2xx answer (and, for the
// statuses in also, that answer too) into out. An answer that is not one
// the API gives there (see checkAnswer) is an error saying so, with status
// 69; any other refusal is an error with the exit status it calls for. It
// returns the status.
func (c *client) do(ctx context.Context, method, template, path string, body, out any, also ...int) (int, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, unreachable(c.name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, withCode(ExitUnavailable, "%s %s: reading the answer: %v", method, path, err)
	}
	if err := checkAnswer(method, template, resp.StatusCode, resp.Header, data); err != nil {
		return resp.StatusCode, c.notSidecar(method, path, err)
	}
	ok := resp.StatusCode/100 == 2
	for _, s := range also {
		ok = ok || resp.StatusCode == s
	}
	if !ok {
		return resp.StatusCode, answerError(resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp.StatusCode, c.notSidecar(method, path, &notTheAPI{fmt.Sprintf("status %d with a body that does not decode: %v", resp.StatusCode, err)})
	}
	return resp.StatusCode, nil
}

// notSidecar is the error of an answer that is not the API's (why): the
// server at --addr is not a leasehold sidecar, or not one that works.
func (c *client) notSidecar(method, path string, why error) error {
	var n *notTheAPI
	if !errors.As(why, &n) {
		return why // not the answer's fault
	}
	return withCode(ExitUnavailable, "the server at %s did not answer like a leasehold sidecar (check --addr): %s %s: %v", c.name, method, path, why)
}

func (c *client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// unreachable is the error of a sidecar that could not be asked; it names
// the sidecar with its password masked.
func unreachable(base string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return withCode(ExitUnavailable, "sidecar %s unavailable: %v", cli.RedactAddr(base), err)
}

// answerError turns a refusal into an error with its exit status; its text
// is the problem's (or the body's) detail.
func answerError(status int, body []byte) error {
	var p struct {
		Type   string `json:"type"`
		Detail string `json:"detail"`
		Params []struct {
			Name   string `json:"name"`
			Reason string `json:"reason"`
		} `json:"invalid_params"`
	}
	detail := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &p) == nil && p.Detail != "" {
		detail = p.Detail
		for _, ip := range p.Params {
			detail += fmt.Sprintf("; %s %s", ip.Name, ip.Reason)
		}
	}
	code := ExitFailed
	switch {
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		code = ExitNoPerm
	case status == http.StatusNotFound && p.Type == problemUndeclared:
		code = ExitUndeclared
	case status == http.StatusBadRequest, status == http.StatusUnprocessableEntity:
		code = ExitUsage
	case status == http.StatusServiceUnavailable:
		code = ExitUnavailable
	}
	return withCode(code, "%d %s: %s", status, http.StatusText(status), detail)
}

func taskPath(task string) string { return "/v1/leases/" + url.PathEscape(task) }

func (c *client) status(ctx context.Context, o *options) error {
	var st api.SidecarStatus
	if _, err := c.do(ctx, http.MethodGet, "/v1/status", "/v1/status", nil, &st); err != nil {
		return err
	}
	if o.json {
		if err := printJSON(o.stdout, st); err != nil {
			return err
		}
	} else {
		printSidecarStatus(o.stdout, c.name, &st)
	}
	if !st.Store.Ready {
		return &exitError{code: ExitUnavailable, told: true, err: fmt.Errorf("the sidecar's store is not ready: %s", st.Store.Detail)}
	}
	return nil
}

func (c *client) get(ctx context.Context, task string) (*api.Lease, error) {
	var st api.LeaseState
	if _, err := c.do(ctx, http.MethodGet, "/v1/leases/{task}", taskPath(task), nil, &st); err != nil {
		return nil, err
	}
	// What the schema cannot say: a lease exactly when held, and of the task asked about.
	switch {
	case st.Held != (st.Lease != nil):
		return nil, c.notSidecar(http.MethodGet, taskPath(task), &notTheAPI{fmt.Sprintf("held is %v, but the answer has %s lease", st.Held, map[bool]string{true: "a", false: "no"}[st.Lease != nil])})
	case st.Lease != nil && st.Lease.Task != task:
		return nil, c.notSidecar(http.MethodGet, taskPath(task), &notTheAPI{fmt.Sprintf("the lease is of task %q", st.Lease.Task)})
	}
	return st.Lease, nil
}

func (c *client) list(ctx context.Context, after string) ([]api.Lease, string, error) {
	q := url.Values{"limit": {strconv.Itoa(listPage)}}
	if after != "" {
		q.Set("after", after)
	}
	var l api.LeaseList
	if _, err := c.do(ctx, http.MethodGet, "/v1/leases", "/v1/leases?"+q.Encode(), nil, &l); err != nil {
		return nil, "", err
	}
	next := ""
	if l.NextAfter != nil {
		next = *l.NextAfter
		// Pages walk forward by task: a next_after that does not would
		// have list ask for the same page until it times out.
		if next <= after {
			return nil, "", c.notSidecar(http.MethodGet, "/v1/leases?"+q.Encode(), &notTheAPI{fmt.Sprintf("next_after %q does not come after %q", next, after)})
		}
	}
	return l.Leases, next, nil
}

func (c *client) history(ctx context.Context, task string, limit int) ([]api.Event, error) {
	var l api.EventList
	_, err := c.do(ctx, http.MethodGet, "/v1/leases/{task}/history", taskPath(task)+"/history?limit="+strconv.Itoa(limit), nil, &l)
	return l.Events, err
}

func (c *client) claim(ctx context.Context, v *verbFlags) (*api.Lease, *api.ClaimHeld, error) {
	req := api.ClaimRequest{Owner: v.owner}
	if v.ttl > 0 {
		ms := v.ttl.Milliseconds()
		req.TtlMs = &ms
	}
	if v.note != "" {
		req.Note = &v.note
	}
	var answer struct {
		api.ClaimHeld
		Lease *api.Lease `json:"lease"`
	}
	path := taskPath(v.task) + "/claim"
	status, err := c.do(ctx, http.MethodPost, "/v1/leases/{task}/claim", path, req, &answer, http.StatusConflict)
	if err != nil {
		return nil, nil, err
	}
	if status == http.StatusConflict {
		return nil, &answer.ClaimHeld, nil
	}
	if l := answer.Lease; l == nil || l.Task != v.task || l.Owner != v.owner {
		if l == nil {
			return nil, nil, c.notSidecar(http.MethodPost, path, &notTheAPI{"the claim's answer has no lease"})
		}
		return nil, nil, c.notSidecar(http.MethodPost, path, &notTheAPI{fmt.Sprintf("the lease granted is of task %q to owner %q", l.Task, l.Owner)})
	}
	return answer.Lease, nil, nil
}

func (c *client) release(ctx context.Context, v *verbFlags) (bool, error) {
	req := api.ReleaseRequest{Owner: v.owner}
	if v.token != 0 {
		req.Token = &v.token
	}
	var r api.ReleaseResult
	_, err := c.do(ctx, http.MethodPost, "/v1/leases/{task}/release", taskPath(v.task)+"/release", req, &r)
	return r.Released, err
}

// The pauses between two connections of a watch.
const (
	watchRetryFirst = 100 * time.Millisecond
	watchRetryMax   = 5 * time.Second
)

// The bounds of one connection of a watch: an established stream may be
// quiet, but never silent.
const (
	// watchAnswerTimeout bounds connecting and waiting for the answer's
	// header, as requestTimeout bounds a whole request of another verb: the
	// sidecar answers a watch once it knows where the watch starts, a
	// store operation or two.
	watchAnswerTimeout = requestTimeout
	// watchIdleTimeout is how long a stream may say nothing at all, not
	// even a ping (the sidecar sends one every 15 s), before it is taken
	// for dead.
	watchIdleTimeout = 45 * time.Second
)

// watchEvents are the event names of a watch stream that carry a history
// event.
var watchEvents = map[string]bool{"acquired": true, "released": true, "expired": true, "taken_over": true, "lost": true}

// watch follows GET /v1/watch, connecting again whenever the stream ends,
// from the last event seen (see the package documentation). Until a stream
// has shown itself to be a sidecar's watch (an event of the watch's own),
// any failure ends it: an address that is not a sidecar's is not retried.
func (c *client) watch(ctx context.Context, v *verbFlags, emit func(api.Event) error, ready func(int64), reset func(position, newest int64)) error {
	pos := v.since // the last event seen, or where the sidecar said it was ready; -1: from now
	retry := backoff.New(watchRetryFirst, watchRetryMax)
	for proven := false; ; {
		err := c.watchOnce(ctx, v.prefix, &pos, &proven, emit, ready, reset)
		if ctx.Err() != nil {
			return nil
		}
		var ee *exitError
		if !proven || (errors.As(err, &ee) && ee.code != ExitUnavailable) {
			return err // never a watch stream, or refused: asking again will not help
		}
		if errors.Is(err, errStreamEnded) {
			retry = backoff.New(watchRetryFirst, watchRetryMax) // a clean end: reconnect soon
		}
		wait := retry.Next()
		if err != nil {
			fmt.Fprintf(c.notes, "watch: %v; reconnecting in %s\n", message(err), wait)
		}
		if backoff.Sleep(ctx, wait) != nil {
			return nil
		}
	}
}

// errStreamEnded: the sidecar ended the watch stream (an end event, or
// the end of the response).
var errStreamEnded = errors.New("the sidecar ended the watch stream")

// notAWatch is the error of an answer that is no watch stream: the server
// at --addr is not a leasehold sidecar (or not the one meant).
func (c *client) notAWatch(format string, a ...any) error {
	return withCode(ExitFailed, "%s is not a leasehold sidecar's watch stream: %s (check --addr)", c.name, fmt.Sprintf(format, a...))
}

// watchOnce reads one watch stream until it ends. proven is set once the
// stream sent an event of the watch's own (ready, reset, end, or a history
// event), which a server other than a sidecar would not.
func (c *client) watchOnce(ctx context.Context, prefix string, pos *int64, proven *bool, emit func(api.Event) error, ready func(int64), reset func(position, newest int64)) error {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *pos >= 0 && *proven {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*pos, 10))
	}
	c.authorize(req)
	answerIn := cmp.Or(c.watchAnswer, watchAnswerTimeout)
	var late atomic.Bool
	answer := time.AfterFunc(answerIn, func() { late.Store(true); cancel() })
	resp, err := c.http.Do(req)
	answer.Stop()
	if err != nil {
		if late.Load() {
			return withCode(ExitUnavailable, "sidecar %s did not answer the watch request within %s", c.name, answerIn)
		}
		return unreachable(c.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode == http.StatusNotFound {
			return c.notAWatch("GET /v1/watch answered 404 Not Found (a sidecar older than the watch, or another server)")
		}
		return answerError(resp.StatusCode, data)
	}
	ct := resp.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "text/event-stream" {
		if ct == "" {
			ct = "no Content-Type"
		}
		return c.notAWatch("GET /v1/watch answered 200 with %s, not text/event-stream", ct)
	}
	body := newIdleReader(resp.Body, cmp.Or(c.watchIdle, watchIdleTimeout), cancel)
	defer body.stop()
	r := sse.NewReader(body)
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return errStreamEnded
		}
		if err != nil {
			if body.fired.Load() {
				return withCode(ExitUnavailable, "the watch stream of %s said nothing for %s (the sidecar pings every 15 s): taking it for dead", c.name, body.idle)
			}
			return withCode(ExitUnavailable, "reading the watch stream: %v", err)
		}
		switch {
		case ev.Name == "ready":
			var d struct {
				Position *int64 `json:"position"`
			}
			if err := json.Unmarshal([]byte(ev.Data), &d); err != nil || d.Position == nil {
				return c.notAWatch("a ready event whose data is not a position: %.200q", ev.Data)
			}
			*proven = true
			*pos = max(*pos, *d.Position)
			ready(*d.Position)
		case ev.Name == "reset":
			var d struct {
				Position *int64 `json:"position"`
				Newest   *int64 `json:"newest"`
			}
			if err := json.Unmarshal([]byte(ev.Data), &d); err != nil || d.Position == nil || d.Newest == nil {
				return c.notAWatch("a reset event whose data is not a position and the store's newest id: %.200q", ev.Data)
			}
			*proven = true
			// The history the stream replays next is the store's now:
			// every event of it is new to this watch.
			*pos = 0
			reset(*d.Position, *d.Newest)
		case ev.Name == "end":
			var d struct {
				Reason *string `json:"reason"`
				Detail string  `json:"detail"`
			}
			if err := json.Unmarshal([]byte(ev.Data), &d); err != nil || d.Reason == nil {
				return c.notAWatch("an end event without a reason: %.200q", ev.Data)
			}
			*proven = true
			return fmt.Errorf("%w (%s: %s)", errStreamEnded, *d.Reason, d.Detail)
		case watchEvents[ev.Name]:
			var e api.Event
			if err := json.Unmarshal([]byte(ev.Data), &e); err != nil || string(e.Kind) != ev.Name || ev.ID != strconv.FormatInt(e.Id, 10) {
				return c.notAWatch("a %s event (id %q) whose data is not that event: %.200q", ev.Name, ev.ID, ev.Data)
			}
			*proven = true
			if e.Id <= *pos {
				continue // seen before a reconnection
			}
			if err := emit(e); err != nil {
				return &exitError{code: ExitFailed, err: err}
			}
			*pos = e.Id
		case !*proven:
			return c.notAWatch("an event %q, which a watch stream does not send", ev.Name)
		default:
			// An event of a newer sidecar's: ignored, as the format says.
		}
	}
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
