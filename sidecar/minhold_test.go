package sidecar

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/sidecar/api"
)

// A claim's min_hold_ms reaches the store: the lease says hold_until, a
// release inside the hold answers it, and the task rests, refused to every
// claimant with resting: true, until it passes.
func TestMinHoldOverHTTP(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		r := ts.post("/v1/leases/hourly/claim", body{"owner": "w1", "ttl_ms": 60000, "min_hold_ms": 1500})
		expect(t, r, http.StatusOK)
		l := decode[api.ClaimAcquired](t, r).Lease
		acquired, _ := api.ParseTime(l.AcquiredAt)
		if l.HoldUntil == nil || *l.HoldUntil != api.FormatTime(acquired.Add(1500*time.Millisecond)) {
			t.Fatalf("lease claimed with min_hold_ms 1500: hold_until %v, want acquired_at + 1.5 s", l.HoldUntil)
		}

		r = ts.post("/v1/leases/hourly/release", body{"owner": "w1", "token": l.Token})
		expect(t, r, http.StatusOK)
		rel := decode[api.ReleaseResult](t, r)
		if !rel.Released || rel.HoldUntil == nil || *rel.HoldUntil != *l.HoldUntil {
			t.Fatalf("release inside the hold: %+v, want released with hold_until %s", rel, *l.HoldUntil)
		}
		for _, owner := range []string{"w2", "w1"} {
			r = ts.post("/v1/leases/hourly/claim", body{"owner": owner})
			expect(t, r, http.StatusConflict)
			held := decode[api.ClaimHeld](t, r)
			h := held.Holder
			if h.Owner != "w1" || h.Resting == nil || !*h.Resting || h.HoldUntil == nil || *h.HoldUntil != *l.HoldUntil ||
				h.ExpiresAt != *l.HoldUntil || h.AcquiredAt == nil || *h.AcquiredAt != l.AcquiredAt || !strings.Contains(held.Detail, "rests") {
				t.Errorf("claim by %s of the resting task: %+v", owner, held)
			}
		}
		r = ts.get("/v1/leases/hourly")
		expect(t, r, http.StatusOK)
		if got := decode[api.LeaseState](t, r); got.Held {
			t.Errorf("get of a resting task: %+v, want held: false (the lease ended)", got)
		}

		var got api.ClaimAcquired
		deadline := time.Now().Add(10 * time.Second)
		for {
			r = ts.post("/v1/leases/hourly/claim", body{"owner": "w2", "ttl_ms": 60000})
			if r.status == http.StatusOK {
				got = decode[api.ClaimAcquired](t, r)
				break
			}
			expect(t, r, http.StatusConflict)
			if time.Now().After(deadline) {
				t.Fatal("the task still rests 10 s after a 1.5 s hold")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got.Lease.AcquiredAt < *l.HoldUntil || got.Lease.Token != l.Token+1 || got.Lease.HoldUntil != nil {
			t.Errorf("grant after the hold: %+v; want acquired at or after %s, token %d, no hold", got.Lease, *l.HoldUntil, l.Token+1)
		}
	})
}

// min_hold_ms is checked like any field: out of range is refused naming it,
// and nothing is written.
func TestMinHoldRefused(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	for _, v := range []any{0, -1, 2678400001, "1h"} {
		r := ts.post("/v1/leases/bad-hold/claim", body{"owner": "w1", "min_hold_ms": v})
		if r.status != http.StatusBadRequest && r.status != http.StatusUnprocessableEntity {
			t.Fatalf("min_hold_ms %v: status %d, want 400 or 422; body %s", v, r.status, r.body)
		}
		p := decode[api.Problem](t, r)
		found := false
		for _, ip := range deref(p.InvalidParams) {
			found = found || ip.Name == "min_hold_ms"
		}
		if !found {
			t.Errorf("min_hold_ms %v: problem %+v does not name min_hold_ms", v, p)
		}
	}
	r := ts.get("/v1/leases/bad-hold/history")
	expect(t, r, http.StatusOK)
	if ev := decode[api.EventList](t, r); len(ev.Events) != 0 {
		t.Errorf("refused claims wrote history: %+v", ev.Events)
	}
}

