package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// watchEvent is one event of a watch stream: a history event, or ready/end.
type watchEvent struct {
	ID    string // the id: line
	Name  string
	Event struct {
		ID    int64  `json:"id"`
		Task  string `json:"task"`
		Kind  string `json:"kind"`
		Owner string `json:"owner"`
		Token int64  `json:"token"`
		At    string `json:"at"`
	}
	Raw string
}

// watchStream is an open GET /v1/watch on a sidecar process.
type watchStream struct{ *eventStream[watchEvent] }

// openWatch opens GET path on s with the given Last-Event-ID (none when
// empty).
func (s *sidecar) openWatch(path, lastEventID string) *watchStream {
	s.t.Helper()
	header := http.Header{}
	if lastEventID != "" {
		header.Set("Last-Event-ID", lastEventID)
	}
	return &watchStream{openEventStream(s, path, header, 4096, func(id, name, data string) watchEvent {
		ev := watchEvent{ID: id, Name: name, Raw: data}
		_ = json.Unmarshal([]byte(data), &ev.Event)
		return ev
	})}
}

// changes reads history events (skipping ready) until it has n of them,
// checking that each one's id: line is its id.
func (w *watchStream) changes(n int) []watchEvent {
	w.t.Helper()
	var out []watchEvent
	for len(out) < n {
		ev := w.next()
		switch ev.Name {
		case "ready":
			continue
		case "end":
			w.t.Fatalf("the watch ended: %s", ev.Raw)
		}
		if ev.ID != strconv.FormatInt(ev.Event.ID, 10) || ev.Name != ev.Event.Kind {
			w.t.Fatalf("event %s (id: %s) carries %s", ev.Name, ev.ID, ev.Raw)
		}
		out = append(out, ev)
	}
	return out
}

func (w *watchStream) ready() {
	w.t.Helper()
	if ev := w.next(); ev.Name != "ready" {
		w.t.Fatalf("first event %s, want ready", ev.Name)
	}
}

// historyIDs reads the ids of every event the store holds for tasks,
// through s, in id order.
func historyIDs(t *testing.T, s *sidecar, tasks []string) []int64 {
	t.Helper()
	var ids []int64
	for _, task := range tasks {
		r := s.call("GET", "/v1/leases/"+task+"/history?limit=1000", nil)
		if r.Status != http.StatusOK {
			t.Fatalf("history of %s: %d %v", task, r.Status, r.Body)
		}
		for _, ev := range r.Body["events"].([]any) {
			ids = append(ids, int64(ev.(map[string]any)["id"].(float64)))
		}
	}
	slices.Sort(ids)
	return ids
}

// TestWatchAcrossSidecars: a watch on one sidecar process hears every
// change made through another, on both stores: in id order, none lost or
// repeated, including an expiry nobody claimed after; and a watcher that
// reconnects with Last-Event-ID gets exactly what it missed.
func TestWatchAcrossSidecars(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			a, b := startPair(t, kind.url(t))
			w := a.openWatch("/v1/watch?prefix=job-", "")
			w.ready()

			// Concurrent claims and releases through b, and one lease left
			// to run out.
			const tasks = 8
			var names []string
			var wg sync.WaitGroup
			for i := range tasks {
				task := fmt.Sprintf("job-%d", i)
				names = append(names, task)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for round := range 3 {
						owner := fmt.Sprintf("w%d-%d", i, round)
						if r := b.call("POST", "/v1/leases/"+task+"/claim", map[string]any{"owner": owner, "ttl_ms": 60000}); r.Status != http.StatusOK {
							t.Errorf("claim %s: %d %v", task, r.Status, r.Body)
							return
						}
						if r := b.call("POST", "/v1/leases/"+task+"/release", map[string]any{"owner": owner}); r.Status != http.StatusOK {
							t.Errorf("release %s: %d %v", task, r.Status, r.Body)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.call("POST", "/v1/leases/other/claim", map[string]any{"owner": "x", "ttl_ms": 60000}) // outside the prefix
			short := b.call("POST", "/v1/leases/job-short/claim", map[string]any{"owner": "brief", "ttl_ms": 300})
			if short.Status != http.StatusOK {
				t.Fatalf("claim job-short: %d %v", short.Status, short.Body)
			}
			names = append(names, "job-short")

			// 8 tasks × 3 rounds × (acquired, released), then job-short's
			// acquired and expired.
			got := w.changes(tasks*3*2 + 2)
			var ids []int64
			for _, ev := range got {
				ids = append(ids, ev.Event.ID)
				if !strings.HasPrefix(ev.Event.Task, "job-") {
					t.Fatalf("event of %s outside the prefix", ev.Event.Task)
				}
			}
			if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
				t.Fatalf("watch ids not rising: %v", ids)
			}
			if want := historyIDs(t, a, names); !slices.Equal(ids, want) {
				t.Fatalf("watch gave ids %v, the history holds %v", ids, want)
			}
			last := got[len(got)-1].Event
			if last.Task != "job-short" || last.Kind != "expired" || last.Owner != "brief" {
				t.Fatalf("last event %+v, want job-short expired (owner brief)", last)
			}
			if at := short.lease(t)["expires_at"]; last.At != at {
				t.Fatalf("expired at %s, want the lease's expiry %v", last.At, at)
			}

			// Disconnect, change things through b, resume on b itself.
			w.close()
			for i := range 3 {
				b.call("POST", "/v1/leases/job-0/claim", map[string]any{"owner": fmt.Sprintf("late-%d", i), "ttl_ms": 60000})
				b.call("POST", "/v1/leases/job-0/release", map[string]any{"owner": fmt.Sprintf("late-%d", i)})
			}
			resumed := b.openWatch("/v1/watch?prefix=job-&since=0", strconv.FormatInt(last.ID, 10))
			missed := resumed.changes(6)
			want := historyIDs(t, b, names)
			if !slices.Equal(eventIDs(missed), want[len(want)-6:]) || missed[0].Event.ID <= last.ID {
				t.Fatalf("resumed after %d with %v, want %v", last.ID, eventIDs(missed), want[len(want)-6:])
			}
			resumed.ready()
		})
	}
}

func eventIDs(evs []watchEvent) []int64 {
	var ids []int64
	for _, ev := range evs {
		ids = append(ids, ev.Event.ID)
	}
	return ids
}
