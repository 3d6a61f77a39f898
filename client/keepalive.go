package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/sse"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

const (
	// MaxWait is the longest wait a sidecar accepts for one keepalive
	// request (wait_ms); a longer KeepaliveParams.Wait is cut to it.
	MaxWait = time.Hour
	// streamAnswerTimeout bounds how long a sidecar may take to answer a
	// keepalive request beyond the wait it was given (its own store
	// operations are bounded at 5 s), and to send the first event once it
	// has answered 200.
	streamAnswerTimeout = 15 * time.Second
	// maxRefusalBytes bounds the refusals of a stream request read.
	maxRefusalBytes = 64 << 10
)

// ErrClosed is the cause of a Holder's context once Close has hung up.
var ErrClosed = errors.New("the keepalive holder was closed")

// KeepaliveParams are the inputs of Keepalive.
type KeepaliveParams struct {
	Task string
	// Owner to claim as; empty means the client's (Client.Owner).
	Owner string
	// TTL of the lease; zero means the task's declared ttl, else the
	// sidecar's default. The sidecar renews it every ttl × 0.4.
	TTL  time.Duration
	Note string
	// Wait, when the task is held, is how long the sidecar waits for it
	// before answering held (at most MaxWait); zero answers at once.
	Wait time.Duration
	// MinHold, when not zero, is the lease's minimum hold, as in
	// ClaimParams: when the stream ends before it, the task rests until
	// then.
	MinHold time.Duration
}

// Holder is a lease the sidecar keeps alive over a keepalive stream: it
// renews the lease while the stream is open and releases it when the
// stream closes. The holder watches the stream and a local deadline; when
// either says the lease is gone, Lost is closed and Context is cancelled
// with the reason.
//
// The local deadline errs early, never late: it is the moment a request
// that found the lease held was sent plus the ttl_remaining_ms the store
// answered to it, on this machine's monotonic clock. The keepalive request
// itself is the first such request; after the acquired event and each
// renewed event the holder asks GET /v1/leases/{task} and moves the
// deadline to that request's send time plus its answer's ttl_remaining_ms,
// when the answer names this lease (owner and token). An event's own
// ttl_remaining_ms never moves it: a sidecar frozen between measuring it
// and sending it would deliver it late, and the deadline with it. A GET
// that fails leaves the deadline where it was; one answering that the
// lease is no longer this holder's loses it at once. The store cannot have
// handed the task to anyone else before the deadline (short of a revoke,
// an operator's override).
type Holder struct {
	c      *Client // for ReleaseRun's release
	first  leasecore.Lease
	body   io.ReadCloser
	tr     *http.Transport
	cancel context.CancelFunc // ends the request: the sidecar releases

	ctx       context.Context
	cancelCtx context.CancelCauseFunc
	scrub     func(string) string // masks the bearer token in messages (Client.scrub)

	events    chan sse.Event // from read to watch; closed when read ends
	readErr   error          // why read ended; set before events is closed
	closing   chan struct{}  // closed by Close
	closeOnce sync.Once
	watchDone chan struct{}
	lostc     chan struct{}
	// releasing is set by ReleaseRun before it asks the sidecar to
	// release: the stream's released event (reason release) that follows
	// is the end of the hold it asked for, not a loss.
	releasing atomic.Bool

	confirmReq chan struct{}     // watch to confirm: a renewal to confirm (cap 1)
	confirmed  chan confirmation // confirm to watch: what the store said

	mu       sync.Mutex
	latest   leasecore.Lease
	deadline time.Time // the local deadline; only ever moves later
	err      error     // why the lease was lost; set before lostc is closed
}

// confirmation is what one GET of the lease found: sent is when it was
// sent; lease is the store's answer (nil when nobody holds the task); err,
// when set, means the answer could not be had, and says nothing.
type confirmation struct {
	sent  time.Time
	lease *leasecore.Lease
	err   error
}

