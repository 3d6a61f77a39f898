package sidecar

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

func init() {
	// The document declares the stream as text; the check reads it whole.
	openapi3filter.RegisterBodyDecoder("text/event-stream", func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(body)
		return string(b), err
	})
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id   string // the id: line, empty when none
	name string
	data string
}

// stream is an open keepalive stream.
type sseStream struct {
	t      *testing.T
	ts     *testServer
	req    *http.Request
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent
	ended  chan struct{}

	mu  sync.Mutex
	raw strings.Builder

	schemas map[string]string // each event's data schema in openapi.yaml
}

// keepaliveSchemas are the keepalive stream's events and their data.
var keepaliveSchemas = map[string]string{"acquired": "Lease", "renewed": "Lease", "lost": "KeepaliveLost", "released": "KeepaliveReleased"}

// openStream starts GET path and, on 200, reads events in the background.
// Other statuses are returned as a response (checked against openapi.yaml).
func (ts *testServer) openStream(path string) (*sseStream, response) {
	ts.t.Helper()
	return ts.openStreamWith(path, nil, keepaliveSchemas)
}

// openStreamWith is openStream with request headers, for a stream whose
// events have the given data schemas.
func (ts *testServer) openStreamWith(path string, header http.Header, schemas map[string]string) (*sseStream, response) {
	ts.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+path, nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		cancel()
		ts.t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ct := &conformingTransport{t: ts.t, spec: ts.spec(), base: nil}
		if err := ct.check(req, resp, body); err != nil {
			ts.t.Errorf("GET %s → %d does not conform to openapi.yaml: %v\nbody: %s", path, resp.StatusCode, err, body)
		}
		return nil, response{status: resp.StatusCode, header: resp.Header, body: body}
	}
	s := &sseStream{t: ts.t, ts: ts, req: req, resp: resp, cancel: cancel, events: make(chan sseEvent, 1000), ended: make(chan struct{}), schemas: schemas}
	ts.t.Cleanup(s.close)
	go s.read()
	return s, response{status: resp.StatusCode, header: resp.Header}
}

