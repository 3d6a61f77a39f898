//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	serve "github.com/leasehold/leasehold/sidecar"
)

// The open-file limit (issue 16 §1): every keepalive and watch stream holds
// a descriptor, so `leasehold serve` fits its stream caps to RLIMIT_NOFILE
// at start, and answers 503 at once, rather than leaving the client
// waiting, when descriptors run out anyway. Each case runs a sidecar with a
// low limit, set (soft and hard) by bash's ulimit before it execs leasehold.

// fdLimit is the open-file limit the sidecars here run with: the reserve
// and room for 64 streams.
const fdLimit = serve.FileReserve + 64

// ulimitWrapper runs the command after it with an open-file limit of n.
func ulimitWrapper(n int) []string {
	return []string{"bash", "-c", `ulimit -n "$0" && exec "$@"`, strconv.Itoa(n)}
}

// answerDeadline bounds the wait for each answer below: a sidecar that
// leaves a connection unanswered (in its listen backlog) fails the test
// here, rather than hanging it.
const answerDeadline = 20 * time.Second

// streamClient opens each stream on a connection of its own and gives up on
// an answer whose headers take longer than answerDeadline.
func streamClient() *http.Client {
	return &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: answerDeadline, DisableKeepAlives: true}}
}

// tryStream asks for a stream; it returns the 200 response (the caller
// closes it), or the refusal's status and body.
func tryStream(t *testing.T, hc *http.Client, url string) (stream *http.Response, status int, body string) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v (no answer within %s)", url, err, answerDeadline)
	}
	if resp.StatusCode == http.StatusOK {
		t.Cleanup(func() { resp.Body.Close() })
		return resp, http.StatusOK, ""
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return nil, resp.StatusCode, string(raw)
}

// expectUnavailable decodes a problem, failing the test unless it is a 503
// unavailable problem.
func expectUnavailable(t *testing.T, what string, status int, body string) map[string]any {
	t.Helper()
	var p map[string]any
	_ = json.Unmarshal([]byte(body), &p)
	if status != http.StatusServiceUnavailable || p["type"] != "urn:leasehold:problem:unavailable" {
		t.Fatalf("%s: %d %s, want 503 urn:leasehold:problem:unavailable", what, status, body)
	}
	return p
}

func TestFileLimit(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			store := kind.url(t)
			t.Run("given caps", func(t *testing.T) { t.Parallel(); testGivenCapsRefused(t, store) })
			t.Run("default caps", func(t *testing.T) { t.Parallel(); testDefaultCapsLowered(t, store) })
			t.Run("out of descriptors", func(t *testing.T) { t.Parallel(); testOutOfDescriptors(t, store) })
		})
	}
}

// A cap given that the limit cannot hold is refused at start, naming the
// flag, the limit and how to raise it; nothing listens.
func testGivenCapsRefused(t *testing.T, store string) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--max-streams", "20000"}, []string{"--max-streams 20000", fmt.Sprint(fdLimit), "ulimit -Hn", "lower --max-streams to at most 63"}},
		{[]string{"--max-streams", "40", "--max-watchers", "40"}, []string{"--max-streams 40 and --max-watchers 40", "at most 64 together"}},
	} {
		argv := append(ulimitWrapper(fdLimit), leaseholdBin, "serve", "--listen", "127.0.0.1:0", "--store", store)
		// A sidecar that starts instead of refusing is stopped here.
		ctx, cancel := context.WithTimeout(context.Background(), answerDeadline)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], tc.args...)...)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
			t.Errorf("serve %v with an open-file limit of %d: %v, want exit status 1\n%s", tc.args, fdLimit, err, out)
		}
		for _, want := range tc.want {
			if !strings.Contains(string(out), want) {
				t.Errorf("serve %v: the refusal lacks %q:\n%s", tc.args, want, out)
			}
		}
		if strings.Contains(string(out), "listening") {
			t.Errorf("serve %v listened before refusing:\n%s", tc.args, out)
		}
	}
}

