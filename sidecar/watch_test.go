package sidecar

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // database/sql's "sqlite", for rewindSQLite

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/postgres"
	"github.com/leasehold/leasehold/leasecore/sqlite"
	"github.com/leasehold/leasehold/sidecar/api"
)

// watchSchemas are the watch stream's events and their data.
var watchSchemas = map[string]string{
	"acquired": "Event", "released": "Event", "expired": "Event", "taken_over": "Event", "lost": "Event",
	"ready": "WatchReady", "end": "WatchEnd", "reset": "WatchReset",
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

// TestHistorySameWhetherWatched: the same calls give the same history
// whether a watch is open (its hub sweeps the expiries) or not. A lease
// that ran out and was claimed by another owner used to read expired then
// acquired when a watch was open and taken_over without one; it reads
// expired, at the lease's expiry, either way, and the owner's late renewal
// adds its lost after that expired either way.
func TestHistorySameWhetherWatched(t *testing.T) {
	eachStore(t, func(t *testing.T, ts *testServer) {
		// play claims two tasks for 200 ms, waits for both ends (waitEnds),
		// then has another owner claim the first, and the owner renew the
		// second late before another owner claims it; it answers each
		// task's history, newest first, named without the prefix.
		play := func(prefix string, waitEnds func(tasks ...string)) map[string][]string {
			t.Helper()
			taken, late := prefix+"-taken", prefix+"-late"
			leases := map[string]api.Lease{taken: ts.claim(taken, "w1", 200), late: ts.claim(late, "w1", 200)}
			waitEnds(taken, late)
			ts.claim(taken, "w2", 60000)
			r := ts.post("/v1/leases/"+late+"/renew", map[string]any{"owner": "w1"})
			expect(t, r, http.StatusConflict)
			if !strings.Contains(string(r.body), `"reason":"expired"`) {
				t.Fatalf("late renewal: %s, want lost (expired)", r.body)
			}
			ts.claim(late, "w2", 60000)
			out := map[string][]string{}
			for task, l := range leases {
				for _, ev := range decode[api.EventList](t, ts.get("/v1/leases/"+task+"/history")).Events {
					if ev.Kind == api.EventKindExpired && (ev.At != l.ExpiresAt || ev.Credential != "" || ev.Detail != "") {
						t.Errorf("%s: expired at %s by %q (%q), want the lease's expiry %s, for nobody", task, ev.At, ev.Credential, ev.Detail, l.ExpiresAt)
					}
					name := strings.TrimPrefix(task, prefix)
					out[name] = append(out[name], fmt.Sprintf("%s %s %d", ev.Kind, ev.Owner, ev.Token))
				}
			}
			return out
		}

		unwatched := play("quiet", func(tasks ...string) {
			for _, task := range tasks {
				deadline := time.Now().Add(10 * time.Second)
				for decode[api.LeaseState](t, ts.get("/v1/leases/"+task)).Held {
					if time.Now().After(deadline) {
						t.Fatalf("%s is still held 10 s after a 200 ms claim", task)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
		s := ts.openWatch("/v1/watch", nil)
		s.expectReady()
		watched := play("watched", func(tasks ...string) {
			// The hub's sweep records each end before the calls come.
			for pending := len(tasks); pending > 0; {
				if e := s.nextChange(); e.Kind == api.EventKindExpired && strings.HasPrefix(e.Task, "watched") {
					pending--
				}
			}
		})
		want := map[string][]string{
			"-taken": {"acquired w2 2", "expired w1 1", "acquired w1 1"},
			"-late":  {"acquired w2 2", "lost w1 1", "expired w1 1", "acquired w1 1"},
		}
		for name, w := range want {
			if !slices.Equal(unwatched[name], w) || !slices.Equal(watched[name], w) {
				t.Errorf("history of %s (newest first):\n  unwatched %q\n  watched   %q\n  want      %q", name, unwatched[name], watched[name], w)
			}
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
// TestWatchFrames: a history event's frame is its id, its kind as the
// event name and the Event as data.
func TestWatchFrames(t *testing.T) {
	t.Parallel()
	for _, id := range []int64{1, 2, 4097} {
		e := leasecore.Event{ID: id, Task: "t", Kind: leasecore.EventAcquired, Owner: fmt.Sprintf("o%d", id), Token: id, At: time.Unix(id, 0)}
		want := fmt.Sprintf("id: %d\n", e.ID) + string(mustEvent(string(e.Kind), api.FromEvent(&e)))
		if got := string(eventFrame(e)); got != want {
			t.Fatalf("frame of event %d:\n%s\nwant\n%s", id, got, want)
		}
	}
}

// expectReset reads the next event, which must be a reset with id 0 for
// position, naming the store's newest id; it returns that id.
func (s *sseStream) expectReset(position int64) int64 {
	s.t.Helper()
	ev := s.next()
	if ev.name != "reset" || ev.id != "0" {
		s.t.Fatalf("event %s (id %q) %s, want reset with id 0", ev.name, ev.id, ev.data)
	}
	var r api.WatchReset
	if err := json.Unmarshal([]byte(ev.data), &r); err != nil {
		s.t.Fatal(err)
	}
	if r.Position != position || r.Newest >= position || !strings.Contains(r.Detail, "restored") {
		s.t.Fatalf("reset %+v, want position %d, the store's newest id below it, and a detail that says why", r, position)
	}
	return r.Newest
}

// TestWatchPositionAhead: a since or Last-Event-ID above every id the store
// handed out is not answered with a watch that waits for nothing: the
// stream says reset (id 0), replays the history from its oldest event, is
// ready, and goes on with new events.
func TestWatchPositionAhead(t *testing.T) {
	eachStore(t, func(t *testing.T, ts *testServer) {
		ts.claim("ahead-a", "w", 60000)
		ts.claim("ahead-b", "w", 60000)
		history := []string{"ahead-a", "ahead-b"}
		for i, open := range []struct {
			path   string
			header http.Header
		}{
			{"/v1/watch?prefix=ahead-&since=1000", nil},
			{"/v1/watch?prefix=ahead-&since=1", http.Header{"Last-Event-ID": {"1000"}}},
		} {
			s := ts.openWatch(open.path, open.header)
			newest := s.expectReset(1000)
			for _, task := range history {
				if e := s.nextChange(); e.Task != task || e.Kind != api.EventKindAcquired || e.Id > newest {
					t.Fatalf("replay after the reset: %+v, want %s acquired, with an id up to the newest %d", e, task, newest)
				}
			}
			s.expectReady()
			task := fmt.Sprintf("ahead-new-%d", i)
			ts.claim(task, "w", 60000)
			if e := s.nextChange(); e.Task != task {
				t.Fatalf("live after the reset: %+v, want %s acquired", e, task)
			}
			history = append(history, task)
			s.close()
		}
	})
}

// TestWatchResetWhenHistoryGoesBack: when the store's history goes back
// under a running sidecar (a restore in place), its live watch streams
// say reset, replay the restored history with the events written after
// the restore, whose ids were handed out before, and follow on.
func TestWatchResetWhenHistoryGoesBack(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var (
				store  leasecore.Store
				rewind func(to int64)
			)
			if kind == "sqlite" {
				path := filepath.Join(t.TempDir(), "leasehold.db")
				st, err := sqlite.Open(context.Background(), path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = st.Close() })
				store, rewind = st, func(to int64) { rewindSQLite(t, path, to) }
			} else {
				url := pgtest.NewDatabase(t)
				st, err := postgres.Open(context.Background(), url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = st.Close() })
				store, rewind = st, func(to int64) { rewindPostgres(t, url, to) }
			}
			ts := newTestServer(t, withStore(store))
			var ids []int64
			for i := range 6 {
				task := fmt.Sprintf("back-%d", i)
				ts.claim(task, "w", 60000)
				ids = append(ids, decode[api.EventList](t, ts.get("/v1/leases/"+task+"/history")).Events[0].Id)
			}
			s := ts.openWatch("/v1/watch?prefix=back-&since="+strconv.FormatInt(ids[5], 10), nil)
			s.expectReady()

			rewind(ids[1]) // as restoring a copy taken after the first two claims
			late := ts.claim("back-late", "w", 60000)
			newest := s.expectReset(ids[5])
			if newest >= ids[5] {
				t.Fatalf("reset names newest %d, want it below the position %d", newest, ids[5])
			}
			// The replay ends with ready; back-late is in the replay or
			// follows it live, whichever its commit raced.
			var got []api.Event
			for ready := false; len(got) < 3 || !ready; {
				ev := s.next()
				if ev.name == "ready" {
					if ready {
						t.Fatalf("a second ready after the reset: %s", ev.data)
					}
					ready = true
					continue
				}
				var e api.Event
				if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
					t.Fatalf("event %s: %v", ev.name, err)
				}
				got = append(got, e)
			}
			if len(got) != 3 || got[0].Task != "back-0" || got[1].Task != "back-1" || got[2].Task != "back-late" || got[2].Token != late.Token {
				t.Fatalf("after the reset: %+v; want back-0, back-1 (restored) and back-late (written after the restore)", got)
			}
			if got[2].Id != ids[1]+1 {
				t.Fatalf("the event after the restore has id %d, want %d (handed out again)", got[2].Id, ids[1]+1)
			}
			ts.claim("back-later", "w", 60000)
			if e := s.nextChange(); e.Task != "back-later" {
				t.Fatalf("live after the reset: %+v, want back-later", e)
			}
		})
	}
}

// rewindSQLite puts the history of the SQLite file at path back as a
// restore in place of a copy taken at event to would (SQLite's backup API
// writes into the same file, which the store's file guard accepts): the
// events after to are gone, and ids after it are handed out again.
func rewindSQLite(t *testing.T, path string, to int64) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`DELETE FROM leasehold_history WHERE id > ?`,
		`UPDATE sqlite_sequence SET seq = ? WHERE name = 'leasehold_history'`,
	} {
		if _, err := db.ExecContext(t.Context(), q, to); err != nil {
			t.Fatalf("rewind: %s: %v", q, err)
		}
	}
}

// rewindPostgres is rewindSQLite for the database at url, as restoring a
// dump would (pg_dump saves the identity sequence's value).
func rewindPostgres(t *testing.T, url string, to int64) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `DELETE FROM leasehold_history WHERE id > $1`, to); err != nil {
		t.Fatalf("rewind: %v", err)
	}
	if _, err := conn.Exec(t.Context(), `SELECT setval(pg_get_serial_sequence('leasehold_history', 'id'), $1::bigint)`, to); err != nil {
		t.Fatalf("rewind: %v", err)
	}
}

