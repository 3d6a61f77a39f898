package leaserun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/sse"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

const (
	// maxWaitMs is the longest wait_ms a sidecar accepts; a longer --wait
	// is spent in several requests.
	maxWaitMs = 3_600_000
	// answerTimeout bounds how long a sidecar may take to answer beyond the
	// wait it was given (its own store operations are bounded at 5 s), and
	// to send the first event once it has answered 200.
	answerTimeout = 15 * time.Second
	// maxErrorBytes bounds the error bodies read.
	maxErrorBytes = 64 << 10
)

// streamHold is a lease a sidecar holds for us over a keepalive stream.
type streamHold struct {
	first  leasecore.Lease
	body   io.ReadCloser
	tr     *http.Transport
	cancel context.CancelFunc // ends the request: the sidecar releases

	events    chan sse.Event // from read to watch; closed when read ends
	readErr   error          // why read ended; set before events is closed
	closing   chan struct{}  // closed by release
	closeOnce sync.Once
	watchDone chan struct{}
	lostc     chan struct{}

	mu  sync.Mutex
	err error // why the lease was lost; set before lostc is closed
}

// acquireSidecar opens a keepalive stream on the sidecar at cfg.Addr (asking
// it to wait, and asking again while cfg.Wait has time left) and keeps it.
func acquireSidecar(ctx context.Context, cfg *Config, log *slog.Logger) (hold, error) {
	return claimWaiting(ctx, cfg, log, func(ctx context.Context, wait time.Duration) (hold, error) {
		return openStream(ctx, cfg, wait)
	})
}

// openStream makes one keepalive request and reads its first event.
func openStream(ctx context.Context, cfg *Config, wait time.Duration) (hold, error) {
	q := url.Values{}
	q.Set("owner", cfg.Owner)
	if cfg.TTL > 0 { // else the sidecar applies the declared ttl, or its default
		q.Set("ttl_ms", strconv.FormatInt(cfg.TTL.Milliseconds(), 10))
	}
	waitMs := min(wait.Milliseconds(), maxWaitMs)
	if waitMs > 0 {
		q.Set("wait_ms", strconv.FormatInt(waitMs, 10))
	}
	ep, err := cli.ParseAddr(cfg.Addr)
	if err != nil { // Config.check refused it already
		return nil, fmt.Errorf("%w: --addr %q: %v", leasecore.ErrInvalid, cfg.Addr, err)
	}
	target := ep.URL("/v1/leases/" + url.PathEscape(cfg.Task) + "/keepalive?" + q.Encode())

	// The stream outlives ctx, which ends with a signal: the lease is held
	// until the command has exited. Until the stream is ours, ctx ending
	// abandons the request.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	detach := context.AfterFunc(ctx, cancel)
	tr := ep.Transport() // over TCP, or the sidecar's Unix socket
	tr.ResponseHeaderTimeout = time.Duration(waitMs)*time.Millisecond + answerTimeout
	tr.DisableCompression = true // a compressor could hold events back
	fail := func(err error) (hold, error) {
		detach()
		cancel()
		tr.CloseIdleConnections()
		return nil, err
	}

	req, err := http.NewRequestWithContext(sctx, http.MethodGet, target, nil)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its URL would repeat --addr, password and all
		}
		return fail(fmt.Errorf("%w: --addr %q: %v", leasecore.ErrInvalid, cli.RedactAddr(cfg.Addr), err))
	}
	req.Header.Set("Accept", "text/event-stream")
	if cfg.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL would only repeat --addr
		}
		return fail(leasecore.Unavailable("keepalive", fmt.Errorf("sidecar %s (is leasehold serve running there?): %w", cli.RedactAddr(cfg.Addr), err)))
	}
	if resp.StatusCode != http.StatusOK {
		err := refusal(resp, cfg.Task)
		resp.Body.Close()
		return fail(err)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body.Close()
		return fail(leasecore.Unavailable("keepalive", fmt.Errorf("%s answered 200 with %q, not an event stream: is --addr a leasehold sidecar?", cli.RedactAddr(cfg.Addr), mt)))
	}

	r := sse.NewReader(resp.Body)
	timer := time.AfterFunc(answerTimeout, cancel)
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
	if err == nil && (lease.Owner != cfg.Owner || lease.Token <= 0) {
		err = fmt.Errorf("the acquired event names owner %q and token %d; asked for owner %q", lease.Owner, lease.Token, cfg.Owner)
	}
	if err != nil {
		resp.Body.Close()
		return fail(leasecore.Unavailable("keepalive", fmt.Errorf("stream from %s: %w", cli.RedactAddr(cfg.Addr), err)))
	}
	if !detach() {
		// ctx ended meanwhile, and with it the request.
		resp.Body.Close()
		return fail(leasecore.Unavailable("keepalive", context.Cause(ctx)))
	}

	h := &streamHold{
		first: lease, body: resp.Body, tr: tr, cancel: cancel,
		events: make(chan sse.Event), closing: make(chan struct{}),
		watchDone: make(chan struct{}), lostc: make(chan struct{}),
	}
	go h.read(r)
	go h.watch(ev.At.Add(lease.TTLRemaining))
	return h, nil
}