func (s *sseStream) read() {
	defer close(s.ended)
	sc := bufio.NewScanner(s.resp.Body)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		s.mu.Lock()
		s.raw.WriteString(line + "\n")
		s.mu.Unlock()
		switch {
		case line == "":
			if ev.name != "" {
				s.events <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// close disconnects the client.
func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
	<-s.ended
}

// next returns the next event, failing the test if none comes in 10 s.
func (s *sseStream) next() sseEvent {
	s.t.Helper()
	select {
	case ev := <-s.events:
		s.checkData(ev)
		return ev
	case <-s.ended:
		select {
		case ev := <-s.events:
			s.checkData(ev)
			return ev
		default:
		}
		s.t.Fatalf("the stream ended with no further event; it said:\n%s", s.text())
	case <-time.After(10 * time.Second):
		s.t.Fatalf("no event within 10s; the stream said:\n%s", s.text())
	}
	return sseEvent{}
}

func (s *sseStream) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw.String()
}

// checkData validates an event's data against the schema openapi.yaml gives it.
func (s *sseStream) checkData(ev sseEvent) {
	s.t.Helper()
	schema := s.schemas[ev.name]
	if schema == "" {
		s.t.Fatalf("event %q is not one openapi.yaml declares", ev.name)
	}
	var v any
	if err := json.Unmarshal([]byte(ev.data), &v); err != nil {
		s.t.Fatalf("event %s data is not JSON: %v: %s", ev.name, err, ev.data)
	}
	if err := s.ts.spec().doc.Components.Schemas[schema].Value.VisitJSON(v); err != nil {
		s.t.Fatalf("event %s data does not match %s: %v: %s", ev.name, schema, err, ev.data)
	}
}

// lease decodes an acquired or renewed event.
func (ev sseEvent) lease(t *testing.T) api.Lease {
	t.Helper()
	var l api.Lease
	if err := json.Unmarshal([]byte(ev.data), &l); err != nil {
		t.Fatalf("event %s: %v", ev.name, err)
	}
	return l
}

// waitEnded waits for the server to end the stream, then checks the whole
// response against openapi.yaml.
func (s *sseStream) waitEnded() {
	s.t.Helper()
	select {
	case <-s.ended:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("the stream did not end; it said:\n%s", s.text())
	}
	body := s.text()
	ct := &conformingTransport{t: s.t, spec: s.ts.spec()}
	if err := ct.check(s.req, s.resp, []byte(body)); err != nil {
		s.t.Errorf("the stream does not conform to openapi.yaml: %v", err)
	}
}

func (ts *testServer) spec() *specRouter {
	ts.t.Helper()
	sp, err := spec()
	if err != nil {
		ts.t.Fatal(err)
	}
	return sp
}

// waitFree polls GET until the task is not held.
func (ts *testServer) waitFree(task string) {
	ts.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st := decode[api.LeaseState](ts.t, ts.get("/v1/leases/"+task)); !st.Held {
			return
		}
		if time.Now().After(deadline) {
			ts.t.Fatalf("task %s still held 10s after its stream ended", task)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestKeepaliveHoldsUntilTheClientLeaves(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		s, r := ts.openStream("/v1/leases/nightly/keepalive?owner=w1&ttl_ms=500&note=n")
		if s == nil {
			t.Fatalf("keepalive answered %d: %s", r.status, r.body)
		}
		if ct := r.header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("Content-Type %q", ct)
		}
		ev := s.next()
		first := ev.lease(t)
		if ev.name != "acquired" || first.Owner != "w1" || first.Note != "n" || first.TtlMs != 500 || first.Token < 1 {
			t.Fatalf("first event %s %s, want acquired for w1", ev.name, ev.data)
		}
		// Renewals arrive on their own, under the same token.
		for i := 1; i <= 2; i++ {
			ev = s.next()
			l := ev.lease(t)
			if ev.name != "renewed" || l.Token != first.Token || l.RenewCount != int64(i) {
				t.Fatalf("event %d: %s %s, want renewed with renew_count %d", i, ev.name, ev.data, i)
			}
		}
		// Others are refused while the stream lasts.
		expect(t, ts.post("/v1/leases/nightly/claim", body{"owner": "w2"}), http.StatusConflict)
		if !strings.Contains(s.text(), ": ping") {
			// 500 ms ttl: pings every 100 ms, renewals every 200 ms.
			t.Errorf("no ping comment between renewals:\n%s", s.text())
		}
		// The client leaves: the sidecar releases.
		s.close()
		ts.waitFree("nightly")
		r = ts.post("/v1/leases/nightly/claim", body{"owner": "w2"})
		expect(t, r, http.StatusOK)
		if got := decode[api.ClaimAcquired](t, r).Lease.Token; got != first.Token+1 {
			t.Fatalf("next holder's token %d, want %d", got, first.Token+1)
		}
	})
}

func TestKeepaliveHeldAndUnavailableAreJSON(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	expect(t, ts.post("/v1/leases/job/claim", body{"owner": "a", "ttl_ms": 60000}), http.StatusOK)
	s, r := ts.openStream("/v1/leases/job/keepalive?owner=b")
	if s != nil || r.status != http.StatusConflict {
		t.Fatalf("keepalive on a held task: %d, want 409", r.status)
	}
	if held := decode[api.ClaimHeld](t, r); held.Holder.Owner != "a" || held.Reason != api.Held {
		t.Fatalf("409 body %s", r.body)
	}

	down := newTestServer(t, withStore(failingClaimStore{openSQLite(t, true)}))
	s, r = down.openStream("/v1/leases/job/keepalive?owner=b")
	if s != nil || r.status != http.StatusServiceUnavailable {
		t.Fatalf("keepalive on a failing store: %d, want 503", r.status)
	}
	if u := decode[api.ClaimUnavailable](t, r); u.Reason != api.ClaimUnavailableReasonUnavailable || u.Detail == "" {
		t.Fatalf("503 body %s", r.body)
	}
}

