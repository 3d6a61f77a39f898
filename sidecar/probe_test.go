package sidecar

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// heldHere asks GET /v1/leases/{task}/held-here (task as it goes in the
// path) and checks the answer: 200 with the lease's token and owner, or 503
// with neither, the task named in both.
func (ts *testServer) heldHere(task string) (api.HeldHereState, int) {
	ts.t.Helper()
	r := ts.get("/v1/leases/" + task + "/held-here")
	st := checkHeldHere(ts.t, r)
	return st, r.status
}

func checkHeldHere(t *testing.T, r response) api.HeldHereState {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("held-here: %d Content-Type %q, want application/json: %s", r.status, ct, r.body)
	}
	st := decode[api.HeldHereState](t, r)
	switch r.status {
	case http.StatusOK:
		if !st.HeldHere || st.Token == nil || *st.Token < 1 || st.Owner == nil || *st.Owner == "" {
			t.Fatalf("held-here 200: %s, want held_here true with token and owner", r.body)
		}
	case http.StatusServiceUnavailable:
		if st.HeldHere || st.Token != nil || st.Owner != nil {
			t.Fatalf("held-here 503: %s, want held_here false without token or owner", r.body)
		}
	default:
		t.Fatalf("held-here answered %d: %s", r.status, r.body)
	}
	return st
}