// problemUndeclared is the problem type of a sidecar's refusal of an
// undeclared task under --require-declared (openapi.yaml: UndeclaredTask).
const problemUndeclared = "urn:leasehold:problem:undeclared-task"

// refusal turns an answer other than 200 into the error of the model it
// stands for.
func refusal(resp *http.Response, task string) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	status := resp.Status
	if resp.StatusCode == http.StatusConflict {
		var held api.ClaimHeld
		if json.Unmarshal(raw, &held) == nil && held.Reason == api.Held && held.Holder.Owner != "" {
			expires, _ := time.Parse(time.RFC3339Nano, held.Holder.ExpiresAt)
			return &leasecore.HeldError{Task: task, Holder: leasecore.Holder{
				Owner:        held.Holder.Owner,
				ExpiresAt:    expires,
				TTLRemaining: time.Duration(held.Holder.TtlRemainingMs) * time.Millisecond,
			}}
		}
	}
	// Every other refusal is a problem or a ClaimUnavailable: both say what
	// went wrong in detail.
	var body api.Problem
	_ = json.Unmarshal(raw, &body)
	detail := body.Detail
	if detail == "" {
		detail = body.Title
	}
	if detail == "" {
		detail = strings.TrimSpace(string(raw))
		if len(detail) > 200 {
			detail = detail[:200] + "…"
		}
	}
	switch code := resp.StatusCode; {
	case code == http.StatusNotFound && body.Type == problemUndeclared:
		return fmt.Errorf("%w (%s): %s", &leasecore.UndeclaredError{Task: task}, status, detail)
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		return fmt.Errorf("%w (%s): %s", errUnauthorized, status, detail)
	case code == http.StatusBadRequest, code == http.StatusUnprocessableEntity:
		return fmt.Errorf("%w: the sidecar refused the request (%s): %s", leasecore.ErrInvalid, status, detail)
	default:
		return leasecore.Unavailable("keepalive", fmt.Errorf("%s: %s", status, detail))
	}
}

// read passes the stream's events to watch until the stream ends.
func (h *streamHold) read(r *sse.Reader) {
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

// watch keeps the local deadline and decides when the lease is lost. When it
// returns, the request ends, which tells the sidecar to release.
func (h *streamHold) watch(deadline time.Time) {
	defer close(h.watchDone)
	defer h.cancel()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case <-h.closing:
			return
		case <-timer.C:
			h.lose(fmt.Errorf("lease on %q: %w: the sidecar sent no renewal in time", h.first.Task, leasecore.ErrLocalDeadline))
			return
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
					h.lose(fmt.Errorf("lease on %q: renewed event: %w", h.first.Task, err))
					return
				}
				timer.Reset(time.Until(ev.At.Add(lease.TTLRemaining)))
			case "lost":
				var lost api.KeepaliveLost
				_ = json.Unmarshal([]byte(ev.Data), &lost)
				h.lose(fmt.Errorf("lease on %q: %w (%s), says the sidecar: %s", h.first.Task, leasecore.ErrLost, lost.Reason, lost.Detail))
				return
			case "released":
				var released api.KeepaliveReleased
				_ = json.Unmarshal([]byte(ev.Data), &released)
				h.lose(fmt.Errorf("lease on %q: the sidecar released it (%s)", h.first.Task, released.Reason))
				return
			}
			// Other events are for newer clients.
		}
	}
}

func (h *streamHold) lose(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
	close(h.lostc)
}

func (h *streamHold) lease() leasecore.Lease { return h.first }

func (h *streamHold) lost() <-chan struct{} { return h.lostc }

func (h *streamHold) cause() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// release closes the stream, which is how a client releases: the sidecar
// does it (owner- and token-checked) when the connection ends. Whether it
// succeeded is the sidecar's to know; release reports true unless the lease
// was lost.
func (h *streamHold) release() (bool, error) {
	h.closeOnce.Do(func() { close(h.closing) })
	<-h.watchDone // watch ends the request
	for range h.events {
	}
	h.body.Close()
	h.tr.CloseIdleConnections()
	return h.cause() == nil, nil
}

// decodeLease reads a lease object of the HTTP API (the data of an acquired
// or renewed event).
func decodeLease(data string) (leasecore.Lease, error) {
	var a api.Lease
	if err := json.Unmarshal([]byte(data), &a); err != nil {
		return leasecore.Lease{}, fmt.Errorf("lease: %w", err)
	}
	var times [3]time.Time
	for i, ts := range []api.Timestamp{a.AcquiredAt, a.RenewedAt, a.ExpiresAt} {
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return leasecore.Lease{}, fmt.Errorf("lease: %w", err)
		}
		times[i] = t
	}
	return leasecore.Lease{
		Task: a.Task, Owner: a.Owner, Token: a.Token,
		AcquiredAt: times[0], RenewedAt: times[1], ExpiresAt: times[2],
		TTL:          time.Duration(a.TtlMs) * time.Millisecond,
		TTLRemaining: time.Duration(a.TtlRemainingMs) * time.Millisecond,
		RenewCount:   a.RenewCount, Note: a.Note,
	}, nil
}
