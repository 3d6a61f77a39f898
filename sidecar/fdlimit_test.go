package sidecar

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestFitCaps(t *testing.T) {
	t.Parallel()
	const r = FileReserve
	tests := []struct {
		name                   string
		limit                  uint64
		streams, watchers      int // as configured: 0 is the default
		wantStreams, wantWatch int
		wantLowered            []string
		wantErr                []string // each in the error
	}{
		{name: "defaults fit", limit: 1 << 20, wantStreams: DefaultMaxStreams, wantWatch: DefaultMaxWatchers},
		{name: "defaults exactly fit", limit: DefaultMaxStreams + DefaultMaxWatchers + r, wantStreams: DefaultMaxStreams, wantWatch: DefaultMaxWatchers},
		{name: "unbounded", limit: fileLimitUnbounded, streams: 5, wantStreams: 5, wantWatch: DefaultMaxWatchers},
		{name: "defaults lowered in proportion", limit: 4096, wantStreams: 3657, wantWatch: 183,
			wantLowered: []string{"--max-streams", "--max-watchers"}},
		{name: "smallest room for defaults", limit: r + 2, wantStreams: 1, wantWatch: 1,
			wantLowered: []string{"--max-streams", "--max-watchers"}},
		{name: "a default takes what a given cap leaves", limit: 4096, streams: 3000, wantStreams: 3000, wantWatch: 4096 - r - 3000,
			wantLowered: []string{"--max-watchers"}},
		{name: "a default that fits is kept", limit: 4096, watchers: 10, wantStreams: 4096 - r - 10, wantWatch: 10,
			wantLowered: []string{"--max-streams"}},
		{name: "given caps that fit", limit: 4096, streams: 3000, watchers: 840, wantStreams: 3000, wantWatch: 840},
		{name: "given caps too many", limit: 4096, streams: 3000, watchers: 841,
			wantErr: []string{"--max-streams 3000 and --max-watchers 841", "4096", "at most 3840 together", "ulimit -Hn", "LimitNOFILE"}},
		{name: "given cap leaves no room for a default", limit: 4096, streams: 3840,
			wantErr: []string{"--max-streams 3840 needs", "4096", "lower --max-streams to at most 3839"}},
		{name: "given watchers too many", limit: 1024, watchers: 2000,
			wantErr: []string{"--max-watchers 2000 needs", "1024", "lower --max-watchers to at most 767"}},
		{name: "limit below the reserve", limit: 200,
			wantErr: []string{"open-file limit (RLIMIT_NOFILE) is 200", "below the 258 file descriptors", "ulimit -Hn"}},
		{name: "limit below the reserve, caps given", limit: 200, streams: 1, watchers: 1,
			wantErr: []string{"open-file limit (RLIMIT_NOFILE) is 200", "below the 258 file descriptors"}},
	}
	for _, tc := range tests {
		streams, watchers, lowered, err := fitCaps(tc.limit, tc.streams, tc.watchers)
		if len(tc.wantErr) > 0 {
			if err == nil {
				t.Errorf("%s: fitCaps(%d, %d, %d) = %d, %d; want an error", tc.name, tc.limit, tc.streams, tc.watchers, streams, watchers)
				continue
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: error %q lacks %q", tc.name, err, want)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if streams != tc.wantStreams || watchers != tc.wantWatch {
			t.Errorf("%s: caps %d, %d; want %d, %d", tc.name, streams, watchers, tc.wantStreams, tc.wantWatch)
		}
		if tc.limit < fileLimitUnbounded && uint64(streams+watchers+r) > tc.limit {
			t.Errorf("%s: caps %d + %d and the reserve exceed the limit %d", tc.name, streams, watchers, tc.limit)
		}
		var flags []string
		for _, l := range lowered {
			flags = append(flags, l.flag)
		}
		if strings.Join(flags, " ") != strings.Join(tc.wantLowered, " ") {
			t.Errorf("%s: lowered %v, want %v", tc.name, flags, tc.wantLowered)
		}
	}
}

// TestShedAnswersAreTheAPIs: what a request gets when the sidecar has no
// descriptor left is the 503 openapi.yaml gives its route.
func TestShedAnswersAreTheAPIs(t *testing.T) {
	t.Parallel()
	sp, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	ct := &conformingTransport{t: t, spec: sp}
	for _, rt := range []struct{ method, path, contentType string }{
		{http.MethodPost, "/v1/leases/job/claim", "application/json"},
		{http.MethodPost, "/v1/leases/billing%2Fnightly/renew", "application/json"},
		{http.MethodPost, "/v1/leases/job/release", "application/json"},
		{http.MethodGet, "/v1/leases/job/keepalive?owner=a", contentTypeProblem},
		{http.MethodGet, "/v1/watch", contentTypeProblem},
		{http.MethodGet, "/v1/leases", contentTypeProblem},
		{http.MethodGet, "/v1/leases/job/history", contentTypeProblem},
		{http.MethodGet, "/readyz", contentTypeProblem},
	} {
		req, err := http.NewRequest(rt.method, "http://127.0.0.1"+rt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp := shedResponse(req)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != rt.contentType || !resp.Close {
			t.Errorf("%s %s: %d %s (close %v); want 503 %s, closing", rt.method, rt.path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Close, rt.contentType)
		}
		if err := ct.check(req, resp, body); err != nil {
			t.Errorf("%s %s: the answer is not the API's: %v\n%s", rt.method, rt.path, err, body)
		}
		if !strings.Contains(string(body), "unavailable\"") || !strings.Contains(string(body), "RLIMIT_NOFILE") {
			t.Errorf("%s %s: the answer does not say unavailable and why: %s", rt.method, rt.path, body)
		}
	}
}

func TestShedAnswerToHEADHasNoBody(t *testing.T) {
	t.Parallel()
	req, err := http.NewRequest(http.MethodHead, "http://127.0.0.1/v1/leases", nil)
	if err != nil {
		t.Fatal(err)
	}
	var wire strings.Builder
	if err := shedResponse(req).Write(&wire); err != nil {
		t.Fatal(err)
	}
	head, body, _ := strings.Cut(wire.String(), "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 503 ") || !strings.Contains(head, "Connection: close") || body != "" {
		t.Errorf("HEAD answered:\n%s", wire.String())
	}
}

// scriptedListener is a listener whose accepts are given by the test.
type scriptedListener struct {
	accepts chan accepted
}

type accepted struct {
	conn net.Conn
	err  error
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	a, ok := <-l.accepts
	if !ok {
		return nil, net.ErrClosed
	}
	return a.conn, a.err
}
func (l *scriptedListener) Close() error   { return nil }
func (l *scriptedListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// TestFDListenerShedsWhenOutOfDescriptors: an accept that fails for want of
// a descriptor is not handed to net/http (whose back-off leaves the client
// waiting); the connection the spare descriptor lets in is answered 503,
// and the next one is served. (The e2e test TestFileLimit does this for
// real, with a process out of descriptors.)
func TestFDListenerShedsWhenOutOfDescriptors(t *testing.T) {
	t.Parallel()
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	shedServer, shedClient := net.Pipe()
	nextServer, nextClient := net.Pipe()
	t.Cleanup(func() { shedClient.Close(); nextServer.Close(); nextClient.Close() })
	script := &scriptedListener{accepts: make(chan accepted, 3)}
	script.accepts <- accepted{err: emfile}
	script.accepts <- accepted{conn: shedServer}
	script.accepts <- accepted{conn: nextServer}
	shed := prometheus.NewCounter(prometheus.CounterOpts{Name: "shed", Help: "connections shed"})
	ln, err := newFDListener(script, slog.New(slog.DiscardHandler), shed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })

	answered := make(chan *http.Response, 1)
	go func() {
		_ = shedClient.SetDeadline(time.Now().Add(30 * time.Second))
		const claim = `{"owner":"w1"}`
		req := fmt.Sprintf("POST /v1/leases/job/claim HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(claim), claim)
		if _, err := io.WriteString(shedClient, req); err != nil {
			t.Errorf("send the request: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(shedClient), nil)
		if err != nil {
			t.Errorf("read the answer: %v", err)
		}
		answered <- resp
	}()

	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("Accept: %v; want the connection after the shed one", err)
	}
	if c != nextServer {
		t.Fatal("Accept returned the connection it should have shed")
	}
	var resp *http.Response
	select {
	case resp = <-answered:
	case <-time.After(30 * time.Second):
		t.Fatal("the shed connection got no answer")
	}
	if resp == nil {
		return
	}
	var body struct {
		Acquired bool   `json:"acquired"`
		Reason   string `json:"reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusServiceUnavailable || body.Reason != "unavailable" || body.Acquired {
		t.Errorf("shed claim answered %d %+v (%v); want 503 unavailable", resp.StatusCode, body, err)
	}
	select {
	case <-ln.back:
	case <-time.After(30 * time.Second):
		t.Fatal("the spare descriptor was not taken back")
	}
	ln.mu.Lock()
	spare := ln.spare
	ln.mu.Unlock()
	if spare == nil {
		t.Error("no spare descriptor after the shed connection closed")
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(shed)
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 1 || mfs[0].GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Errorf("shed counter %v (%v), want 1", mfs, err)
	}

	// Any other error is the caller's.
	script.accepts <- accepted{err: errors.New("listener broken")}
	if _, err := ln.Accept(); err == nil || !strings.Contains(err.Error(), "listener broken") {
		t.Errorf("Accept after a plain error: %v", err)
	}
}

// TestFDListenerRearmsALostSpare: when the spare descriptor was lost (an
// open elsewhere took the descriptor a shed connection freed) and cannot be
// opened again, the next connection accepted is shed instead of served, so
// that its descriptor becomes the spare; otherwise the next exhaustion
// would leave connections waiting unanswered.
func TestFDListenerRearmsALostSpare(t *testing.T) {
	t.Parallel()
	lostServer, lostClient := net.Pipe()
	nextServer, nextClient := net.Pipe()
	t.Cleanup(func() { lostClient.Close(); nextServer.Close(); nextClient.Close() })
	script := &scriptedListener{accepts: make(chan accepted, 2)}
	script.accepts <- accepted{conn: lostServer}
	script.accepts <- accepted{conn: nextServer}
	shed := prometheus.NewCounter(prometheus.CounterOpts{Name: "shed", Help: "connections shed"})
	ln, err := newFDListener(script, slog.New(slog.DiscardHandler), shed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	// The spare is lost, and no descriptor is free to open it again until
	// the shed connection gives its own back.
	ln.mu.Lock()
	ln.spare.Close()
	ln.spare = nil
	var failing atomic.Bool
	failing.Store(true)
	ln.openSpare = func() (*os.File, error) {
		if failing.Swap(false) {
			return nil, os.NewSyscallError("open", syscall.EMFILE)
		}
		return os.Open(os.DevNull)
	}
	ln.mu.Unlock()

	go func() {
		_ = lostClient.SetDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.WriteString(lostClient, "GET /v1/leases HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		_, _ = io.Copy(io.Discard, lostClient)
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	if c != nextServer {
		t.Fatal("Accept served the connection whose descriptor had to become the spare")
	}
	select {
	case <-ln.back:
	case <-time.After(30 * time.Second):
		t.Fatal("the shed connection did not give its descriptor back")
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.spare == nil {
		t.Error("no spare descriptor after the connection was shed in its place")
	}
}