// Keepalive opens a keepalive stream on the task and returns once the
// sidecar has acquired the lease (its first event). ctx bounds the
// acquisition only: the hold lasts until Close, or until the lease is lost.
// When not acquired the error is the claim's outcome (a
// *leasecore.HeldError, unavailable, or another refusal of the table);
// a stream that is not a sidecar's is unavailable.
func (c *Client) Keepalive(ctx context.Context, p KeepaliveParams) (*Holder, error) {
	owner := c.ownerOr(p.Owner)
	q := url.Values{}
	q.Set("owner", owner)
	if p.TTL > 0 { // else the sidecar applies the declared ttl, or its default
		q.Set("ttl_ms", strconv.FormatInt(p.TTL.Milliseconds(), 10))
	}
	if p.Note != "" {
		q.Set("note", p.Note)
	}
	if p.MinHold > 0 {
		q.Set("min_hold_ms", strconv.FormatInt(p.MinHold.Milliseconds(), 10))
	}
	wait := min(p.Wait, MaxWait)
	if wait > 0 {
		q.Set("wait_ms", strconv.FormatInt(wait.Milliseconds(), 10))
	}
	path := taskPath(p.Task) + "/keepalive?" + q.Encode()

	// The stream outlives ctx. Until the stream is ours, ctx ending
	// abandons the request.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	detach := context.AfterFunc(ctx, cancel)
	tr := c.ep.Transport() // one per stream: Close frees its connection
	tr.ResponseHeaderTimeout = wait + streamAnswerTimeout
	tr.DisableCompression = true // a compressor could hold events back
	fail := func(err error) (*Holder, error) {
		detach()
		cancel()
		tr.CloseIdleConnections()
		return nil, err
	}

	req, err := http.NewRequestWithContext(sctx, http.MethodGet, c.ep.URL(path), nil)
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	c.authorize(req)
	// The lease the stream acquires cannot have been granted before the
	// request was sent: its ttl_remaining counted from here errs early.
	sent := time.Now()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fail(c.unreachable("keepalive", err))
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBytes))
		resp.Body.Close()
		x := &exchange{method: http.MethodGet, template: "/v1/leases/{task}/keepalive", path: path, status: resp.StatusCode, header: resp.Header, body: data}
		if err := checkAnswer(x.method, x.template, x.status, x.header, x.body); err != nil {
			return fail(c.notSidecar("keepalive", x, err))
		}
		return fail(c.refusal("keepalive", p.Task, x))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body.Close()
		return fail(leasecore.Unavailable("keepalive", fmt.Errorf("%s answered 200 with %q, not an event stream: is it a leasehold sidecar?", c.name, c.scrub(mt))))
	}

	r := sse.NewReader(resp.Body)
	timer := time.AfterFunc(streamAnswerTimeout, cancel)
	ev, err := r.Next()
	if !timer.Stop() && err == nil {
		err = errors.New("timed out")
	}
	if err == nil && ev.Name != "acquired" {
		err = fmt.Errorf("the first event is %q, not acquired", ev.Name)
	}
	var lease leasecore.Lease
	if err == nil {
		lease, err = decodeLease(ev.Data)
	}
	if err == nil && (lease.Owner != owner || lease.Token <= 0) {
		err = fmt.Errorf("the acquired event names owner %q and token %d; asked for owner %q", lease.Owner, lease.Token, owner)
	}
	if err != nil {
		resp.Body.Close()
		return fail(leasecore.Unavailable("keepalive", fmt.Errorf("stream from %s: %s", c.name, c.scrub(err.Error()))))
	}
	if !detach() {
		// ctx ended meanwhile, and with it the request.
		resp.Body.Close()
		return fail(leasecore.Unavailable("keepalive", context.Cause(ctx)))
	}

	hctx, hcancel := context.WithCancelCause(context.WithoutCancel(ctx))
	h := &Holder{
		c: c, first: lease, latest: lease, body: resp.Body, tr: tr, cancel: cancel,
		ctx: hctx, cancelCtx: hcancel, scrub: c.scrub,
		events: make(chan sse.Event), closing: make(chan struct{}),
		watchDone: make(chan struct{}), lostc: make(chan struct{}),
		confirmReq: make(chan struct{}, 1), confirmed: make(chan confirmation),
		deadline: sent.Add(lease.TTLRemaining),
	}
	// After a wait the keepalive request may have been sent long before
	// the grant: confirm the lease before handing it over, so that the
	// deadline the caller starts with is a recent one.
	if err := h.apply(h.confirm()); err != nil {
		resp.Body.Close()
		hcancel(err)
		return fail(err)
	}
	go h.read(r)
	go h.confirmLoop()
	go h.watch()
	return h, nil
}