func TestKeepaliveWaitsForARelease(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	expect(t, ts.post("/v1/leases/job/claim", body{"owner": "a", "ttl_ms": 60000}), http.StatusOK)
	opened := make(chan *sseStream, 1)
	go func() {
		s, _ := ts.openStream("/v1/leases/job/keepalive?owner=b&wait_ms=30000")
		opened <- s
	}()
	// Release once the waiter has asked the store at least once (a's claim
	// was the first).
	deadline := time.Now().Add(10 * time.Second)
	claimsRE := regexp.MustCompile(`leasehold_store_operation_duration_seconds_count\{operation="claim"\} (\d+)`)
	for {
		if m := claimsRE.FindStringSubmatch(string(ts.get("/metrics").body)); m != nil && m[1] != "0" && m[1] != "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiting stream never tried to claim")
		}
		time.Sleep(5 * time.Millisecond)
	}
	expect(t, ts.post("/v1/leases/job/release", body{"owner": "a"}), http.StatusOK)
	s := <-opened
	if s == nil {
		t.Fatal("the waiting stream was refused after the release")
	}
	if ev := s.next(); ev.name != "acquired" || ev.lease(t).Owner != "b" {
		t.Fatalf("first event %s %s, want acquired by b", ev.name, ev.data)
	}
}

func TestKeepaliveWaitRunsOut(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	expect(t, ts.post("/v1/leases/job/claim", body{"owner": "a", "ttl_ms": 60000}), http.StatusOK)
	if s, r := ts.openStream("/v1/leases/job/keepalive?owner=b&wait_ms=200"); s != nil || r.status != http.StatusConflict {
		t.Fatalf("keepalive after its wait ran out: %d, want 409", r.status)
	}
}

func TestKeepaliveMakesAnOwner(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	s, r := ts.openStream("/v1/leases/job/keepalive")
	if s == nil {
		t.Fatalf("keepalive answered %d: %s", r.status, r.body)
	}
	l := s.next().lease(t)
	if strings.Count(l.Owner, "#") != 2 || l.TtlMs != 30000 {
		t.Fatalf("made owner %q (ttl %d), want <host>#<pid>#<random> and the default ttl", l.Owner, l.TtlMs)
	}
	s2, _ := ts.openStream("/v1/leases/other/keepalive")
	if l2 := s2.next().lease(t); l2.Owner == l.Owner {
		t.Fatalf("two streams got the same owner %q", l.Owner)
	}
}

func TestKeepaliveReportsLoss(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		s, _ := ts.openStream("/v1/leases/job/keepalive?owner=w1&ttl_ms=500")
		first := s.next().lease(t)
		// Another process of the store ends the lease under the stream's
		// feet (a release through this sidecar would end the stream
		// first: TestReleaseEndsTheLocalStream): the next renewal is
		// refused, and the client is told why.
		releaseElsewhere(t, ts, "job", "w1", first.Token)
		var ev sseEvent
		for ev = s.next(); ev.name == "renewed"; ev = s.next() {
		}
		var lost api.KeepaliveLost
		if err := json.Unmarshal([]byte(ev.data), &lost); err != nil || ev.name != "lost" || lost.Reason != api.KeepaliveLostReasonNotHeld {
			t.Fatalf("event %s %s, want lost (not_held)", ev.name, ev.data)
		}
		s.waitEnded()
	})
}