// waitHeldHere polls held-here until it answers 200: a stream counts once
// its start has finished, just after it sent its acquired event.
func (ts *testServer) waitHeldHere(task string) api.HeldHereState {
	ts.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, code := ts.heldHere(task); code == http.StatusOK {
			return st
		}
		if time.Now().After(deadline) {
			ts.t.Fatalf("held-here on %s still 503 10s after its stream acquired the lease", task)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitNotHeldHere polls held-here until it answers 503.
func (ts *testServer) waitNotHeldHere(task string) {
	ts.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, code := ts.heldHere(task); code == http.StatusServiceUnavailable {
			return
		}
		if time.Now().After(deadline) {
			ts.t.Fatalf("held-here on %s still 200 10s after its stream ended", task)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// booked counts the streams of task in the server's book, whether or not
// they still hold their lease.
func (s *Server) booked(task string) int {
	s.streams.mu.Lock()
	defer s.streams.mu.Unlock()
	n := 0
	for st := range s.streams.held {
		if st.task == task {
			n++
		}
	}
	return n
}

// held-here says 200, with the lease's token and owner, exactly while a
// keepalive stream of this sidecar holds the task: not before, not for
// another task, not on another sidecar of the same store, not once the
// stream has ended.
func TestHeldHereFollowsTheStream(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		other, err := New(Options{Store: ts.store})
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(other.Handler())
		t.Cleanup(hs.Close)
		elsewhere := &testServer{t: t, srv: other, store: ts.store, url: hs.URL, client: ts.client}

		if st, code := ts.heldHere("billing%2Fnightly"); code != http.StatusServiceUnavailable || st.Task != "billing/nightly" {
			t.Fatalf("before any stream: %d %+v, want 503 naming billing/nightly", code, st)
		}
		s, r := ts.openStream("/v1/leases/billing%2Fnightly/keepalive?owner=w1&ttl_ms=500")
		if s == nil {
			t.Fatalf("keepalive answered %d: %s", r.status, r.body)
		}
		l := s.next().lease(t)
		if st := ts.waitHeldHere("billing%2Fnightly"); st.Task != "billing/nightly" || *st.Token != l.Token || *st.Owner != "w1" {
			t.Fatalf("while the stream holds it: %+v, want token %d and owner w1", st, l.Token)
		}
		// Still held after renewals, under the same token.
		for ev := s.next(); ev.name != "renewed"; ev = s.next() {
		}
		if st, code := ts.heldHere("billing%2Fnightly"); code != http.StatusOK || *st.Token != l.Token {
			t.Fatalf("after a renewal: %d %+v", code, st)
		}
		if _, code := ts.heldHere("billing"); code != http.StatusServiceUnavailable {
			t.Fatalf("another task: %d, want 503", code)
		}
		if _, code := elsewhere.heldHere("billing%2Fnightly"); code != http.StatusServiceUnavailable {
			t.Fatalf("another sidecar of the same store: %d, want 503", code)
		}

		s.close()
		ts.waitNotHeldHere("billing%2Fnightly")
		ts.waitFree("billing%2Fnightly")
		if _, code := ts.heldHere("billing%2Fnightly"); code != http.StatusServiceUnavailable {
			t.Fatalf("after the stream ended: %d, want 503", code)
		}
		// HEAD answers as GET, without the body.
		if r := ts.do(http.MethodHead, "/v1/leases/billing%2Fnightly/held-here", "", nil); r.status != http.StatusServiceUnavailable || len(r.body) != 0 {
			t.Fatalf("HEAD: %d %q", r.status, r.body)
		}
	})
}

// blockedReleaseStore holds every release that carries a token (a
// keepalive stream's, through its keeper) until open is closed; releases
// without one (an operator's, here) go through.
type blockedReleaseStore struct {
	leasecore.Store
	open    chan struct{}
	blocked chan struct{} // receives one value per release held
}

func (s blockedReleaseStore) Release(ctx context.Context, p leasecore.ReleaseParams) (bool, error) {
	if p.Token != 0 {
		s.blocked <- struct{}{}
		select {
		case <-s.open:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return s.Store.Release(ctx, p)
}

// A stream whose lease is lost no longer counts, although it is still in
// the book: here its own release is held up, so it stays there until the
// test lets it go.
func TestHeldHereEndsWithALostLease(t *testing.T) {
	t.Parallel()
	store := blockedReleaseStore{Store: openSQLite(t, false), open: make(chan struct{}), blocked: make(chan struct{}, 1)}
	ts := newTestServer(t, withStore(store))
	s, _ := ts.openStream("/v1/leases/job/keepalive?owner=w1&ttl_ms=500")
	first := s.next().lease(t)
	ts.waitHeldHere("job")
	// Another process of the store ends the lease under the stream's feet
	// (a release without a token, which the store lets through): its next
	// renewal is refused and the client is told.
	releaseElsewhere(t, ts, "job", "w1", 0)
	var ev sseEvent
	for ev = s.next(); ev.name == "renewed"; ev = s.next() {
	}
	if ev.name != "lost" {
		t.Fatalf("event %s %s, want lost", ev.name, ev.data)
	}
	select {
	case <-store.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the lost stream did not try to release its lease")
	}
	if n := ts.srv.booked("job"); n != 1 {
		t.Fatalf("%d streams of job in the book, want the lost one still there", n)
	}
	if st, code := ts.heldHere("job"); code != http.StatusServiceUnavailable {
		t.Fatalf("after the loss: %d %+v (token %d was lost), want 503", code, st, first.Token)
	}
	close(store.open)
	s.waitEnded()
	ts.waitNotHeldHere("job")
}

// On the main listener held-here needs the read right on the task, like
// GET /v1/leases/{task}; TestEveryRouteAuthorised checks the refusal of a
// credential that does not cover the task.
func TestHeldHereNeedsRead(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withCredentials(credentialsBook(t)))
	r := ts.get("/v1/leases/billing%2Fnightly/held-here")
	expectProblem(t, r, http.StatusUnauthorized, problemBlank)

	s, resp := ts.openStreamWith("/v1/leases/billing%2Fnightly/keepalive?owner=b1&ttl_ms=2000",
		http.Header{"Authorization": {"Bearer " + billingToken}}, keepaliveSchemas)
	if s == nil {
		t.Fatalf("keepalive: %d %s", resp.status, resp.body)
	}
	s.next()
	ts.as(dashToken).waitHeldHere("billing%2Fnightly")
	for _, tok := range []string{dashToken, billingToken} { // read on every task; hold (and so read) on billing/
		if _, code := ts.as(tok).heldHere("billing%2Fnightly"); code != http.StatusOK {
			t.Errorf("with a credential that may read billing/nightly: %d, want 200", code)
		}
	}
	if _, code := ts.as(dashToken).heldHere("payroll"); code != http.StatusServiceUnavailable {
		t.Errorf("dash on payroll: %d, want 503", code)
	}
	expectForbidden(t, ts.as(billingToken).get("/v1/leases/payroll/held-here"), "billing", "payroll")
}

// The probe listener answers GET and HEAD on /healthz, /readyz and
// held-here, with no token and whatever the Host, and 404 on every other
// path, so that it can listen on the pod's IP without a token.
func TestProbeListenerServesOnlyProbes(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withToken("main-token"))
	ts.token = "main-token"
	probe := httptest.NewServer(ts.srv.ProbeHandler())
	t.Cleanup(probe.Close)
	sp := ts.spec()
	pc := &testServer{t: t, srv: ts.srv, url: probe.URL, client: &http.Client{Transport: &conformingTransport{t: t, spec: sp, base: probe.Client().Transport}}}

	// A request with a Host the main listener refuses.
	get := func(method, path string) response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, probe.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "pod.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{status: resp.StatusCode, header: resp.Header, body: b}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		expect(t, pc.get(path), http.StatusOK)
		expect(t, get(http.MethodGet, path), http.StatusOK)
		if r := get(http.MethodHead, path); r.status != http.StatusOK || len(r.body) != 0 {
			t.Errorf("HEAD %s: %d %q", path, r.status, r.body)
		}
	}
	if _, code := pc.heldHere("job"); code != http.StatusServiceUnavailable {
		t.Fatalf("held-here before the stream: %d, want 503", code)
	}
	s, resp := ts.openStreamWith("/v1/leases/job/keepalive?owner=w1&ttl_ms=2000", http.Header{"Authorization": {"Bearer main-token"}}, keepaliveSchemas)
	if s == nil {
		t.Fatalf("keepalive: %d %s", resp.status, resp.body)
	}
	l := s.next().lease(t)
	if st := pc.waitHeldHere("job"); *st.Token != l.Token || *st.Owner != "w1" {
		t.Fatalf("held-here on the probe listener, no token: %+v, want token %d and owner w1", st, l.Token)
	}
	if r := get(http.MethodGet, "/v1/leases/job/held-here"); r.status != http.StatusOK {
		t.Fatalf("held-here with Host pod.example: %d %s, want 200 (no Host check)", r.status, r.body)
	}
	// The task is validated as on the main listener.
	expectProblem(t, get(http.MethodGet, "/v1/leases/a%20b/held-here"), http.StatusUnprocessableEntity, problemInvalid)
	expectProblem(t, get(http.MethodGet, "/v1/leases/job/held-here?owner=x"), http.StatusUnprocessableEntity, problemInvalid)

	for _, path := range []string{
		"/", "/metrics", "/openapi.yaml", "/ui/", "/v1/status", "/v1/leases", "/v1/leases/job", "/v1/leases/job/history",
		"/v1/watch", "/v1/tasks", "/v1/policies", "/v1/leases/job/keepalive?owner=probe&ttl_ms=60000",
		"/v1/leases/free/keepalive?owner=probe&ttl_ms=60000", "/v1/leases/billing/nightly/held-here",
		"/v1/leases//held-here", "/v1/leases/job/held-here/", "/healthz/", "/v1/leases/job/held-here/x",
	} {
		expectProblem(t, get(http.MethodGet, path), http.StatusNotFound, problemBlank)
	}
	for _, path := range []string{"/v1/leases/free/claim", "/v1/leases/job/release", "/v1/leases/job/revoke"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, probe.URL+path, strings.NewReader(`{"owner":"w1"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusNotFound {
			t.Errorf("POST %s on the probe listener: %d, want 404", path, r.StatusCode)
		}
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions} {
		r := get(m, "/v1/leases/job/held-here")
		expectProblem(t, r, http.StatusMethodNotAllowed, problemBlank)
		if got := r.header.Get("Allow"); got != "GET, HEAD" {
			t.Errorf("%s held-here: Allow %q", m, got)
		}
	}

	// Nothing was claimed or released through it.
	if st := decode[api.LeaseState](t, ts.get("/v1/leases/free")); st.Held {
		t.Errorf("free is held after the probe listener's refusals: %+v", st)
	}
	if st := decode[api.LeaseState](t, ts.get("/v1/leases/job")); !st.Held || st.Lease.Token != l.Token || st.Lease.Owner != "w1" {
		t.Errorf("job after the probe listener's refusals: %+v, want w1's lease", st)
	}
	// The main listener still wants its token and checks the Host.
	ts.token = ""
	expectProblem(t, ts.get("/v1/leases/job/held-here"), http.StatusUnauthorized, problemBlank)
	req := httptest.NewRequest(http.MethodGet, "/v1/leases/job/held-here", nil)
	req.Host = "pod.example"
	req.Header.Set("Authorization", "Bearer main-token")
	rec := httptest.NewRecorder()
	ts.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusMisdirectedRequest {
		t.Errorf("main listener, Host pod.example: %d, want 421", rec.Code)
	}
	var p api.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Type != problemHostNotAllowed {
		t.Errorf("main listener, Host pod.example: %s", rec.Body)
	}
}