// confirm asks the sidecar for the lease, bounded by the local deadline:
// an answer after it could not move it.
func (h *Holder) confirm() confirmation {
	h.mu.Lock()
	deadline := h.deadline
	h.mu.Unlock()
	ctx, cancel := context.WithDeadline(h.ctx, deadline)
	defer cancel()
	sent := time.Now()
	l, err := h.c.Get(ctx, h.first.Task)
	return confirmation{sent: sent, lease: l, err: err}
}

// apply moves the deadline by what a confirmation found, or returns the
// loss it shows: the store names no holder, or another lease than ours.
func (h *Holder) apply(c confirmation) error {
	if c.err != nil {
		return nil // no answer: the deadline stays
	}
	if c.lease == nil || c.lease.Owner != h.first.Owner || c.lease.Token != h.first.Token {
		now := "nobody holds it"
		if c.lease != nil {
			now = fmt.Sprintf("it is held by %q under token %d", h.scrub(c.lease.Owner), c.lease.Token)
		}
		return &leasecore.LostError{Task: h.first.Task, Reason: leasecore.LostNotHeld,
			Detail: fmt.Sprintf("the lease under token %d is no longer ours: %s", h.first.Token, now)}
	}
	h.mu.Lock()
	if d := c.sent.Add(c.lease.TTLRemaining); d.After(h.deadline) {
		h.deadline = d
	}
	h.mu.Unlock()
	return nil
}

// confirmLoop confirms the lease each time watch asks, one GET at a time,
// until watch ends.
func (h *Holder) confirmLoop() {
	for {
		select {
		case <-h.watchDone:
			return
		case <-h.confirmReq:
		}
		c := h.confirm()
		select {
		case h.confirmed <- c:
		case <-h.watchDone:
			return
		}
	}
}

// Deadline is the holder's local deadline (see Holder): the store cannot
// hand the task to another owner before it, unless an operator revokes
// the lease. It moves later with each confirmed renewal, never earlier.
func (h *Holder) Deadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// decodeLease reads the data of an acquired or renewed event.
func decodeLease(data string) (leasecore.Lease, error) {
	if err := checkSchema("Lease", []byte(data)); err != nil {
		return leasecore.Lease{}, fmt.Errorf("lease: %w", err)
	}
	var a api.Lease
	if err := json.Unmarshal([]byte(data), &a); err != nil {
		return leasecore.Lease{}, fmt.Errorf("lease: %w", err)
	}
	return api.ToLease(&a)
}

// read passes the stream's events to watch until the stream ends.
func (h *Holder) read(r *sse.Reader) {
	defer close(h.events)
	for {
		ev, err := r.Next()
		if err != nil {
			h.readErr = err
			return
		}
		select {
		case h.events <- ev:
		case <-h.watchDone:
			return
		}
	}
}

// watch keeps the local deadline and decides when the lease is lost. When
// it returns, the request ends, which tells the sidecar to release.
func (h *Holder) watch() {
	defer close(h.watchDone)
	defer h.cancel()
	timer := time.NewTimer(time.Until(h.Deadline()))
	defer timer.Stop()
	for {
		select {
		case <-h.closing:
			return
		case <-timer.C:
			if d := h.Deadline(); time.Now().Before(d) {
				timer.Reset(time.Until(d)) // a confirmation moved it meanwhile
				continue
			}
			h.lose(fmt.Errorf("lease on %q: %w: no renewal was confirmed in time", h.first.Task, leasecore.ErrLocalDeadline))
			return
		case c := <-h.confirmed:
			if h.releasing.Load() {
				continue // ReleaseRun is giving the lease back: a GET finding it free is no loss
			}
			if err := h.apply(c); err != nil {
				h.lose(err)
				return
			}
			timer.Reset(time.Until(h.Deadline()))
		case ev, ok := <-h.events:
			if !ok {
				h.lose(fmt.Errorf("lease on %q: the keepalive stream ended: %v", h.first.Task, h.readErr))
				return
			}
			switch ev.Name {
			case "renewed":
				lease, err := decodeLease(ev.Data)
				if err == nil && lease.Token != h.first.Token {
					err = fmt.Errorf("renewed under token %d, acquired under %d", lease.Token, h.first.Token)
				}
				if err != nil {
					h.lose(fmt.Errorf("lease on %q: renewed event: %s", h.first.Task, h.scrub(err.Error())))
					return
				}
				h.mu.Lock()
				h.latest = lease
				h.mu.Unlock()
				select { // confirm it; one pending request is enough
				case h.confirmReq <- struct{}{}:
				default:
				}
			case "lost":
				var lost api.KeepaliveLost
				_ = json.Unmarshal([]byte(ev.Data), &lost)
				h.lose(&leasecore.LostError{Task: h.first.Task, Reason: leasecore.LostReason(h.scrub(string(lost.Reason))), Detail: "says the sidecar: " + h.scrub(lost.Detail)})
				return
			case "released":
				var released api.KeepaliveReleased
				_ = json.Unmarshal([]byte(ev.Data), &released)
				if released.Reason == api.KeepaliveReleasedReasonRelease && h.releasing.Load() {
					return // ReleaseRun's own release ended the stream
				}
				h.lose(fmt.Errorf("lease on %q: the sidecar released it (%s)", h.first.Task, h.scrub(string(released.Reason))))
				return
			}
			// Other events are for newer clients.
		}
	}
}