func TestKeepaliveReleasesOnShutdown(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	s, _ := ts.openStream("/v1/leases/job/keepalive?owner=w1&ttl_ms=60000")
	s.next()
	if err := ts.srv.CloseStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	ev := s.next()
	if ev.name != "released" || !strings.Contains(ev.data, `"shutdown"`) {
		t.Fatalf("event %s %s, want released (shutdown)", ev.name, ev.data)
	}
	s.waitEnded()
	// It released before saying so.
	if st := decode[api.LeaseState](t, ts.get("/v1/leases/job")); st.Held {
		t.Fatalf("after the released event the lease is still held: %+v", st)
	}
}

func TestKeepaliveStreamLimit(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, func(o *Options) { o.MaxStreams = 1 })
	s, _ := ts.openStream("/v1/leases/a/keepalive?owner=w")
	s.next()
	s2, r := ts.openStream("/v1/leases/b/keepalive?owner=w")
	if s2 != nil {
		t.Fatal("a stream beyond --max-streams was accepted")
	}
	p := expectProblem(t, r, http.StatusServiceUnavailable, problemUnavailable)
	if !strings.Contains(p.Detail, "max-streams") {
		t.Errorf("problem does not say which limit: %s", p.Detail)
	}
	s.close()
	ts.waitFree("a")
}

func TestKeepaliveInvalidQuery(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	for _, q := range []string{"ttl_ms=5", "ttl_ms=abc", "wait_ms=-1", "owner=", fmt.Sprintf("note=%s", strings.Repeat("x", 1025))} {
		s, r := ts.openStream("/v1/leases/job/keepalive?" + q)
		if s != nil || r.status != http.StatusUnprocessableEntity {
			t.Errorf("?%s: status %d, want 422", q, r.status)
		}
	}
	if st := decode[api.LeaseState](t, ts.get("/v1/leases/job")); st.Held {
		t.Fatal("an invalid keepalive wrote a lease")
	}
}

// The renewals of many streams go to the store together: fewer write
// statements (PostgreSQL) or transactions (SQLite) than leases renewed, and
// every stream still renews at its cadence under its own token.
func TestKeepaliveRenewalsAreBatched(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		const n = 20
		// ttl 5 s: renewals every 2 s, handed to the coalescer 0.5 s early.
		streams := make([]*sseStream, n)
		for i := range streams {
			s, r := ts.openStream(fmt.Sprintf("/v1/leases/batched-%d/keepalive?owner=w&ttl_ms=5000", i))
			if s == nil {
				t.Fatalf("stream %d answered %d: %s", i, r.status, r.body)
			}
			streams[i] = s
		}
		for i, s := range streams {
			acquired := s.next().lease(t)
			ev := s.next()
			if l := ev.lease(t); ev.name != "renewed" || l.Token != acquired.Token || l.RenewCount != 1 {
				t.Fatalf("stream %d: %s %s, want its first renewal", i, ev.name, ev.data)
			}
		}
		text := string(ts.get("/metrics").body)
		stmts := metricValue(t, text, `leasehold_store_write_statements_total{operation="renew"}`)
		ops := metricValue(t, text, `leasehold_store_write_operations_total{operation="renew"}`)
		if ops < n || stmts >= ops {
			t.Fatalf("%v renewals in %v statements: want at least %d renewals in fewer statements", ops, stmts, n)
		}
		t.Logf("%v renewals in %v write statements", ops, stmts)
	})
}

// releaseElsewhere releases owner's lease on task (under token) as another
// process of the same store would: through a Service of its own, not
// through this sidecar, whose streams do not hear of it.
func releaseElsewhere(t *testing.T, ts *testServer, task, owner string, token int64) {
	t.Helper()
	ok, err := leasecore.New(ts.store).Release(t.Context(), leasecore.ReleaseParams{Task: task, Owner: owner, Token: token})
	if err != nil || !ok {
		t.Fatalf("release of %s by %s elsewhere: %v, %v; want released", task, owner, ok, err)
	}
}

// metricValue returns the value of the sample whose name and labels are
// series in a Prometheus text exposition.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", series, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s in:\n%s", series, text)
	return 0
}
