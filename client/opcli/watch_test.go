package opcli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client/opcli"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/sidecar/api"
)

// watchScript is a stand-in for GET /v1/watch that speaks its contract
// (events with ids, ready, pings, end): each connection gets the next
// script, and the requests are recorded.
type watchScript struct {
	mu       sync.Mutex
	scripts  []string
	requests []*http.Request
	last     chan struct{} // closed when the connection after the scripts arrives
}

func (ws *watchScript) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ws.mu.Lock()
	n := len(ws.requests)
	ws.requests = append(ws.requests, r.Clone(context.Background()))
	ws.mu.Unlock()
	if r.URL.Path != "/v1/watch" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if n < len(ws.scripts) {
		fmt.Fprint(w, ws.scripts[n])
		return
	}
	w.(http.Flusher).Flush()
	close(ws.last)
	<-r.Context().Done()
}

func event(id int64, kind, task, owner string, token int64) string {
	return fmt.Sprintf("id: %d\nevent: %s\ndata: {\"id\":%d,\"task\":%q,\"kind\":%q,\"owner\":%q,\"token\":%d,\"at\":\"2026-12-02T17:34:02.123Z\",\"detail\":\"\"}\n\n",
		id, kind, id, task, kind, owner, token)
}

// watch prints each event once across the sidecar's ends of the stream,
// reconnecting with Last-Event-ID, in both output forms.
func TestWatchReconnects(t *testing.T) {
	t.Parallel()
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) {
			t.Parallel()
			ws := &watchScript{last: make(chan struct{}), scripts: []string{
				// Caught up at 5; one event live; cut as slow.
				": ping\n\nevent: ready\ndata: {\"position\": 5}\n\n" + event(6, "acquired", "billing/a", "w1", 3) +
					"event: end\ndata: {\"reason\":\"slow\",\"detail\":\"fell behind\"}\n\n",
				// The stream resumes after 6: an event repeated across the
				// reconnection is printed once; then the connection breaks.
				event(6, "acquired", "billing/a", "w1", 3) + ": ping\n\n" + event(7, "released", "billing/a", "w1", 3) + event(8, "expired", "billing/b", "w2", 1) + "id: 9\nevent: acq",
			}}
			hs := httptest.NewServer(ws)
			t.Cleanup(hs.Close)
			ctx, cancel := context.WithCancel(t.Context())
			go func() { <-ws.last; cancel() }()
			args := []string{"--addr", hs.URL, "--prefix", "billing/", "--since", "5"}
			if asJSON {
				args = append(args, "--json")
			}
			var stdout bytes.Buffer
			var stderr bytes.Buffer
			code := opcli.Main(ctx, "watch", args, func(string) string { return "" }, &stdout, &stderr)
			if code != 0 {
				t.Fatalf("watch ended with %d after an interrupt; stderr: %s", code, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("want events 6, 7 and 8 once each:\n%s", stdout.String())
			}
			for i, want := range []string{"acquired", "released", "expired"} {
				if asJSON {
					if !strings.HasPrefix(lines[i], "{") || !strings.Contains(lines[i], fmt.Sprintf(`"id":%d,`, 6+i)) || !strings.Contains(lines[i], `"kind":"`+want+`"`) {
						t.Errorf("line %d: %s, want event %d %s as one JSON object", i, lines[i], 6+i, want)
					}
				} else if !regexp.MustCompile(fmt.Sprintf(`^%d +2026-12-02T17:34:02\.123Z  %s `, 6+i, want)).MatchString(lines[i]) {
					t.Errorf("line %d: %q, want event %d %s", i, lines[i], 6+i, want)
				}
			}
			ws.mu.Lock()
			defer ws.mu.Unlock()
			if len(ws.requests) != 3 {
				t.Fatalf("%d connections, want 3", len(ws.requests))
			}
			first, second, third := ws.requests[0], ws.requests[1], ws.requests[2]
			if q := first.URL.Query(); q.Get("since") != "5" || q.Get("prefix") != "billing/" || first.Header.Get("Last-Event-ID") != "" {
				t.Errorf("first connection: %s, Last-Event-ID %q", first.URL, first.Header.Get("Last-Event-ID"))
			}
			if got := second.Header.Get("Last-Event-ID"); got != "6" || second.URL.Query().Get("prefix") != "billing/" {
				t.Errorf("after the end: Last-Event-ID %q, %s; want 6 and the prefix", got, second.URL)
			}
			if got := third.Header.Get("Last-Event-ID"); got != "8" {
				t.Errorf("after the broken connection: Last-Event-ID %q, want 8", got)
			}
			if !strings.Contains(stderr.String(), "reconnecting") {
				t.Errorf("stderr says nothing of reconnecting: %s", stderr.String())
			}
		})
	}
}

