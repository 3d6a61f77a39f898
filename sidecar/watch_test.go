package sidecar

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// watchSchemas are the watch stream's events and their data.
var watchSchemas = map[string]string{
	"acquired": "Event", "released": "Event", "expired": "Event", "taken_over": "Event", "lost": "Event",
	"ready": "WatchReady", "end": "WatchEnd",
}

func (ts *testServer) openWatch(path string, header http.Header) *sseStream {
	ts.t.Helper()
	s, r := ts.openStreamWith(path, header, watchSchemas)
	if s == nil {
		ts.t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	return s
}

// nextChange returns the stream's next history event (skipping ready),
// checking that its id: line is the event's id.
func (s *sseStream) nextChange() api.Event {
	s.t.Helper()
	for {
		ev := s.next()
		if ev.name == "ready" {
			continue
		}
		var e api.Event
		if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
			s.t.Fatalf("event %s: %v", ev.name, err)
		}
		if ev.id != strconv.FormatInt(e.Id, 10) || string(e.Kind) != ev.name {
			s.t.Fatalf("event %s with id: %q carries %+v", ev.name, ev.id, e)
		}
		return e
	}
}

func (s *sseStream) expectReady() int64 {
	s.t.Helper()
	ev := s.next()
	if ev.name != "ready" || ev.id != "" {
		s.t.Fatalf("first event %s (id %q), want ready with no id", ev.name, ev.id)
	}
	var r api.WatchReady
	if err := json.Unmarshal([]byte(ev.data), &r); err != nil {
		s.t.Fatal(err)
	}
	return r.Position
}

func (ts *testServer) claim(task, owner string, ttlMs int64) api.Lease {
	ts.t.Helper()
	r := ts.post("/v1/leases/"+task+"/claim", map[string]any{"owner": owner, "ttl_ms": ttlMs})
	expect(ts.t, r, http.StatusOK)
	return decode[api.ClaimAcquired](ts.t, r).Lease
}

func TestWatchFollowsChanges(t *testing.T) {
	eachStore(t, func(t *testing.T, ts *testServer) {
		ts.claim("before", "w0", 60000) // before the watch: not sent
		s := ts.openWatch("/v1/watch", nil)
		s.expectReady()
		got := ts.claim("job", "w1", 60000)
		expect(t, ts.post("/v1/leases/job/release", map[string]any{"owner": "w1"}), http.StatusOK)
		a := s.nextChange()
		if a.Kind != api.EventKindAcquired || a.Task != "job" || a.Owner != "w1" || a.Token != got.Token {
			t.Fatalf("first event %+v, want job acquired by w1 with token %d", a, got.Token)
		}
		r := s.nextChange()
		if r.Kind != api.EventKindReleased || r.Id <= a.Id {
			t.Fatalf("second event %+v, want released after id %d", r, a.Id)
		}
	})
}

// TestWatchResumes: since replays what the history holds, Last-Event-ID
// resumes after the last event seen and wins over since.
func TestWatchResumes(t *testing.T) {
	eachStore(t, func(t *testing.T, ts *testServer) {
		for _, task := range []string{"a", "b", "c"} {
			ts.claim(task, "w", 60000)
		}
		s := ts.openWatch("/v1/watch?since=0", nil)
		var ids []int64
		for range 3 {
			ids = append(ids, s.nextChange().Id)
		}
		pos := s.expectReady()
		if pos < ids[2] {
			t.Fatalf("ready at %d before the replayed event %d", pos, ids[2])
		}
		s.close()

		h := http.Header{"Last-Event-ID": {strconv.FormatInt(ids[0], 10)}}
		s2 := ts.openWatch("/v1/watch?since=0", h)
		for i, want := range ids[1:] {
			if e := s2.nextChange(); e.Id != want {
				t.Fatalf("resumed event %d has id %d, want %d", i, e.Id, want)
			}
		}
		s2.expectReady()
		ts.claim("d", "w", 60000)
		if e := s2.nextChange(); e.Task != "d" {
			t.Fatalf("after the replay got %+v, want d acquired", e)
		}
	})
}