func (h *Holder) lose(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
	close(h.lostc)
	h.cancelCtx(err)
}

// Lease is the lease as last confirmed: acquired, or last renewed.
func (h *Holder) Lease() leasecore.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.latest
}

// Token is the lease's fencing token: pass it to whatever the lease guards.
func (h *Holder) Token() int64 { return h.first.Token }

// Context is cancelled when the lease is lost (its cause is Err) or the
// holder is closed (cause ErrClosed). It carries the values of the context
// Keepalive was given, not its cancellation.
func (h *Holder) Context() context.Context { return h.ctx }

// Lost is closed when the lease is lost; Err then says why.
func (h *Holder) Lost() <-chan struct{} { return h.lostc }

// Err is why the lease was lost, or nil while it is held (or was closed
// without a loss).
func (h *Holder) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Close hangs up, which is how a keepalive client releases: the sidecar
// releases the lease (owner- and token-checked) when the stream ends. It
// returns the loss, if the lease was lost before, and frees every resource
// of the holder. Calling it again does nothing more.
func (h *Holder) Close() error {
	h.closeOnce.Do(func() { close(h.closing) })
	<-h.watchDone // watch ends the request
	for range h.events {
	}
	h.body.Close()
	h.tr.CloseIdleConnections()
	h.cancelCtx(ErrClosed)
	return h.Err()
}

// ReleaseRun gives the lease back with what the job run under it did,
// which the history's released event keeps, then closes the stream as
// Close does. The sidecar stops the stream's renewals before it releases,
// and ends the stream with its released event (reason release), which is
// no loss. It reports whether the release ended the lease, and the
// release's error: when it failed, the sidecar still releases at the
// hang-up, and the outcome is not recorded. A loss before the release is
// Err's.
func (h *Holder) ReleaseRun(ctx context.Context, run *leasecore.RunOutcome) (bool, error) {
	l := h.Lease()
	h.releasing.Store(true)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), streamAnswerTimeout)
	released, err := h.c.Release(rctx, ReleaseParams{Task: l.Task, Owner: l.Owner, Token: l.Token, Run: run})
	cancel()
	_ = h.Close() // its loss is Err's
	return released, err
}

// Run holds the task's lease over a keepalive stream while fn runs, then
// releases it, fn's error or not, and returns fn's error. The release
// carries the run's outcome (exit status 0 when fn returned nil, else its
// error; the duration; whether the lease was lost), which the history's
// released event keeps. fn's context is
// cancelled when ctx is, or when the lease is lost (context.Cause says
// why); fn should stop writing then. When the lease cannot be acquired,
// Run returns the claim's outcome and fn does not run; when it was lost
// while fn ran and fn returned nil, Run returns the loss.
func (c *Client) Run(ctx context.Context, task string, fn func(ctx context.Context, lease leasecore.Lease) error) error {
	return c.RunWith(ctx, KeepaliveParams{Task: task}, fn)
}

// RunWith is Run with the keepalive's parameters (owner, ttl, note, wait).
func (c *Client) RunWith(ctx context.Context, p KeepaliveParams, fn func(ctx context.Context, lease leasecore.Lease) error) error {
	h, err := c.Keepalive(ctx, p)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(h.Context(), func() { cancel(context.Cause(h.Context())) })
	start := time.Now()
	err = fn(fctx, h.Lease())
	stop()
	cancel(nil)
	if released, _ := h.ReleaseRun(ctx, leasecore.BodyOutcome(err, time.Since(start), h.Err() != nil)); err == nil && !released {
		err = h.Err() // the loss, if the lease was lost: Close's answer
	}
	return err
}
