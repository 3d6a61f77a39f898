package sidecar

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/sidecar/api"
)

// fdListener answers, rather than leaves waiting, the connections that
// arrive while the process has no file descriptor left.
//
// When accept(2) fails for want of a descriptor (EMFILE, or ENFILE for the
// system's table), the connection stays in the kernel's backlog,
// established as far as its client knows: net/http retries the accept with
// a back-off that grows to a second, and the client waits, unanswered,
// until some descriptor is closed. So fdListener keeps one descriptor in
// hand, /dev/null opened at start. Out of descriptors, it closes it,
// accepts one connection on the descriptor so freed, answers that
// connection's request 503 unavailable and closes it (shedConn), then opens
// its spare again. It sheds one connection at a time; meanwhile it retries
// the accept every few milliseconds itself (net/http never sees the error,
// so its back-off never grows), and the first connection a freed
// descriptor lets in is served as usual.
//
// Streams already open are not touched: their connections are open, and
// their renewals use the store's open connections.
type fdListener struct {
	net.Listener
	log  *slog.Logger
	shed prometheus.Counter
	// openSpare opens the spare descriptor (/dev/null); a seam for tests,
	// which cannot run the process out of descriptors.
	openSpare func() (*os.File, error)

	exhausted atomic.Bool // out of descriptors since the last accept that succeeded

	mu          sync.Mutex
	spare       *os.File // nil while a shed connection holds its descriptor, or when it could not be opened again
	shedding    bool
	closed      bool
	back        chan struct{} // signalled (buffer 1) when a shed connection is closed
	warnedAt    time.Time     // the last "out of file descriptors" log line
	recoveredAt time.Time     // the last "available again" log line
	unlogged    int           // connections shed since that line
}

// fdLogEvery spaces the listener's log lines about running out of
// descriptors, which may come and go with every connection at the limit's
// edge; leasehold_connections_shed_total counts every connection shed.
const fdLogEvery = 10 * time.Second

// Shedding, bounded: a shed connection gets shedTimeout to send its request
// (normally in the kernel's buffer already: the connection waited in the
// backlog) and have its answer read, and shedReadLimit bytes of it are read.
const (
	shedTimeout   = 2 * time.Second
	shedReadLimit = 128 << 10
)

// newFDListener wraps ln; it closes ln when it fails.
func newFDListener(ln net.Listener, log *slog.Logger, shed prometheus.Counter) (*fdListener, error) {
	l := &fdListener{Listener: ln, log: log, shed: shed, back: make(chan struct{}, 1),
		openSpare: func() (*os.File, error) { return os.Open(os.DevNull) }}
	spare, err := l.openSpare()
	if err != nil {
		ln.Close()
		return nil, err
	}
	l.spare = spare
	return l, nil
}

// Accept returns the next connection to serve; connections that arrive
// while descriptors are exhausted are answered 503 and never returned.
func (l *fdListener) Accept() (net.Conn, error) {
	var wait time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			if !l.rearm() {
				// The spare was lost (another open took the descriptor a
				// shed connection freed) and none is free to open it
				// again: without it the next exhaustion would leave
				// connections waiting. This connection's descriptor
				// becomes the spare once it is shed.
				l.takeShed()
				go l.shedConn(c)
				wait = 0
				continue
			}
			if l.exhausted.Load() {
				l.recovered()
			}
			return c, nil
		}
		if !outOfFiles(err) {
			return nil, err
		}
		if c := l.takeOne(err); c != nil {
			go l.shedConn(c)
			wait = 0
			continue
		}
		// No spare at hand: a connection is being shed, or another open
		// took the descriptor. Wait for the one, or a little for
		// descriptors to free up, and try again.
		wait = min(max(2*wait, time.Millisecond), 50*time.Millisecond)
		t := time.NewTimer(wait)
		select {
		case <-l.back:
		case <-t.C:
		}
		t.Stop()
	}
}