func TestWatchPrefix(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	s := ts.openWatch("/v1/watch?prefix=jobs/", nil)
	s.expectReady()
	ts.claim("other", "w", 60000)
	ts.claim("jobs%2Fa", "w", 60000)
	if e := s.nextChange(); e.Task != "jobs/a" {
		t.Fatalf("got %+v, want only jobs/a", e)
	}
	r := ts.get("/v1/watch?prefix=a%20b")
	p := expectProblem(t, r, http.StatusUnprocessableEntity, problemInvalid)
	if p.InvalidParams == nil || len(*p.InvalidParams) == 0 || (*p.InvalidParams)[0].Name != "prefix" {
		t.Fatalf("bad prefix: %+v, want invalid_params naming prefix", p)
	}
	r = ts.get("/v1/watch?since=-1")
	p = expectProblem(t, r, http.StatusUnprocessableEntity, problemInvalid)
	if p.InvalidParams == nil || len(*p.InvalidParams) == 0 || (*p.InvalidParams)[0].Name != "since" {
		t.Fatalf("bad since: %+v, want invalid_params naming since", p)
	}
}

// TestWatchSeesExpiry: a lease that runs out with nobody claiming the task
// again is reported as expired, at its expiry.
func TestWatchSeesExpiry(t *testing.T) {
	eachStore(t, func(t *testing.T, ts *testServer) {
		s := ts.openWatch("/v1/watch", nil)
		s.expectReady()
		got := ts.claim("short", "w1", 200)
		if e := s.nextChange(); e.Kind != api.EventKindAcquired {
			t.Fatalf("got %+v, want acquired", e)
		}
		e := s.nextChange()
		if e.Kind != api.EventKindExpired || e.Owner != "w1" || e.Token != got.Token || e.At != got.ExpiresAt {
			t.Fatalf("got %+v, want w1's lease (token %d) expired at %s", e, got.Token, got.ExpiresAt)
		}
		// The expiry is in the history, and another owner's claim adds
		// only its own acquisition.
		ts.claim("short", "w2", 60000)
		if e := s.nextChange(); e.Kind != api.EventKindAcquired || e.Owner != "w2" {
			t.Fatalf("got %+v, want w2 acquired", e)
		}
		hist := decode[api.EventList](t, ts.get("/v1/leases/short/history"))
		var kinds []string
		for _, ev := range hist.Events {
			kinds = append(kinds, string(ev.Kind))
		}
		if strings.Join(kinds, ",") != "acquired,expired,acquired" {
			t.Fatalf("history %v, want acquired,expired,acquired (newest first)", kinds)
		}
	})
}

func TestWatchEndsOnShutdown(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	s := ts.openWatch("/v1/watch", nil)
	s.expectReady()
	if err := ts.srv.CloseStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	ev := s.next()
	if ev.name != "end" || !strings.Contains(ev.data, `"shutdown"`) {
		t.Fatalf("event %s %s, want end (shutdown)", ev.name, ev.data)
	}
	s.waitEnded()
}

func TestWatchLimit(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, func(o *Options) { o.MaxWatchers = 1 })
	s := ts.openWatch("/v1/watch", nil)
	s.expectReady()
	s2, r := ts.openStreamWith("/v1/watch", nil, watchSchemas)
	if s2 != nil {
		t.Fatal("a watch beyond --max-watchers was accepted")
	}
	p := expectProblem(t, r, http.StatusServiceUnavailable, problemUnavailable)
	if !strings.Contains(p.Detail, "max-watchers") {
		t.Errorf("problem does not say which limit: %s", p.Detail)
	}
	s.close()
	// The slot is free again once the stream is gone.
	deadline := time.Now().Add(10 * time.Second)
	for ts.srv.watches.active.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the closed watch still counts against the limit")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchStoreDown: a watch that cannot read the store is a 503 problem,
// not a stream.
func TestWatchStoreDown(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withStore(openUnreachable(t)))
	s, r := ts.openStreamWith("/v1/watch?since=0", nil, watchSchemas)
	if s != nil {
		t.Fatal("a watch on an unreachable store streamed")
	}
	expectProblem(t, r, http.StatusServiceUnavailable, problemUnavailable)
}

// TestWatchFrames: a frame from the ring is the event's own, whether it was
// encoded for this call, reused, or its slot held another event.
func TestWatchFrames(t *testing.T) {
	t.Parallel()
	var f watchFrames
	ev := func(id int64) leasecore.Event {
		return leasecore.Event{ID: id, Task: "t", Kind: leasecore.EventAcquired, Owner: fmt.Sprintf("o%d", id), Token: id, At: time.Unix(id, 0)}
	}
	want := func(e leasecore.Event) string {
		return fmt.Sprintf("id: %d\n", e.ID) + string(mustEvent(string(e.Kind), api.FromEvent(&e)))
	}
	for _, id := range []int64{1, 1, 1 + watchFrameSlots, 1, 2} {
		if got := string(f.frame(ev(id))); got != want(ev(id)) {
			t.Fatalf("frame of event %d:\n%s\nwant\n%s", id, got, want(ev(id)))
		}
	}
}