// From now, a reconnection resumes at the position the sidecar was ready at.
func TestWatchFromNowResumesAtReady(t *testing.T) {
	t.Parallel()
	ws := &watchScript{last: make(chan struct{}), scripts: []string{
		"event: ready\ndata: {\"position\": 41}\n\nevent: end\ndata: {\"reason\":\"shutdown\",\"detail\":\"\"}\n\n",
	}}
	hs := httptest.NewServer(ws)
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-ws.last; cancel() }()
	var stdout, stderr bytes.Buffer
	if code := opcli.Main(ctx, "watch", []string{"--addr", hs.URL}, func(string) string { return "" }, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if q := ws.requests[0].URL.RawQuery; q != "" {
		t.Errorf("first connection from now asked %q, want no since", q)
	}
	if got := ws.requests[1].Header.Get("Last-Event-ID"); got != "41" {
		t.Errorf("reconnection: Last-Event-ID %q, want the ready position 41", got)
	}
	if !strings.Contains(stderr.String(), "caught up at event 41") {
		t.Errorf("stderr: %s", stderr.String())
	}
}

// A sidecar without the watch route: the first answer ends the command,
// with 69 as any answer that is not a sidecar's.
func TestWatchRefused(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(hs.Close)
	leasehold(t, nil, "watch", "--addr", hs.URL).expect(t, exitcode.Unavailable)
}

// watch on a real sidecar and straight on a store, both stores: the
// history it replays with --since 0, then a change made meanwhile, as JSON
// lines.
func TestWatch(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, conn []string, _ api.StoreStatusKind) {
		leasehold(t, nil, "claim", with(conn, "job", "--owner", "w1")...).expect(t, 0)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		out := &lineWriter{lines: make(chan string, 16)}
		done := make(chan int, 1)
		go func() {
			var stderr bytes.Buffer
			done <- opcli.Main(ctx, "watch", with(conn, "--since", "0", "--prefix", "jo", "--json"), func(string) string { return "" }, out, &stderr)
		}()
		next := func() api.Event {
			t.Helper()
			select {
			case l := <-out.lines:
				var e api.Event
				if err := json.Unmarshal([]byte(l), &e); err != nil {
					t.Fatalf("watch line %q: %v", l, err)
				}
				return e
			case <-time.After(30 * time.Second):
				t.Fatal("no watch event within 30 s")
				return api.Event{}
			}
		}
		if e := next(); e.Kind != api.EventKindAcquired || e.Task != "job" || e.Owner != "w1" {
			t.Errorf("replayed: %+v", e)
		}
		leasehold(t, nil, "claim", with(conn, "other", "--owner", "w1")...).expect(t, 0) // outside the prefix
		leasehold(t, nil, "release", with(conn, "job", "--owner", "w1")...).expect(t, 0)
		if e := next(); e.Kind != api.EventKindReleased || e.Task != "job" {
			t.Errorf("live: %+v", e)
		}
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("watch exit %d after an interrupt", code)
		}
	})
}