// TestWatchStalledClientEndsAtAFrame: a client that stops reading is cut
// once a write to it does not finish in streamWriteTimeout, at a frame
// boundary: when it reads again, it finds whole events, in id order, and
// then end (slow), never half an event. Small socket buffers on both sides
// make the writes stall after a few events.
func TestWatchStalledClientEndsAtAFrame(t *testing.T) {
	t.Parallel()
	smallBuffer := func(opt int) func(string, string, syscall.RawConn) error {
		return func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, 4096) }); err != nil {
				return err
			}
			return serr
		}
	}
	// Accepted connections take the listener's send buffer size.
	l, err := (&net.ListenConfig{Control: smallBuffer(syscall.SO_SNDBUF)}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Store: openSQLite(t, false)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	t.Cleanup(hs.Close)
	ts := &testServer{t: t, srv: srv, url: hs.URL, client: hs.Client()}

	conn, err := (&net.Dialer{Control: smallBuffer(syscall.SO_RCVBUF)}).DialContext(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, "GET /v1/watch?prefix=stall- HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing while events pile up, until the sidecar has
	// given up writing to it.
	owner := strings.Repeat("o", leasecore.MaxOwnerLen)
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; srv.watches.stalled.Load() == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar still writes to a client that stopped reading, after %d events", i)
		}
		ts.claim(fmt.Sprintf("stall-%d", i), owner, 60000)
	}

	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	raw, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading the stream to its end: %v (read %d bytes)", err, len(raw))
	}
	_, body, ok := strings.Cut(string(raw), "\r\n\r\n")
	if !ok || !strings.HasPrefix(string(raw), "HTTP/1.1 200 OK\r\n") {
		t.Fatalf("not a stream: %.200q", raw)
	}
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("the stream ends inside a frame: …%q", body[max(0, len(body)-300):])
	}
	frames := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
	var last sseEvent
	var prev int64
	for i, fr := range frames {
		var ev sseEvent
		for _, line := range strings.Split(fr, "\n") {
			switch {
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == ": ping":
			default:
				t.Fatalf("frame %d has a line %q: %q", i, line, fr)
			}
		}
		var data map[string]any
		if ev.name != "" && json.Unmarshal([]byte(ev.data), &data) != nil {
			t.Fatalf("frame %d's data is not whole JSON: %q", i, fr)
		}
		if ev.id != "" {
			id, err := strconv.ParseInt(ev.id, 10, 64)
			if err != nil || id <= prev {
				t.Fatalf("frame %d has id %q after %d", i, ev.id, prev)
			}
			prev = id
		}
		last = ev
	}
	if last.name != "end" || !strings.Contains(last.data, `"reason":"slow"`) {
		t.Fatalf("the stream's last event is %s %s, want end (slow)", last.name, last.data)
	}
	if prev == 0 {
		t.Fatal("no event reached the client before it was cut")
	}
}

