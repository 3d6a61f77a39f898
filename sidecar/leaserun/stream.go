package leaserun

import (
	"bufio"
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

	"github.com/leasehold/leasehold/leasecore"
)

const (
	// maxWaitMs is the longest wait_ms a sidecar accepts; a longer --wait
	// is spent in several requests.
	maxWaitMs = 3_600_000
	// answerTimeout bounds how long a sidecar may take to answer beyond the
	// wait it was given (its own store operations are bounded at 5 s), and
	// to send the first event once it has answered 200.
	answerTimeout = 15 * time.Second
	// maxEventBytes bounds one line of the stream; a lease is far smaller.
	maxEventBytes = 1 << 20
	// maxErrorBytes bounds the error bodies read.
	maxErrorBytes = 64 << 10
)

// streamHold is a lease a sidecar holds for us over a keepalive stream.
type streamHold struct {
	first  leasecore.Lease
	body   io.ReadCloser
	tr     *http.Transport
	cancel context.CancelFunc // ends the request: the sidecar releases

	events    chan sseEvent // from read to watch; closed when read ends
	readErr   error         // why read ended; set before events is closed
	closing   chan struct{} // closed by release
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
	endpoint := strings.TrimRight(cfg.Addr, "/") + "/v1/leases/" + url.PathEscape(cfg.Task) + "/keepalive?" + q.Encode()

	// The stream outlives ctx, which ends with a signal: the lease is held
	// until the command has exited. Until the stream is ours, ctx ending
	// abandons the request.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	detach := context.AfterFunc(ctx, cancel)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = time.Duration(waitMs)*time.Millisecond + answerTimeout
	tr.DisableCompression = true // a compressor could hold events back
	fail := func(err error) (hold, error) {
		detach()
		cancel()
		tr.CloseIdleConnections()
		return nil, err
	}

	req, err := http.NewRequestWithContext(sctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return fail(fmt.Errorf("%w: --addr %q: %v", leasecore.ErrInvalid, cfg.Addr, err))
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
		return fail(leasecore.Unavailable("keepalive", fmt.Errorf("sidecar %s (is leasehold serve running there?): %w", cfg.Addr, err)))
	}
	if resp.StatusCode != http.StatusOK {
		err := refusal(resp, cfg.Task)
		resp.Body.Close()
		return fail(err)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body.Close()
		return fail(leasecore.Unavailable("keepalive", fmt.Errorf("%s answered 200 with %q, not an event stream: is --addr a leasehold sidecar?", cfg.Addr, mt)))
	}

	r := newSSEReader(resp.Body)
	timer := time.AfterFunc(answerTimeout, cancel)
	ev, err := r.next()
	if !timer.Stop() && err == nil {
		err = errors.New("timed out")
	}
	if err == nil && ev.name != "acquired" {
		err = fmt.Errorf("the first event is %q, not acquired", ev.name)
	}
	var lease leasecore.Lease
	if err == nil {
		lease, err = decodeLease(ev.data)
	}
	if err == nil && (lease.Owner != cfg.Owner || lease.Token <= 0) {
		err = fmt.Errorf("the acquired event names owner %q and token %d; asked for owner %q", lease.Owner, lease.Token, cfg.Owner)
	}
	if err != nil {
		resp.Body.Close()
		return fail(leasecore.Unavailable("keepalive", fmt.Errorf("stream from %s: %w", cfg.Addr, err)))
	}
	if !detach() {
		// ctx ended meanwhile, and with it the request.
		resp.Body.Close()
		return fail(leasecore.Unavailable("keepalive", context.Cause(ctx)))
	}

	h := &streamHold{
		first: lease, body: resp.Body, tr: tr, cancel: cancel,
		events: make(chan sseEvent), closing: make(chan struct{}),
		watchDone: make(chan struct{}), lostc: make(chan struct{}),
	}
	go h.read(r)
	go h.watch(ev.at.Add(lease.TTLRemaining))
	return h, nil
}