// lineWriter hands each line written to it to a channel.
type lineWriter struct {
	buf   []byte
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.lines <- string(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// A reset (the store's history went back under the sidecar) starts the
// watch over: one line on stderr says so, the replayed events are printed
// although their ids are below the events printed before, and a
// reconnection resumes from the replayed history, not the old position.
func TestWatchResetStartsOver(t *testing.T) {
	t.Parallel()
	ws := &watchScript{last: make(chan struct{}), scripts: []string{
		"event: ready\ndata: {\"position\": 5}\n\n" + event(6, "acquired", "old", "w1", 9) +
			"id: 0\nevent: reset\ndata: {\"position\":6,\"newest\":3,\"detail\":\"restored\"}\n\n" +
			event(1, "acquired", "a", "w1", 1) + event(2, "released", "a", "w1", 1) + event(3, "acquired", "b", "w2", 1) +
			"event: ready\ndata: {\"position\": 3}\n\n" + event(4, "acquired", "c", "w3", 1) + "id: 5\nevent: acq",
	}}
	hs := httptest.NewServer(ws)
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	go func() { <-ws.last; cancel() }()
	var stdout, stderr bytes.Buffer
	if code := opcli.Main(ctx, "watch", []string{"--addr", hs.URL, "--json"}, func(string) string { return "" }, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var ids []int64
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var e api.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		ids = append(ids, e.Id)
	}
	if fmt.Sprint(ids) != "[6 1 2 3 4]" {
		t.Errorf("printed events %v, want [6 1 2 3 4]: the old one, then the restored history and what followed", ids)
	}
	if n := strings.Count(stderr.String(), "history went back"); n != 1 || !strings.Contains(stderr.String(), "starting over") {
		t.Errorf("stderr says so %d times, want one line:\n%s", n, stderr.String())
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.requests) != 2 {
		t.Fatalf("%d connections, want 2", len(ws.requests))
	}
	if got := ws.requests[1].Header.Get("Last-Event-ID"); got != "4" {
		t.Errorf("reconnection after the reset: Last-Event-ID %q, want 4", got)
	}
}

// fakeServer answers every request with handler, counting them.
func fakeServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		handler(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs, &n
}

// watch against a server that is not a sidecar fails with a message, at
// once: it does not reconnect forever.
func TestWatchNotASidecar(t *testing.T) {
	t.Parallel()
	answer := func(status int, contentType, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if contentType != "" {
				w.Header().Set("Content-Type", contentType)
			}
			w.WriteHeader(status)
			fmt.Fprint(w, body)
		}
	}
	for _, c := range []struct {
		name    string
		handler http.HandlerFunc
		says    string
	}{
		{"404", answer(404, "text/plain", "404 page not found\n"), "404"},
		{"HTML", answer(200, "text/html; charset=utf-8", "<!doctype html><title>router</title><p>Welcome</p>\n"), "text/html"},
		{"JSON", answer(200, "application/json", `{"leases":[]}`+"\n"), "application/json"},
		{"no Content-Type", answer(200, "", "event: ready\ndata: {\"position\":1}\n\n"), "text/event-stream"},
		{"another event stream", answer(200, "text/event-stream", "event: message\ndata: hello\n\n"), `"message"`},
		{"garbled event", answer(200, "text/event-stream", "id: 7\nevent: acquired\ndata: {\"id\":\"seven\"}\n\n"), "acquired"},
		{"garbled ready", answer(200, "text/event-stream", "event: ready\ndata: <html>\n\n"), "ready"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			hs, n := fakeServer(t, c.handler)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			code := opcli.Main(ctx, "watch", []string{"--addr", hs.URL}, func(string) string { return "" }, &stdout, &stderr)
			if code != exitcode.Unavailable || ctx.Err() != nil {
				t.Fatalf("exit %d (context: %v), want %d at once; stderr:\n%s", code, ctx.Err(), exitcode.Unavailable, stderr.String())
			}
			if msg := stderr.String(); !strings.Contains(msg, "not a leasehold sidecar") || !strings.Contains(msg, c.says) {
				t.Errorf("stderr does not say what is wrong (want %q):\n%s", c.says, msg)
			}
			if got := n.Load(); got != 1 {
				t.Errorf("%d requests, want 1", got)
			}
		})
	}
}

// watch against a server that accepts the connection and never answers
// gives up with a message (after watchAnswerTimeout), rather than waiting
// forever.
func TestWatchServerNeverAnswers(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := opcli.Main(ctx, "watch", []string{"--addr", "http://" + l.Addr().String()}, func(string) string { return "" }, &stdout, &stderr)
	if code != exitcode.Unavailable || ctx.Err() != nil {
		t.Fatalf("exit %d (context: %v), want %d before the test's deadline; stderr:\n%s", code, ctx.Err(), exitcode.Unavailable, stderr.String())
	}
	if !strings.Contains(stderr.String(), "did not answer") {
		t.Errorf("stderr: %s", stderr.String())
	}
}

// watch --since above the store's newest event, on a sidecar and straight
// on a store, both stores: a line on stderr, then the whole history, then
// what follows; never silence.
func TestWatchSinceAheadStartsOver(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, conn []string, _ api.StoreStatusKind) {
		leasehold(t, nil, "claim", with(conn, "ahead-job", "--owner", "w1")...).expect(t, 0)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		out := &lineWriter{lines: make(chan string, 16)}
		stderr := &lockedbuf.Buffer{}
		done := make(chan int, 1)
		go func() {
			done <- opcli.Main(ctx, "watch", with(conn, "--since", "1000000", "--prefix", "ahead-", "--json"), func(string) string { return "" }, out, stderr)
		}()
		next := func() api.Event {
			t.Helper()
			select {
			case l := <-out.lines:
				var e api.Event
				if err := json.Unmarshal([]byte(l), &e); err != nil {
					t.Fatalf("watch line %q: %v", l, err)
				}
				return e
			case <-time.After(30 * time.Second):
				t.Fatalf("no watch event within 30 s; stderr: %s", stderr.String())
				return api.Event{}
			}
		}
		if e := next(); e.Task != "ahead-job" || e.Kind != api.EventKindAcquired {
			t.Errorf("replayed: %+v", e)
		}
		leasehold(t, nil, "release", with(conn, "ahead-job", "--owner", "w1")...).expect(t, 0)
		if e := next(); e.Task != "ahead-job" || e.Kind != api.EventKindReleased {
			t.Errorf("live: %+v", e)
		}
		if n := strings.Count(stderr.String(), "history went back"); n != 1 {
			t.Errorf("stderr says so %d times, want once:\n%s", n, stderr.String())
		}
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("watch exit %d after an interrupt", code)
		}
	})
}

