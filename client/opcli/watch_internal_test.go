package opcli

import (
	"github.com/leasehold/leasehold/internal/endpoint"

	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/sidecar/api"
)

// A watch stream that goes silent, neither event nor ping, is dead: on the
// first connection the watch ends with a message; once the address has
// shown itself a sidecar, it reconnects. The idle bound is shortened here;
// TestWatchServerNeverAnswers checks the answer's bound at its default.
func TestWatchSilentStream(t *testing.T) {
	t.Parallel()
	for _, proven := range []bool{false, true} {
		t.Run(fmt.Sprintf("after_ready=%v", proven), func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			second := make(chan struct{})
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 2 {
					close(second)
				}
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				if proven {
					fmt.Fprint(w, "event: ready\ndata: {\"position\":3}\n\n")
				}
				w.(http.Flusher).Flush()
				<-r.Context().Done() // and then nothing
			}))
			t.Cleanup(hs.Close)
			notes := &lockedbuf.Buffer{}
			ep, err := endpoint.Parse(hs.URL)
			if err != nil {
				t.Fatal(err)
			}
			c := newClient(ep, "", notes)
			c.watchIdle = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			go func() {
				select {
				case <-second:
					cancel()
				case <-ctx.Done():
				}
			}()
			err = c.watch(ctx, &verbFlags{since: -1}, func(api.Event) error { return nil }, func(int64) {}, func(int64, int64) {})
			if !proven {
				if err == nil || exitcode.Of(err) != exitcode.Unavailable || !strings.Contains(err.Error(), "said nothing for") || ctx.Err() != nil {
					t.Fatalf("watch of a silent first stream: %v (exit %d, context %v), want it to end, unavailable, saying so", err, exitcode.Of(err), ctx.Err())
				}
				return
			}
			if err != nil || n.Load() < 2 {
				t.Fatalf("watch after a silent stream: %v, %d connections; want a reconnection", err, n.Load())
			}
			if !strings.Contains(notes.String(), "said nothing for") || !strings.Contains(notes.String(), "reconnecting") {
				t.Errorf("notes: %s", notes.String())
			}
		})
	}
}

// history and watch say a released event's run and hold after its detail.
func TestEventDetail(t *testing.T) {
	t.Parallel()
	hold := "2026-12-04T23:10:32.936Z"
	for _, tc := range []struct {
		e    api.Event
		want string
	}{
		{api.Event{}, ""},
		{api.Event{Detail: "revoked by an operator"}, "revoked by an operator"},
		{api.Event{Run: &api.RunResult{Outcome: "succeeded", ExitCode: new(0), DurationMs: 1500}}, "run succeeded in 1.5s"},
		{api.Event{Run: &api.RunResult{Outcome: "failed", ExitCode: new(3), DurationMs: 20000}, HoldUntil: &hold}, "run failed (exit 3) in 20s; rests until " + hold},
		{api.Event{Run: &api.RunResult{Outcome: "failed", Error: "killed by signal 9 (killed)", DurationMs: 100}}, "run failed (killed by signal 9 (killed)) in 100ms"},
		{api.Event{Detail: "d", Run: &api.RunResult{Outcome: "lost", ExitCode: new(143), Lost: true, DurationMs: 5000}}, "d; run lost (exit 143) in 5s"},
	} {
		if got := eventDetail(tc.e); got != tc.want {
			t.Errorf("eventDetail(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}