// Close closes the listener and its spare descriptor.
func (l *fdListener) Close() error {
	l.mu.Lock()
	l.closed = true
	if l.spare != nil {
		l.spare.Close()
		l.spare = nil
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// outOfFiles says whether an accept failed for want of a file descriptor.
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// takeOne gives up the spare descriptor and accepts one connection with
// it; nil when there is no spare or the accept failed anyway.
func (l *fdListener) takeOne(cause error) net.Conn {
	l.mu.Lock()
	if !l.exhausted.Swap(true) && time.Since(l.warnedAt) >= fdLogEvery {
		l.warnedAt = time.Now()
		l.log.Warn("out of file descriptors: answering new connections 503 until some close", "err", cause,
			"hint", "raise the open-file limit, or lower --max-streams and --max-watchers (docs/configuration.md)")
	}
	if l.spare == nil && !l.shedding && !l.closed {
		l.spare, _ = l.openSpare() // lost to another open; fails while none is free
	}
	spare := l.spare
	if spare == nil {
		l.mu.Unlock()
		return nil
	}
	l.spare = nil
	l.shedding = true
	l.mu.Unlock()

	spare.Close()
	c, err := l.Listener.Accept()
	if err != nil {
		l.shedDone()
		return nil
	}
	return c
}

// rearm opens the spare again when it is missing and no shed connection
// holds its descriptor; false when it is missing and cannot be opened.
func (l *fdListener) rearm() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spare != nil || l.shedding || l.closed {
		return true
	}
	spare, err := l.openSpare()
	if err != nil {
		return false
	}
	l.spare = spare
	return true
}

// takeShed marks a connection being shed in place of the spare.
func (l *fdListener) takeShed() {
	l.mu.Lock()
	l.shedding = true
	l.mu.Unlock()
}

// shedDone takes the spare back after a connection was shed.
func (l *fdListener) shedDone() {
	l.mu.Lock()
	l.shedding = false
	if !l.closed {
		l.spare, _ = l.openSpare() // on failure, takeOne or rearm tries again
	}
	l.mu.Unlock()
	select {
	case l.back <- struct{}{}:
	default:
	}
}

// recovered notes that descriptors sufficed again.
func (l *fdListener) recovered() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.exhausted.Swap(false) && l.unlogged > 0 && time.Since(l.recoveredAt) >= fdLogEvery {
		l.recoveredAt = time.Now()
		l.log.Info("file descriptors available again: serving new connections", "shed", l.unlogged)
		l.unlogged = 0
	}
}

// shedConn answers a connection taken with the spare descriptor: it reads
// its request (so that closing does not reset the connection before the
// client has read the answer), answers 503 unavailable and closes it.
func (l *fdListener) shedConn(c net.Conn) {
	defer l.shedDone()
	defer c.Close()
	l.shed.Inc()
	l.mu.Lock()
	l.unlogged++
	l.mu.Unlock()
	_ = c.SetDeadline(time.Now().Add(shedTimeout))
	req, err := http.ReadRequest(bufio.NewReader(io.LimitReader(c, shedReadLimit)))
	if err != nil {
		return // no request in time, or not HTTP: the close is the answer
	}
	_, _ = io.Copy(io.Discard, req.Body)
	_ = shedResponse(req).Write(c)
}

// shedDetail is the detail of a shed request's answer.
const shedDetail = "this sidecar has no file descriptor left to serve the request (its open-file limit, RLIMIT_NOFILE, is reached): " +
	"try again shortly, or another sidecar"

// shedResponse is the 503 a shed request gets: for a claim, renewal or
// release, the operation's own unavailable answer, as when its store fails;
// for anything else (a keepalive or watch stream among them) a problem of
// type unavailable. It never says more than that.
func shedResponse(req *http.Request) *http.Response {
	contentType := "application/json"
	var answer any
	switch action := leaseAction(req.URL.EscapedPath()); {
	case req.Method == http.MethodPost && action == "claim":
		answer = api.ClaimUnavailable{Acquired: api.ClaimUnavailableAcquiredFalse, Reason: api.ClaimUnavailableReasonUnavailable, Detail: shedDetail}
	case req.Method == http.MethodPost && action == "renew":
		answer = api.RenewUnavailable{Renewed: api.RenewUnavailableRenewedFalse, Reason: api.RenewUnavailableReasonUnavailable, Detail: shedDetail}
	case req.Method == http.MethodPost && action == "release":
		answer = api.ReleaseUnavailable{Released: api.ReleaseUnavailableReleasedFalse, Reason: api.ReleaseUnavailableReasonUnavailable, Detail: shedDetail}
	default:
		contentType = contentTypeProblem
		answer = newProblem(http.StatusServiceUnavailable, problemUnavailable, "Out of file descriptors", shedDetail).Problem
	}
	body, _ := json.Marshal(answer) // generated types of strings and booleans: never fails
	return &http.Response{
		StatusCode: http.StatusServiceUnavailable,
		ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":   {contentType},
			"Content-Length": {strconv.Itoa(len(body))},
			"Connection":     {"close"},
		},
		ContentLength: int64(len(body)),
		Body:          io.NopCloser(bytes.NewReader(body)),
		Close:         true,
		Request:       req,
	}
}

// leaseAction is the last segment of /v1/leases/{task}/{action}, or "".
func leaseAction(escapedPath string) string {
	parts := strings.Split(escapedPath, "/")
	if len(parts) == 5 && parts[0] == "" && parts[1] == "v1" && parts[2] == "leases" && parts[3] != "" {
		return parts[4]
	}
	return ""
}
