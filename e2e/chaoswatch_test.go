package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the history's final read on an SQLite store

	"github.com/leasehold/leasehold/e2e/leasecheck"
	"github.com/leasehold/leasehold/internal/sse"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// The chaos run's watcher: while sidecars die, freeze and lose their store,
// a client follows GET /v1/watch for the run's tasks, moving to the next
// sidecar every few seconds and whenever its stream breaks, resuming with
// Last-Event-ID. At the end, everything it was sent is checked against the
// history the store holds (leasecheck.CheckWatch): every event, in id order,
// each once.

// watchHop is how long the watcher stays on one sidecar before it moves on
// to the next of its own accord, so that a run resumes many times, across
// sidecars, besides when faults break its stream.
const watchHop = 5 * time.Second

type chaosWatcher struct {
	urls   []string
	prefix string

	mu         sync.Mutex
	events     []leasecheck.StoredEvent
	connects   int
	ends       map[string]int // end events, by reason
	lastErrors []string
}

// run follows the watch until ctx ends.
func (cw *chaosWatcher) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		err := cw.follow(ctx, cw.urls[i%len(cw.urls)])
		if ctx.Err() != nil {
			return
		}
		cw.mu.Lock()
		if err != nil && len(cw.lastErrors) < 20 {
			cw.lastErrors = append(cw.lastErrors, err.Error())
		}
		cw.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (cw *chaosWatcher) last() int64 {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if len(cw.events) == 0 {
		return 0
	}
	return cw.events[len(cw.events)-1].ID
}

// follow reads one stream from base until it breaks, its hop is over, or
// ctx ends.
func (cw *chaosWatcher) follow(ctx context.Context, base string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/watch?since=0&prefix="+url.QueryEscape(cw.prefix), nil)
	if err != nil {
		return err
	}
	if last := cw.last(); last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(last, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s/v1/watch: %d", base, resp.StatusCode)
	}
	cw.mu.Lock()
	cw.connects++
	cw.mu.Unlock()
	events := make(chan sse.Event)
	go func() {
		defer close(events)
		r := sse.NewReader(resp.Body)
		for {
			ev, err := r.Next()
			if err != nil {
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	// A stream whose sidecar froze says nothing: the hop moves on from it.
	hop := time.NewTimer(watchHop)
	defer hop.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hop.C:
			return nil
		case ev, ok := <-events:
			if !ok {
				return fmt.Errorf("%s: the stream ended", base)
			}
			if err := cw.take(ev.Name, ev.ID, ev.Data); err != nil {
				return err
			}
		}
	}
}

// take records one event of the stream.
func (cw *chaosWatcher) take(name, id, data string) error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	switch name {
	case "ready":
		return nil
	case "end":
		var end struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal([]byte(data), &end)
		cw.ends[end.Reason]++
		return fmt.Errorf("end: %s", data)
	}
	var ev struct {
		ID    int64  `json:"id"`
		Task  string `json:"task"`
		Kind  string `json:"kind"`
		Owner string `json:"owner"`
		Token int64  `json:"token"`
	}
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		return fmt.Errorf("event %s: %w", name, err)
	}
	if id != strconv.FormatInt(ev.ID, 10) || name != ev.Kind {
		// Recorded as delivered so that the check reports it.
		ev.Kind = fmt.Sprintf("%s (sent as event %s, id %s)", ev.Kind, name, id)
	}
	cw.events = append(cw.events, leasecheck.StoredEvent{ID: ev.ID, Task: ev.Task, Kind: ev.Kind, Owner: ev.Owner, Token: ev.Token})
	return nil
}

// storedHistory reads, with plain SQL, every history event of the tasks
// under prefix from the store, in id order.
func storedHistory(ctx context.Context, store, prefix string) ([]leasecheck.StoredEvent, error) {
	const q = `SELECT id, task, kind, owner, token FROM leasehold_history WHERE substr(task, 1, length($1)) = $1 ORDER BY id`
	if path, ok := storeurl.SQLitePath(store); ok {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			return nil, err
		}
		defer db.Close()
		rows, err := db.QueryContext(ctx, strings.ReplaceAll(q, "$1", "?1"), prefix)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return scanEvents(rows)
	}
	conn, err := pgx.Connect(ctx, store)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, q, prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanEvents(rows)
}

// scanEvents reads storedHistory's rows, from database/sql or pgx.
func scanEvents(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}) ([]leasecheck.StoredEvent, error) {
	var out []leasecheck.StoredEvent
	for rows.Next() {
		var ev leasecheck.StoredEvent
		if err := rows.Scan(&ev.ID, &ev.Task, &ev.Kind, &ev.Owner, &ev.Token); err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}

// startWatchCheck starts the watcher of a chaos run; the function it
// returns waits for the watcher to reach the end of the history, stops it
// and checks what it was sent.
func startWatchCheck(t *testing.T, f *fleet, prefix string) func() {
	t.Helper()
	cw := &chaosWatcher{urls: f.urls(), prefix: prefix, ends: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); cw.run(ctx) }()
	return func() {
		t.Helper()
		defer func() { cancel(); <-done }()
		history, err := storedHistory(t.Context(), f.stores[0], prefix)
		if err != nil {
			t.Errorf("watch check: read the history: %v", err)
			return
		}
		if len(history) == 0 {
			t.Error("watch check: the history holds no event of the run")
			return
		}
		// The load is over: wait for the watcher to reach the history's end.
		end := history[len(history)-1].ID
		deadline := time.Now().Add(2 * time.Minute)
		for cw.last() < end && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		<-done
		// Expiry sweeps may have added events since the read: read again.
		if history, err = storedHistory(t.Context(), f.stores[0], prefix); err != nil {
			t.Errorf("watch check: read the history: %v", err)
			return
		}
		last := cw.last()
		cw.mu.Lock()
		defer cw.mu.Unlock()
		breaches := leasecheck.CheckWatch(cw.events, history)
		chaosLogf(t, "CHAOS %s: watch delivered %d of %d events over %d connections (ended by the sidecar, by reason: %v), breaches %d",
			t.Name(), len(cw.events), len(history), cw.connects, cw.ends, len(breaches))
		if last < end {
			t.Errorf("watch check: the watcher reached event %d, not the history's last %d; its last errors: %q", last, end, cw.lastErrors)
		}
		for i, b := range breaches {
			if i == 20 {
				t.Errorf("… and %d more watch breaches", len(breaches)-i)
				break
			}
			t.Errorf("watch breach: %s", b)
		}
	}
}
