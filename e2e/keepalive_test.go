package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/sse"
)

// event is one server-sent event of a keepalive stream.
type event struct {
	Name string
	Data map[string]any
}

// keepalive is an open keepalive stream to a sidecar process.
type keepalive struct{ *eventStream[event] }

// openKeepalive opens GET path on s; it fails the test unless the answer is
// a 200 event stream.
func (s *sidecar) openKeepalive(path string) *keepalive {
	s.t.Helper()
	return &keepalive{openEventStream(s, path, nil, 64, func(_, name, data string) event {
		ev := event{Name: name}
		_ = json.Unmarshal([]byte(data), &ev.Data)
		return ev
	})}
}

// eventStream is an open server-sent event stream to a sidecar process,
// its events decoded as E.
type eventStream[E any] struct {
	t      *testing.T
	cancel context.CancelFunc
	resp   *http.Response
	events chan E
	ended  chan struct{}
}

// openEventStream opens GET path on s with header; it fails the test unless
// the answer is a 200 event stream, whose events it then decodes in the
// background, buffering up to buf of them.
func openEventStream[E any](s *sidecar, path string, header http.Header, buf int, decode func(id, name, data string) E) *eventStream[E] {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		cancel()
		s.t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		s.t.Fatalf("GET %s: %d %s, want a 200 event stream", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	es := &eventStream[E]{t: s.t, cancel: cancel, resp: resp, events: make(chan E, buf), ended: make(chan struct{})}
	go func() {
		defer close(es.ended)
		readSSE(resp.Body, func(id, name, data string) { es.events <- decode(id, name, data) })
	}()
	s.t.Cleanup(es.close)
	return es
}

// next waits up to 30 s for the next event.
func (es *eventStream[E]) next() E {
	es.t.Helper()
	select {
	case ev := <-es.events:
		return ev
	case <-es.ended:
		select {
		case ev := <-es.events:
			return ev
		default:
		}
		es.t.Fatal("the stream ended without another event")
	case <-time.After(30 * time.Second):
		es.t.Fatal("no event within 30s")
	}
	var none E
	return none
}

func (es *eventStream[E]) close() {
	es.cancel()
	es.resp.Body.Close()
	<-es.ended
}

// nextNot returns the next event that is not a renewal.
func (k *keepalive) nextNot(name string) event {
	k.t.Helper()
	for {
		if ev := k.next(); ev.Name != name {
			return ev
		}
	}
}

// readSSE reads server-sent events from r until it ends, handing each
// event's id (empty when it has none), name and data to emit.
func readSSE(r io.Reader, emit func(id, name, data string)) {
	events := sse.NewReader(r)
	for {
		ev, err := events.Next()
		if err != nil {
			return
		}
		emit(ev.ID, ev.Name, ev.Data)
	}
}

// waitFree polls GET on s until the task is free; it returns how long that took.
func (s *sidecar) waitFree(task string) time.Duration {
	s.t.Helper()
	start := time.Now()
	for {
		if r := s.call("GET", "/v1/leases/"+task, nil); r.Body["held"] == false {
			return time.Since(start)
		}
		if time.Since(start) > 30*time.Second {
			s.t.Fatalf("task %s still held 30s later", task)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A keepalive stream holds the lease across sidecars, renews on its own, and
// the lease is released when the client disconnects.
func TestKeepaliveStream(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			a, b := startPair(t, kind.url(t))

			k := a.openKeepalive("/v1/leases/stream-job/keepalive?owner=w1&ttl_ms=1000")
			acq := k.next()
			if acq.Name != "acquired" || acq.Data["owner"] != "w1" {
				t.Fatalf("first event %+v, want acquired by w1", acq)
			}
			for i := 1; i <= 2; i++ {
				ev := k.next()
				if ev.Name != "renewed" || ev.Data["renew_count"] != float64(i) || ev.Data["token"] != acq.Data["token"] {
					t.Fatalf("event %+v, want renewal %d under token %v", ev, i, acq.Data["token"])
				}
			}
			if r := b.call("POST", "/v1/leases/stream-job/claim", map[string]any{"owner": "w2"}); r.Status != http.StatusConflict {
				t.Fatalf("claim through the other sidecar: %s, want 409", r.Raw)
			}
			k.close()
			took := b.waitFree("stream-job")
			t.Logf("released %s after the client disconnected (seen from the other sidecar)", took)
		})
	}
}

// SIGTERM: the sidecar releases every streamed lease, then says so.
func TestKeepaliveReleasedOnShutdown(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			a, b := startPair(t, kind.url(t))
			k := a.openKeepalive("/v1/leases/shutdown-job/keepalive?owner=w1&ttl_ms=60000")
			k.next()
			_ = a.proc.Signal(syscall.SIGTERM)
			ev := k.nextNot("renewed")
			if ev.Name != "released" || ev.Data["reason"] != "shutdown" {
				t.Fatalf("event %+v, want released (shutdown)", ev)
			}
			// Released before it said so: another sidecar can claim at once,
			// with no wait for the 60 s ttl.
			if r := b.call("POST", "/v1/leases/shutdown-job/claim", map[string]any{"owner": "w2"}); r.Status != http.StatusOK {
				t.Fatalf("claim after the released event: %s", r.Raw)
			}
			if code := a.wait(); code != 0 {
				t.Fatalf("exit code %d after SIGTERM", code)
			}
		})
	}
}

// A sidecar frozen past the ttl (SIGSTOP) loses the lease to another; when it
// wakes it tells its client the lease is lost, and the new holder keeps it.
func TestFrozenSidecarLosesTheLease(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			a, b := startPair(t, kind.url(t))
			k := a.openKeepalive("/v1/leases/frozen-job/keepalive?owner=w1&ttl_ms=1000")
			first := k.next()

			if err := a.proc.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = a.proc.Signal(syscall.SIGCONT) })
			// Once the frozen holder's lease expires, the other sidecar's
			// claim succeeds, with the next token.
			var taken response
			deadline := time.Now().Add(30 * time.Second)
			for {
				taken = b.call("POST", "/v1/leases/frozen-job/claim", map[string]any{"owner": "w2", "ttl_ms": 60000})
				if taken.Status == http.StatusOK {
					break
				}
				if taken.Status != http.StatusConflict || time.Now().After(deadline) {
					t.Fatalf("claim while the holder is frozen: %s", taken.Raw)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if taken.token(t) != int64(first.Data["token"].(float64))+1 {
				t.Fatalf("takeover token %d, want %v+1", taken.token(t), first.Data["token"])
			}

			if err := a.proc.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			ev := k.nextNot("renewed")
			if ev.Name != "lost" {
				t.Fatalf("event after waking %+v, want lost", ev)
			}
			if r := ev.Data["reason"]; r != "held_by_other" && r != "deadline" {
				t.Fatalf("lost reason %v, want held_by_other or deadline", r)
			}
			// The woken sidecar's release is token-checked: the new holder keeps it.
			got := a.call("GET", "/v1/leases/frozen-job", nil)
			if got.Body["held"] != true || got.lease(t)["owner"] != "w2" {
				t.Fatalf("after the frozen sidecar woke: %s, want held by w2", got.Raw)
			}
		})
	}
}