// Default caps are lowered to fit, with a warning; streams and watchers
// beyond them are answered 503 at once, well before descriptors run out.
func testDefaultCapsLowered(t *testing.T, store string) {
	// Soft limit below the hard one: serve raises it (the caps fit the hard limit).
	wrapper := []string{"bash", "-c", `ulimit -Sn 64 && ulimit -Hn "$0" && exec "$@"`, strconv.Itoa(fdLimit)}
	s, err := launchWrapped(t, wrapper, store)
	if err != nil {
		t.Fatal(err)
	}
	s.waitReady()
	logs := s.logs.String()
	for _, want := range []string{"default stream caps lowered", "max_streams=\"60 (default 20000)\"", "max_watchers=\"4 (default 1000)\"",
		fmt.Sprintf("open_file_limit=%d", fdLimit)} {
		if !strings.Contains(logs, want) {
			t.Errorf("serve's log lacks %q:\n%s", want, logs)
		}
	}

	hc := streamClient()
	opened := 0
	for ; opened <= fdLimit; opened++ {
		url := fmt.Sprintf("%s/v1/leases/cap-%d/keepalive?owner=w&ttl_ms=60000", s.base, opened)
		if _, status, body := tryStream(t, hc, url); status != http.StatusOK {
			p := expectUnavailable(t, fmt.Sprintf("keepalive stream %d", opened+1), status, body)
			if p["title"] != "Too many streams" {
				t.Errorf("refusal %s, want Too many streams", body)
			}
			break
		}
	}
	if opened != 60 {
		t.Errorf("%d keepalive streams opened before a 503, want the lowered cap, 60", opened)
	}
	watchers := 0
	for ; watchers <= fdLimit; watchers++ {
		if _, status, body := tryStream(t, hc, s.base+"/v1/watch"); status != http.StatusOK {
			expectUnavailable(t, fmt.Sprintf("watch stream %d", watchers+1), status, body)
			break
		}
	}
	if watchers != 4 {
		t.Errorf("%d watch streams opened before a 503, want the lowered cap, 4", watchers)
	}
	if r := s.call("GET", "/v1/status", nil); r.Status != http.StatusOK || r.Body["streams"].(map[string]any)["max"] != float64(60) {
		t.Errorf("status %s, want streams.max 60", r.Raw)
	}
}