// A task declares a minimum hold over HTTP: GET /v1/tasks shows it, and a
// claim that asks for none gets it.
func TestMinHoldDeclared(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		r := ts.put("/v1/tasks/nightly", body{"ttl_ms": 60000, "min_hold_ms": 3600000})
		expect(t, r, http.StatusCreated)
		if d := decode[api.TaskDeclaration](t, r); d.MinHoldMs == nil || *d.MinHoldMs != 3600000 {
			t.Fatalf("declared: %+v, want min_hold_ms 3600000", d)
		}
		r = ts.get("/v1/tasks")
		expect(t, r, http.StatusOK)
		list := decode[api.TaskList](t, r)
		if len(list.Tasks) != 1 || list.Tasks[0].MinHoldMs == nil || *list.Tasks[0].MinHoldMs != 3600000 {
			t.Fatalf("GET /v1/tasks: %+v, want nightly with min_hold_ms 3600000", list)
		}
		r = ts.post("/v1/leases/nightly/claim", body{"owner": "w1"})
		expect(t, r, http.StatusOK)
		l := decode[api.ClaimAcquired](t, r).Lease
		acquired, _ := api.ParseTime(l.AcquiredAt)
		if l.HoldUntil == nil || *l.HoldUntil != api.FormatTime(acquired.Add(time.Hour)) {
			t.Errorf("claim of a task declaring an hour's hold: hold_until %v, want acquired_at + 1 h", l.HoldUntil)
		}
		r = ts.put("/v1/tasks/plain", body{"ttl_ms": 60000})
		expect(t, r, http.StatusCreated)
		if d := decode[api.TaskDeclaration](t, r); d.MinHoldMs != nil {
			t.Errorf("a task declaring no hold says min_hold_ms %d; absent is none", *d.MinHoldMs)
		}
	})
}

// A release's run reaches the history's released event (outcome derived),
// with the hold's end when one rests the task; a release that ends nothing
// records nothing; every run answered is counted by outcome.
func TestRunOutcomeOverHTTP(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		r := ts.post("/v1/leases/report/claim", body{"owner": "w1", "ttl_ms": 60000, "min_hold_ms": 3600000})
		expect(t, r, http.StatusOK)
		l := decode[api.ClaimAcquired](t, r).Lease
		r = ts.post("/v1/leases/report/release", body{"owner": "w1", "token": l.Token, "run": body{"exit_code": 3, "duration_ms": 1500}})
		expect(t, r, http.StatusOK)
		if rel := decode[api.ReleaseResult](t, r); !rel.Released {
			t.Fatalf("release with a run: %+v", rel)
		}
		r = ts.post("/v1/leases/report/release", body{"owner": "w1", "run": body{"error": "killed by signal 9", "duration_ms": 20, "lost": true}})
		expect(t, r, http.StatusOK)
		if rel := decode[api.ReleaseResult](t, r); rel.Released {
			t.Fatalf("second release with a run ended a lease: %+v", rel)
		}

		r = ts.get("/v1/leases/report/history")
		expect(t, r, http.StatusOK)
		evs := decode[api.EventList](t, r).Events
		if len(evs) != 2 || evs[0].Kind != api.EventKind("released") {
			t.Fatalf("history: %+v, want released then acquired", evs)
		}
		run := evs[0].Run
		if run == nil || run.Outcome != "failed" || run.ExitCode == nil || *run.ExitCode != 3 || run.DurationMs != 1500 || run.Lost || run.Error != "" {
			t.Errorf("released event's run: %+v, want failed, exit_code 3, 1500 ms", run)
		}
		if evs[0].HoldUntil == nil || *evs[0].HoldUntil != *l.HoldUntil {
			t.Errorf("released event's hold_until: %v, want %s", evs[0].HoldUntil, *l.HoldUntil)
		}
		if evs[1].Run != nil || evs[1].HoldUntil != nil {
			t.Errorf("acquired event says a run or a hold: %+v", evs[1])
		}

		metrics := ts.get("/metrics")
		for series, want := range map[string]float64{
			`leasehold_runs_total{outcome="failed"}`:    1,
			`leasehold_runs_total{outcome="lost"}`:      1,
			`leasehold_runs_total{outcome="succeeded"}`: 0,
		} {
			if got := metricValue(t, string(metrics.body), series); got != want {
				t.Errorf("%s = %v, want %v", series, got, want)
			}
		}
	})
}
