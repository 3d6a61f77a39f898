package leaserun

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/exitcode"
)

// The fake sidecar below follows the keepalive protocol of openapi.yaml:
// 409/503 JSON when not acquired, problems for other refusals, and on 200 a
// text/event-stream of `acquired`, `renewed`, `lost`, `released` events and
// `: ping` comments. The real sidecar is exercised by the e2e tests.

// fakeSidecar serves handler on 127.0.0.1 and returns its base URL. The
// release that leasehold run sends with the run's outcome before it closes
// the stream is answered released (see withRelease).
func fakeSidecar(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(withRelease(srv0, handler))
	t.Cleanup(srv.Close)
	return srv.URL
}

// srv0 is the key fakeSidecar's releases are kept under: one fake sidecar
// per test is all a test needs to ask about.
const srv0 = ""

// releases are the bodies of the releases the fake sidecars answered, by
// test (withRelease's key).
var releases sync.Map // string → chan map[string]any

// withRelease answers POST …/release with released: true, keeping its
// body for releaseBody, answers the holder's confirmations
// (GET /v1/leases/{task}) 503 unavailable, so that the local deadline stays
// where the stream's request put it, and passes every other request to
// handler.
func withRelease(key string, handler http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/leases/") && !strings.HasSuffix(r.URL.Path, "/keepalive") {
			answer(w, http.StatusServiceUnavailable, "application/problem+json", map[string]any{
				"type": "urn:leasehold:problem:unavailable", "title": "Lease store unavailable", "status": 503,
				"detail": "the fake sidecar has no store"})
			return
		}
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/release") {
			handler(w, r)
			return
		}
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		owner, _ := body["owner"].(string)
		ch, _ := releases.LoadOrStore(key+owner, make(chan map[string]any, 8))
		select {
		case ch.(chan map[string]any) <- body:
		default: // nobody asks for this owner's releases
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"released":true}`)
	}
}

// releaseBody is the body of the release the fake sidecar got from owner.
func releaseBody(t *testing.T, owner string) map[string]any {
	t.Helper()
	ch, _ := releases.LoadOrStore(srv0+owner, make(chan map[string]any, 8))
	select {
	case b := <-ch.(chan map[string]any):
		return b
	case <-time.After(30 * time.Second):
		t.Fatalf("no release from %q", owner)
		return nil
	}
}

// beginStream answers 200 with an event stream.
func beginStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

// sendEvent writes one event and flushes it.
func sendEvent(w http.ResponseWriter, name string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	w.(http.Flusher).Flush()
}

func ping(w http.ResponseWriter) {
	fmt.Fprint(w, ": ping\n\n")
	w.(http.Flusher).Flush()
}

// leaseData is a lease object as the API sends it.
func leaseData(task, owner string, token int64, ttl, remaining time.Duration) map[string]any {
	now := time.Now().UTC()
	return map[string]any{
		"task": task, "owner": owner, "token": token,
		"acquired_at": now.Format(time.RFC3339Nano), "renewed_at": now.Format(time.RFC3339Nano),
		"expires_at": now.Add(remaining).Format(time.RFC3339Nano),
		"ttl_ms":     ttl.Milliseconds(), "ttl_remaining_ms": remaining.Milliseconds(),
		"renew_count": 0, "note": "",
	}
}

// answer writes a JSON (or problem) refusal.
func answer(w http.ResponseWriter, status int, contentType string, body any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// pingUntilGone sends pings every few milliseconds until the client goes.
func pingUntilGone(w http.ResponseWriter, r *http.Request) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			ping(w)
		}
	}
}

// TestSidecarAcquired: the command runs with the token of the acquired
// event; the request names the task as one escaped segment, the owner, the
// ttl and the bearer token; the stream is closed (the release) once the
// command has exited.
func TestSidecarAcquired(t *testing.T) {
	t.Parallel()
	type seen struct {
		path, owner, ttl, wait, auth, accept string
	}
	got := make(chan seen, 1)
	gone := make(chan struct{})
	addr := fakeSidecar(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		got <- seen{r.URL.EscapedPath(), q.Get("owner"), q.Get("ttl_ms"), q.Get("wait_ms"), r.Header.Get("Authorization"), r.Header.Get("Accept")}
		beginStream(w)
		sendEvent(w, "acquired", leaseData("billing/nightly", q.Get("owner"), 42, 30*time.Second, 30*time.Second))
		sendEvent(w, "renewed", leaseData("billing/nightly", q.Get("owner"), 42, 30*time.Second, 30*time.Second))
		pingUntilGone(w, r)
		close(gone)
	})
	r := start(t, Config{
		Addr: addr + "/", Task: "billing/nightly", Owner: "w 1", BearerToken: "s3cret",
		Env:     []string{},
		Command: shell(`echo "$LEASEHOLD_TASK|$LEASEHOLD_OWNER|$LEASEHOLD_TOKEN"`),
	})
	r.expect(t, 0)
	if out, want := strings.TrimSpace(r.stdout.String()), "billing/nightly|w 1|42"; out != want {
		t.Errorf("command saw %q, want %q", out, want)
	}
	// No --ttl: no ttl_ms, so that the sidecar applies the task's declared
	// ttl (or its default), as for any claim.
	want := seen{"/v1/leases/billing%2Fnightly/keepalive", "w 1", "", "", "Bearer s3cret", "text/event-stream"}
	if s := <-got; s != want {
		t.Errorf("request %+v, want %+v", s, want)
	}
	select {
	case <-gone:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream was not closed after the command exited")
	}
	r.logHas(t, `msg=acquired task=billing/nightly owner="w 1" token=42`)
	r.logHas(t, "msg=released")
	// The release named the lease and carried the run's outcome.
	rel := releaseBody(t, "w 1")
	run, _ := rel["run"].(map[string]any)
	if rel["token"] != float64(42) || run == nil || run["exit_code"] != float64(0) || run["lost"] != nil || run["duration_ms"] == nil {
		t.Errorf("release %v, want token 42 and run {exit_code 0, duration_ms}", rel)
	}
}

// TestSidecarLost: whatever ends the lease while the command runs (a lost
// event, a released event, the end of the stream, a renewal under another
// token), the command gets SIGTERM and leasehold run exits 70.
func TestSidecarLost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// end ends the lease; the stream ends when it returns.
		end func(w http.ResponseWriter, r *http.Request, owner string)
		log string
	}{
		{
			name: "lost event",
			end: func(w http.ResponseWriter, _ *http.Request, _ string) {
				sendEvent(w, "lost", map[string]string{"reason": "held_by_other", "detail": "taken over"})
			},
			log: "held_by_other",
		},
		{
			name: "released event",
			end: func(w http.ResponseWriter, _ *http.Request, _ string) {
				sendEvent(w, "released", map[string]string{"reason": "shutdown"})
			},
			log: "the sidecar released it (shutdown)",
		},
		{name: "stream ends", end: func(http.ResponseWriter, *http.Request, string) {}, log: "the keepalive stream ended"},
		{
			name: "renewed under another token",
			end: func(w http.ResponseWriter, r *http.Request, owner string) {
				sendEvent(w, "renewed", leaseData("nightly", owner, 8, 30*time.Second, 30*time.Second))
				<-r.Context().Done() // the client must go
			},
			log: "renewed under token 8",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			started, termed := filepath.Join(dir, "started"), filepath.Join(dir, "termed")
			proceed := make(chan struct{})
			addr := fakeSidecar(t, func(w http.ResponseWriter, r *http.Request) {
				owner := r.URL.Query().Get("owner")
				beginStream(w)
				sendEvent(w, "acquired", leaseData("nightly", owner, 7, 30*time.Second, 30*time.Second))
				ping(w)
				sendEvent(w, "renewed", leaseData("nightly", owner, 7, 30*time.Second, 30*time.Second))
				select {
				case <-proceed:
				case <-r.Context().Done():
					return
				}
				c.end(w, r, owner)
			})
			r := start(t, Config{Addr: addr, Task: "nightly", Owner: "w1", Command: shell(trapTerm, started, termed)})
			waitForFile(t, started)
			close(proceed)
			r.expect(t, exitcode.Lost)
			if !exists(termed) {
				t.Error("the command did not get SIGTERM")
			}
			r.logHas(t, "msg=lost task=nightly token=7")
			r.logHas(t, c.log)
		})
	}
}

// TestSidecarSilent: a sidecar that stops sending renewals (pings do not
// count) loses the lease at the local deadline, while the stream is still
// open.
func TestSidecarSilent(t *testing.T) {
	t.Parallel()
	gone := make(chan struct{})
	addr := fakeSidecar(t, func(w http.ResponseWriter, r *http.Request) {
		owner := r.URL.Query().Get("owner")
		beginStream(w)
		sendEvent(w, "acquired", leaseData("nightly", owner, 3, 300*time.Millisecond, 300*time.Millisecond))
		sendEvent(w, "renewed", leaseData("nightly", owner, 3, 300*time.Millisecond, 300*time.Millisecond))
		pingUntilGone(w, r)
		close(gone)
	})
	dir := t.TempDir()
	r := start(t, Config{
		Addr: addr, Task: "nightly", Owner: "w1", TTL: 300 * time.Millisecond,
		Command: shell(trapTerm, filepath.Join(dir, "started"), filepath.Join(dir, "termed")),
	})
	r.expect(t, exitcode.Lost)
	r.logHas(t, "no renewal confirmed before the local deadline")
	select {
	case <-gone:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream was not closed after the lease was lost")
	}
}

// TestSidecarRefusals: answers other than a stream end the run before the
// command starts, with the status each stands for.
func TestSidecarRefusals(t *testing.T) {
	t.Parallel()
	const problem = "application/problem+json"
	cases := []struct {
		name    string
		handler http.HandlerFunc
		code    int
		log     string
	}{
		{
			name: "held",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				answer(w, http.StatusConflict, "application/json", map[string]any{
					"acquired": false, "reason": "held", "detail": "held by other",
					"holder": map[string]any{"owner": "other", "expires_at": time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano), "ttl_remaining_ms": 60000},
				})
			},
			code: exitcode.Held, log: "msg=held task=nightly holder=other expires_in=1m0s",
		},
		{
			name: "unavailable",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				answer(w, http.StatusServiceUnavailable, "application/json", map[string]any{"acquired": false, "reason": "unavailable", "detail": "claim: database is locked"})
			},
			code: exitcode.Unavailable, log: "database is locked",
		},
		{
			name: "too many streams",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				answer(w, http.StatusServiceUnavailable, problem, map[string]any{"type": "urn:leasehold:problem:unavailable", "title": "Too many streams", "status": 503, "detail": "already 20000 streams"})
			},
			code: exitcode.Unavailable, log: "already 20000 streams",
		},
		{
			name: "invalid",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				answer(w, http.StatusUnprocessableEntity, problem, map[string]any{
					"type": "urn:leasehold:problem:invalid-request", "title": "Invalid request", "status": 422,
					"detail": "invalid request: ttl_ms: must be at most 600000", "invalid_params": []map[string]string{{"name": "ttl_ms", "reason": "must be at most 600000"}},
				})
			},
			code: exitcode.Usage, log: "ttl_ms: must be at most 600000",
		},
		{
			name: "unauthorized",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				answer(w, http.StatusUnauthorized, problem, map[string]any{"type": "about:blank", "title": "Unauthorized", "status": 401, "detail": "this sidecar requires Authorization"})
			},
			code: exitcode.NoPerm, log: "this sidecar requires Authorization",
		},
		{
			name: "not found",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "no such page", http.StatusNotFound)
			},
			code: exitcode.Unavailable, log: "404 Not Found: no such page",
		},
		{
			name: "not a stream",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				answer(w, http.StatusOK, "application/json", map[string]any{"acquired": true})
			},
			code: exitcode.Unavailable, log: "not an event stream",
		},
		{
			name: "stream ends at once",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				beginStream(w)
				ping(w)
			},
			code: exitcode.Unavailable, log: "EOF",
		},
		{
			name: "first event not acquired",
			handler: func(w http.ResponseWriter, r *http.Request) {
				beginStream(w)
				sendEvent(w, "renewed", leaseData("nightly", r.URL.Query().Get("owner"), 1, time.Minute, time.Minute))
			},
			code: exitcode.Unavailable, log: `the first event is \"renewed\"`,
		},
		{
			name: "acquired for another owner",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				beginStream(w)
				sendEvent(w, "acquired", leaseData("nightly", "someone", 1, time.Minute, time.Minute))
			},
			code: exitcode.Unavailable, log: "names owner",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			addr := fakeSidecar(t, c.handler)
			marker := filepath.Join(t.TempDir(), "ran")
			r := start(t, Config{Addr: addr, Task: "nightly", Owner: "w1", Command: shell(`: > "$1"`, marker)})
			r.expect(t, c.code)
			if exists(marker) {
				t.Error("the command ran")
			}
			r.logHas(t, c.log)
		})
	}
}