// Out of descriptors for another cause (here, idle connections the
// sidecar keeps open), a new stream or claim is answered 503 unavailable at
// once, the streams already open keep renewing, and once descriptors are
// free again new streams are served.
//
// PostgreSQL's pool is held at one size (pool_min_conns = pool_max_conns):
// a pool that grows while descriptors are exhausted may take the one a shed
// connection just freed before the listener takes it back as its spare, and
// the next connection then waits until a descriptor frees (fdListener says
// so); the test's idle connections free none.
func testOutOfDescriptors(t *testing.T, store string) {
	if strings.HasPrefix(store, "postgres") {
		sep := "?"
		if strings.Contains(store, "?") {
			sep = "&"
		}
		store += sep + "pool_min_conns=4&pool_max_conns=4"
	}
	s, err := launchWrapped(t, ulimitWrapper(fdLimit), store, "--max-streams", "8", "--max-watchers", "2")
	if err != nil {
		t.Fatal(err)
	}
	s.waitReady()
	var held []*keepalive
	for i := range 3 {
		k := s.openKeepalive(fmt.Sprintf("/v1/leases/held-%d/keepalive?owner=w%d&ttl_ms=1000", i, i))
		if ev := k.next(); ev.Name != "acquired" {
			t.Fatalf("stream %d: first event %+v, want acquired", i, ev)
		}
		held = append(held, k)
	}

	// Idle keep-alive connections, each answered once, until the sidecar
	// has no descriptor left and sheds one.
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	addr := strings.TrimPrefix(s.base, "http://")
	exhaust := func() {
		t.Helper()
		for i := 0; i <= fdLimit; i++ {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("dial %s: %v", addr, err)
			}
			idle = append(idle, c)
			_ = c.SetDeadline(time.Now().Add(answerDeadline))
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
				t.Fatalf("connection %d: send: %v", i, err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("connection %d: no answer (%v): a connection the sidecar has no descriptor for waits unanswered", i, err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
			case http.StatusServiceUnavailable:
				expectUnavailable(t, fmt.Sprintf("idle connection %d", i), resp.StatusCode, string(raw))
				return
			default:
				t.Fatalf("connection %d: %d %s", i, resp.StatusCode, raw)
			}
		}
		t.Fatalf("%d connections open and none shed: the sidecar's limit is not %d", len(idle), fdLimit)
	}
	// outOfDescriptors exhausts the descriptors, then asks: the answer must
	// be 503 at once. The sidecar's other descriptors come and go (its
	// store's pool may close a connection), so a probe that finds one
	// freed since is served; it is closed, and the descriptors exhausted
	// again. A probe that waits unanswered fails at once (its deadline).
	outOfDescriptors := func(what string, ask func() (status int, body string, close func())) {
		t.Helper()
		for attempt := 1; attempt <= 5; attempt++ {
			exhaust()
			status, body, done := ask()
			if status == http.StatusServiceUnavailable {
				expectUnavailable(t, what, status, body)
				return
			}
			if status != http.StatusOK {
				t.Fatalf("%s: %d %s, want 503 unavailable", what, status, body)
			}
			done()
			t.Logf("%s: served on attempt %d: a descriptor was freed since the sidecar shed one; exhausting again", what, attempt)
		}
		t.Fatalf("%s: served five times after the descriptors were exhausted, never answered 503", what)
	}
	// Renewals received so far do not count.
	for _, k := range held {
		for len(k.events) > 0 {
			<-k.events
		}
	}

	hc := streamClient()
	stream := func(url string) func() (int, string, func()) {
		return func() (int, string, func()) {
			resp, status, body := tryStream(t, hc, url)
			return status, body, func() {
				if resp != nil {
					resp.Body.Close()
				}
			}
		}
	}
	outOfDescriptors("a keepalive stream out of descriptors", stream(s.base+"/v1/leases/late/keepalive?owner=late&ttl_ms=1000"))
	outOfDescriptors("a watch stream out of descriptors", stream(s.base+"/v1/watch"))
	outOfDescriptors("a claim out of descriptors", func() (int, string, func()) {
		ctx, cancel := context.WithTimeout(context.Background(), answerDeadline)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/leases/late/claim", strings.NewReader(`{"owner":"late"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("claim out of descriptors: %v", err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			var claim map[string]any
			_ = json.Unmarshal(raw, &claim)
			if claim["acquired"] != false || claim["reason"] != "unavailable" {
				t.Errorf("claim out of descriptors: %s, want {acquired:false, reason:unavailable}", raw)
			}
			// A claim's 503 is its unavailable body, not a problem.
			return http.StatusServiceUnavailable, `{"type":"urn:leasehold:problem:unavailable"}`, func() {}
		}
		return resp.StatusCode, string(raw), func() {}
	})

	// The streams held before keep renewing.
	for i, k := range held {
		for range 2 {
			if ev := k.next(); ev.Name != "renewed" {
				t.Fatalf("held stream %d out of descriptors: event %+v, want renewed", i, ev)
			}
		}
	}

	// Descriptors free again: a new stream is served.
	for _, c := range idle {
		c.Close()
	}
	idle = nil
	deadline := time.Now().Add(answerDeadline)
	for {
		stream, status, body := tryStream(t, hc, s.base+"/v1/leases/after/keepalive?owner=after&ttl_ms=1000")
		if status == http.StatusOK {
			stream.Body.Close()
			break
		}
		expectUnavailable(t, "a keepalive stream after descriptors were freed", status, body)
		if time.Now().After(deadline) {
			t.Fatalf("still 503 %s after the idle connections closed", answerDeadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
	logs := s.logs.String()
	if !strings.Contains(logs, "out of file descriptors") {
		t.Errorf("the sidecar did not log that it ran out of descriptors:\n%s", logs)
	}
	resp, err := hc.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var shedCount float64
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "leasehold_connections_shed_total "); ok {
			shedCount, _ = strconv.ParseFloat(v, 64)
		}
	}
	if shedCount < 4 { // an idle connection, a keepalive, a watch and a claim at least
		t.Errorf("leasehold_connections_shed_total %v, want at least 4", shedCount)
	}
}