// refusal turns an answer other than 200 into the error of the model it
// stands for.
func refusal(resp *http.Response, task string) error {
	var body struct {
		Reason string `json:"reason"`
		Detail string `json:"detail"`
		Title  string `json:"title"`
		Holder *struct {
			Owner          string    `json:"owner"`
			ExpiresAt      time.Time `json:"expires_at"`
			TTLRemainingMs int64     `json:"ttl_remaining_ms"`
		} `json:"holder"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	decoded := json.Unmarshal(raw, &body) == nil
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
	status := resp.Status
	switch code := resp.StatusCode; {
	case code == http.StatusConflict && decoded && body.Reason == "held" && body.Holder != nil:
		return &leasecore.HeldError{Task: task, Holder: leasecore.Holder{
			Owner:        body.Holder.Owner,
			ExpiresAt:    body.Holder.ExpiresAt,
			TTLRemaining: time.Duration(body.Holder.TTLRemainingMs) * time.Millisecond,
		}}
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		return fmt.Errorf("%w (%s): %s", errUnauthorized, status, detail)
	case code == http.StatusBadRequest, code == http.StatusUnprocessableEntity:
		return fmt.Errorf("%w: the sidecar refused the request (%s): %s", leasecore.ErrInvalid, status, detail)
	default:
		return leasecore.Unavailable("keepalive", fmt.Errorf("%s: %s", status, detail))
	}
}

// read passes the stream's events to watch until the stream ends.
func (h *streamHold) read(r *sseReader) {
	defer close(h.events)
	for {
		ev, err := r.next()
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
			switch ev.name {
			case "renewed":
				lease, err := decodeLease(ev.data)
				if err == nil && lease.Token != h.first.Token {
					err = fmt.Errorf("renewed under token %d, acquired under %d", lease.Token, h.first.Token)
				}
				if err != nil {
					h.lose(fmt.Errorf("lease on %q: renewed event: %w", h.first.Task, err))
					return
				}
				timer.Reset(time.Until(ev.at.Add(lease.TTLRemaining)))
			case "lost":
				var lost struct {
					Reason string `json:"reason"`
					Detail string `json:"detail"`
				}
				_ = json.Unmarshal([]byte(ev.data), &lost)
				h.lose(fmt.Errorf("lease on %q: %w (%s), says the sidecar: %s", h.first.Task, leasecore.ErrLost, lost.Reason, lost.Detail))
				return
			case "released":
				var released struct {
					Reason string `json:"reason"`
				}
				_ = json.Unmarshal([]byte(ev.data), &released)
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

// apiLease is a lease object of the HTTP API.
type apiLease struct {
	Task           string    `json:"task"`
	Owner          string    `json:"owner"`
	Token          int64     `json:"token"`
	AcquiredAt     time.Time `json:"acquired_at"`
	RenewedAt      time.Time `json:"renewed_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	TTLMs          int64     `json:"ttl_ms"`
	TTLRemainingMs int64     `json:"ttl_remaining_ms"`
	RenewCount     int64     `json:"renew_count"`
	Note           string    `json:"note"`
}

func decodeLease(data string) (leasecore.Lease, error) {
	var a apiLease
	if err := json.Unmarshal([]byte(data), &a); err != nil {
		return leasecore.Lease{}, fmt.Errorf("lease: %w", err)
	}
	return leasecore.Lease{
		Task: a.Task, Owner: a.Owner, Token: a.Token,
		AcquiredAt: a.AcquiredAt, RenewedAt: a.RenewedAt, ExpiresAt: a.ExpiresAt,
		TTL:          time.Duration(a.TTLMs) * time.Millisecond,
		TTLRemaining: time.Duration(a.TTLRemainingMs) * time.Millisecond,
		RenewCount:   a.RenewCount, Note: a.Note,
	}, nil
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data string
	// at is the local time its last line was read: the moment a lease's
	// ttl_remaining_ms counts from.
	at time.Time
}

// sseReader reads server-sent events (the text/event-stream format): lines
// of "field: value", comments starting with ':', and a blank line ending
// each event. Lines end with LF or CRLF.
type sseReader struct {
	sc *bufio.Scanner
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEventBytes)
	return &sseReader{sc: sc}
}

// next returns the next event with data, skipping comments. At the end of
// the stream it returns io.EOF, discarding an unfinished event as the format
// says.
func (r *sseReader) next() (sseEvent, error) {
	var name string
	var data []string
	for r.sc.Scan() {
		line := r.sc.Text()
		if line == "" {
			if data == nil {
				name = "" // an event without data is not dispatched
				continue
			}
			if name == "" {
				name = "message"
			}
			return sseEvent{name: name, data: strings.Join(data, "\n"), at: time.Now()}, nil
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			data = append(data, value)
		}
	}
	if err := r.sc.Err(); err != nil {
		return sseEvent{}, err
	}
	return sseEvent{}, io.EOF
}