// TestSidecarWait: --wait is passed on as wait_ms, and a 409 that comes
// while the wait has time left is followed by another request.
func TestSidecarWait(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var waits []string
	addr := fakeSidecar(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		waits = append(waits, r.URL.Query().Get("wait_ms"))
		n := len(waits)
		mu.Unlock()
		if n == 1 {
			answer(w, http.StatusConflict, "application/json", map[string]any{
				"acquired": false, "reason": "held", "detail": "held",
				"holder": map[string]any{"owner": "other", "expires_at": time.Now().UTC().Format(time.RFC3339Nano), "ttl_remaining_ms": 0},
			})
			return
		}
		beginStream(w)
		sendEvent(w, "acquired", leaseData("nightly", r.URL.Query().Get("owner"), 5, 30*time.Second, 30*time.Second))
		pingUntilGone(w, r)
	})
	r := start(t, Config{Addr: addr, Task: "nightly", Owner: "w1", Wait: 2 * time.Hour, Command: shell(`echo "$LEASEHOLD_TOKEN"`)})
	r.expect(t, 0)
	if out := strings.TrimSpace(r.stdout.String()); out != "5" {
		t.Errorf("command saw token %q, want 5", out)
	}
	mu.Lock()
	defer mu.Unlock()
	// Two hours is more than a sidecar waits in one request.
	if len(waits) != 2 || waits[0] != "3600000" || waits[1] != "3600000" {
		t.Errorf("wait_ms of the requests: %q", waits)
	}
	r.logHas(t, "msg=waiting task=nightly holder=other")
}