// orderedLines records the lines written to it, stdout's and stderr's
// alike, in the order they were written, and closes caughtUp at the first
// line that says the watch caught up.
type orderedLines struct {
	mu       sync.Mutex
	buf      []byte
	lines    []string
	caughtUp chan struct{}
}

func (w *orderedLines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if strings.HasPrefix(l, "watching (caught up") && len(w.caughtUp) == 0 {
			close(w.caughtUp)
		}
		w.lines = append(w.lines, l)
	}
}

// watch --since on a history of many events, on a sidecar and straight on
// a store, both stores: every replayed event is printed before the line
// that says the watch caught up, and the line names the last of them.
func TestWatchCaughtUpAfterEveryReplayedEvent(t *testing.T) {
	t.Parallel()
	const n = 120
	eachTarget(t, func(t *testing.T, conn []string, _ api.StoreStatusKind) {
		for i := range n {
			leasehold(t, nil, "claim", with(conn, fmt.Sprintf("job-%03d", i), "--owner", "w1")...).expect(t, 0)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		out := &orderedLines{caughtUp: make(chan struct{})}
		done := make(chan int, 1)
		go func() {
			done <- opcli.Main(ctx, "watch", with(conn, "--since", "0"), func(string) string { return "" }, out, out)
		}()
		select {
		case <-out.caughtUp:
		case <-ctx.Done():
			t.Fatal("the watch never said it caught up")
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("watch exit %d after an interrupt", code)
		}
		out.mu.Lock()
		defer out.mu.Unlock()
		var before []int64
		var at int64 = -1
		for _, l := range out.lines {
			if _, err := fmt.Sscanf(l, "watching (caught up at event %d)", &at); err == nil {
				break
			}
			var id int64
			if _, err := fmt.Sscan(l, &id); err != nil {
				t.Fatalf("line %q is neither an event nor caught up", l)
			}
			before = append(before, id)
		}
		if len(before) != n || before[n-1] != at {
			t.Fatalf("caught up at %d after %d events (the last %v), want after all %d replayed, up to its position:\n%s",
				at, len(before), before[max(len(before)-1, 0):], n, strings.Join(out.lines, "\n"))
		}
	})
}

// watch's columns line up: values of usual widths from the first line,
// and after a wider value, every line after it.
func TestWatchColumnsLineUp(t *testing.T) {
	t.Parallel()
	ws := &watchScript{last: make(chan struct{}), scripts: []string{
		"event: ready\ndata: {\"position\": 8}\n\n" +
			event(9, "acquired", "a", "w1", 1) +
			event(10, "taken_over", "billing/nightly", "host-1#42#aa", 7) +
			event(11, "released", "x", "w", 12) +
			event(12, "acquired", "reports/a-task-name-wider-than-usual", "a-worker-name-wider-than-usual#1#bb", 1) +
			event(13, "lost", "y", "w3", 2),
	}}
	hs := httptest.NewServer(ws)
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-ws.last; cancel() }()
	var stdout, stderr bytes.Buffer
	if code := opcli.Main(ctx, "watch", []string{"--addr", hs.URL}, func(string) string { return "" }, &stdout, &stderr); code != 0 {
		t.Fatalf("watch ended with %d; stderr: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("want 5 events:\n%s", stdout.String())
	}
	// Where each line's task, owner and token columns start.
	starts := func(line string, task, owner string) [3]int {
		return [3]int{strings.Index(line, task), strings.Index(line, owner), strings.Index(line, "token ")}
	}
	s := [][3]int{
		starts(lines[0], " a ", " w1 "), starts(lines[1], " billing/nightly ", " host-1#42#aa "), starts(lines[2], " x ", " w "),
		starts(lines[3], " reports/", " a-worker"), starts(lines[4], " y ", " w3 "),
	}
	if s[0] != s[1] || s[1] != s[2] || s[3] != s[4] {
		t.Errorf("columns do not line up (task, owner, token starts %v):\n%s", s, stdout.String())
	}
}