// TestFrameAround: where a write cut at n leaves the stream, in frames.
func TestFrameAround(t *testing.T) {
	t.Parallel()
	out := []byte(streamHeader + "event: ready\ndata: {}\n\nid: 7\nevent: acquired\ndata: {}\n\n: ping\n\n")
	h := len(streamHeader)
	first := h + len("event: ready\ndata: {}\n\n")
	second := first + len("id: 7\nevent: acquired\ndata: {}\n\n")
	for _, c := range []struct {
		n, start, end int
	}{
		{0, 0, 0},
		{5, 0, first},              // in the header: it goes with the frame after it
		{first - 1, 0, first},      // between the two newlines of the first frame
		{first, first, first},      // at a boundary: nothing to finish
		{first + 3, first, second}, // inside the second frame
		{second + 1, second, len(out)},
		{len(out), len(out), len(out)},
	} {
		if start, end := frameAround(out, c.n); start != c.start || end != c.end {
			t.Errorf("frameAround(n=%d) = %d, %d; want %d, %d", c.n, start, end, c.start, c.end)
		}
	}
}

// The watch's released event carries the run's outcome and the hold, as
// the history does.
func TestWatchCarriesRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, ts *testServer) {
		s := ts.openWatch("/v1/watch", nil)
		s.expectReady()
		r := ts.post("/v1/leases/job/claim", map[string]any{"owner": "w1", "ttl_ms": 60000, "min_hold_ms": 600000})
		expect(t, r, http.StatusOK)
		l := decode[api.ClaimAcquired](t, r).Lease
		expect(t, ts.post("/v1/leases/job/release", map[string]any{"owner": "w1", "run": map[string]any{"exit_code": 0, "duration_ms": 1234}}), http.StatusOK)
		if a := s.nextChange(); a.Kind != api.EventKindAcquired || a.Run != nil {
			t.Fatalf("first event %+v, want acquired, no run", a)
		}
		e := s.nextChange()
		if e.Kind != api.EventKindReleased || e.Run == nil || e.Run.Outcome != "succeeded" || e.Run.DurationMs != 1234 ||
			e.HoldUntil == nil || *e.HoldUntil != *l.HoldUntil {
			t.Fatalf("second event %+v (run %+v), want released, run succeeded in 1234 ms, hold_until %s", e, e.Run, *l.HoldUntil)
		}
	})
}