// TestSidecarSignalForwarded: in --addr mode too, a signal reaches the
// command and the run ends with the command's status, closing the stream.
func TestSidecarSignalForwarded(t *testing.T) {
	t.Parallel()
	// Main listens for SIGHUP before it starts the command, which un-ignores
	// it, so the command gets the default action. This test feeds signals by
	// hand: listen here too, or a test run under nohup would hand the
	// command an ignored SIGHUP and the command would live on.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(hup) })
	gone := make(chan struct{})
	addr := fakeSidecar(t, func(w http.ResponseWriter, r *http.Request) {
		beginStream(w)
		sendEvent(w, "acquired", leaseData("nightly", r.URL.Query().Get("owner"), 9, 30*time.Second, 30*time.Second))
		pingUntilGone(w, r)
		close(gone)
	})
	dir := t.TempDir()
	started, termed := filepath.Join(dir, "started"), filepath.Join(dir, "termed")
	r := start(t, Config{Addr: addr, Task: "nightly", Owner: "w1", Command: shell(trapTerm, started, termed)})
	waitForFile(t, started)
	r.signals <- syscall.SIGHUP
	// sh's trap is on TERM: SIGHUP kills it.
	r.expect(t, 128+int(syscall.SIGHUP))
	select {
	case <-gone:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream was not closed after the command exited")
	}
}

// TestSidecarFrozenChildDiesFirst: a sidecar that stops confirming anything
// (frozen: the stream stays open, no renewal, no loss) cannot keep a child
// that ignores SIGTERM alive past the lease: leasehold run kills it by its
// local deadline, which counts from when the stream was asked for, however
// long --grace is. The child writes the time every few milliseconds; its
// last write comes before the latest moment the store's lease could end.
func TestSidecarFrozenChildDiesFirst(t *testing.T) {
	t.Parallel()
	asked := make(chan time.Time, 1)
	addr := fakeSidecar(t, func(w http.ResponseWriter, r *http.Request) {
		asked <- time.Now()
		owner := r.URL.Query().Get("owner")
		beginStream(w)
		sendEvent(w, "acquired", leaseData("nightly", owner, 3, time.Second, time.Second))
		<-r.Context().Done() // frozen: not even a ping
	})
	out := filepath.Join(t.TempDir(), "times")
	r := start(t, Config{
		Addr: addr, Task: "nightly", Owner: "w1", TTL: time.Second, Grace: time.Minute,
		Command: shell(`trap '' TERM; while :; do date +%s%N >> "$1"; sleep 0.005; done`, out),
	})
	r.expect(t, exitcode.Lost)
	expiry := (<-asked).Add(time.Second) // the lease ends no later than this
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(data))
	if len(lines) == 0 {
		t.Fatal("the child wrote nothing")
	}
	ns, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if last := time.Unix(0, ns); !last.Before(expiry) {
		t.Errorf("the child wrote at %s, after the lease's end %s", last.Format(time.StampMicro), expiry.Format(time.StampMicro))
	}
	r.logHas(t, "SIGKILL")
}
