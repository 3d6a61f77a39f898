package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCompareIDs(t *testing.T) {
	t.Parallel()
	want := []int64{3, 5, 8, 13}
	cases := []struct {
		name string
		got  []int64
		msg  string // "" or a part of the message
	}{
		{"same", []int64{3, 5, 8, 13}, ""},
		{"missing", []int64{3, 8, 13}, "3 acquired events for the store's 4: 1 missing, 0 not in the store"},
		{"extra", []int64{3, 5, 6, 8, 13}, "0 missing, 1 not in the store"},
		{"repeated", []int64{3, 5, 5, 8, 13}, "event 2 (id 5) came after id 5"},
		{"out of order", []int64{3, 8, 5, 13}, "event 2 (id 5) came after id 8"},
		{"none", nil, "0 acquired events for the store's 4: 4 missing"},
	}
	for _, c := range cases {
		got := compareIDs(want, c.got)
		if (c.msg == "") != (got == "") || !strings.Contains(got, c.msg) {
			t.Errorf("%s: compareIDs = %q, want %q", c.name, got, c.msg)
		}
	}
	if got := compareIDs(nil, nil); got != "" {
		t.Errorf("no events anywhere: %q", got)
	}
}

// The trigger comes from the migration that defines it, whole.
func TestTriggerSQL(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../../leasecore/postgres/migrations/0004_watch.sql")
	if err != nil {
		t.Fatal(err)
	}
	sql, err := triggerSQL(string(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CREATE FUNCTION leasehold_history_notify() RETURNS trigger", "pg_notify('leasehold_history', '')",
		"CREATE TRIGGER leasehold_history_notify", "REFERENCING NEW TABLE AS added", "FOR EACH STATEMENT"} {
		if !strings.Contains(sql, want) {
			t.Errorf("trigger SQL lacks %q:\n%s", want, sql)
		}
	}
	if !strings.HasSuffix(sql, "EXECUTE FUNCTION leasehold_history_notify();") || strings.Contains(sql, "COMMENT ON") {
		t.Errorf("trigger SQL does not end at the trigger:\n%s", sql)
	}
	for _, bad := range []string{"", "CREATE FUNCTION leasehold_history_notify() RETURNS trigger AS $$ $$;",
		"CREATE FUNCTION leasehold_history_notify() ...; EXECUTE FUNCTION leasehold_history_notify();"} {
		if _, err := triggerSQL(bad); err == nil {
			t.Errorf("triggerSQL(%q) accepted", bad)
		}
	}
}

func TestWithParam(t *testing.T) {
	t.Parallel()
	got, err := withParam("postgres://postgres@127.0.0.1:5432/db?sslmode=disable&default_query_exec_mode=exec", "pool_max_conns", "2")
	if err != nil {
		t.Fatal(err)
	}
	if want := "postgres://postgres@127.0.0.1:5432/db?default_query_exec_mode=exec&pool_max_conns=2&sslmode=disable"; got != want {
		t.Errorf("withParam = %q, want %q", got, want)
	}
	if got, _ := withParam("postgres://h/db?pool_max_conns=9", "pool_max_conns", "3"); got != "postgres://h/db?pool_max_conns=3" {
		t.Errorf("withParam did not replace the value: %q", got)
	}
}

func TestParseCountsAndWords(t *testing.T) {
	t.Parallel()
	got, err := parseCounts("-fleet", "4 16,32", false)
	if err != nil || len(got) != 3 || got[0] != 4 || got[2] != 32 {
		t.Errorf("parseCounts = %v, %v", got, err)
	}
	if got, err := parseCounts("-raw", " ", true); err != nil || len(got) != 0 {
		t.Errorf("an empty -raw = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "4 x", "-1"} {
		if _, err := parseCounts("-fleet", bad, false); err == nil || !strings.Contains(err.Error(), "-fleet") {
			t.Errorf("parseCounts(%q) = %v, want an error naming -fleet", bad, err)
		}
	}
	words, err := parseWords("-modes", "trigger,none", allModes)
	if err != nil || strings.Join(words, " ") != "none trigger" {
		t.Errorf("parseWords = %v, %v (want allowed's order)", words, err)
	}
	for _, bad := range []string{"", "none none", "watch notify"} {
		if _, err := parseWords("-modes", bad, allModes); err == nil || !strings.Contains(err.Error(), "-modes") {
			t.Errorf("parseWords(%q) = %v, want an error naming -modes", bad, err)
		}
	}
}

func TestWatcherSidecar(t *testing.T) {
	t.Parallel()
	cases := []struct {
		n, w int
		want []int
	}{
		{4, 4, []int{0, 1, 2, 3}},
		{64, 4, []int{0, 16, 32, 48}},
		{2, 4, []int{0, 0, 1, 1}},
		{1, 3, []int{0, 0, 0}},
	}
	for _, c := range cases {
		for k, want := range c.want {
			if got := watcherSidecar(k, c.n, c.w); got != want {
				t.Errorf("watcherSidecar(%d, %d, %d) = %d, want %d", k, c.n, c.w, got, want)
			}
		}
	}
}

func TestCheckLoad(t *testing.T) {
	t.Parallel()
	good := loadResult{Grants: 10, StoreGrants: 10, WatchEvents: []int{10, 10}, Seconds: 1}
	if _, failed := checkLoad(good, 2); failed != "" {
		t.Errorf("a good point failed: %s", failed)
	}
	cases := []struct {
		name     string
		change   func(*loadResult)
		watchers int
		want     string
	}{
		{"load error", func(r *loadResult) { r.Error = "boom" }, 2, "boom"},
		{"claims failed", func(r *loadResult) { r.Errors, r.FirstError = 3, "503" }, 2, "3 claims failed, the first: 503"},
		{"stream ended", func(r *loadResult) { r.StreamErrors, r.FirstStream = 1, "EOF" }, 2, "1 streams or watchers failed or ended early, the first: EOF"},
		{"store has more", func(r *loadResult) { r.StoreGrants = 11 }, 2, "grants do not match: 11 acquired history rows for 10 grants counted"},
		{"store has fewer", func(r *loadResult) { r.StoreGrants = 9 }, 2, "grants do not match"},
		{"a watcher missing", func(r *loadResult) { r.WatchEvents = r.WatchEvents[:1] }, 2, "1 watchers reported, want 2"},
		{"watch broke its promise", func(r *loadResult) { r.WatchCheck = "watcher 1: 9 acquired events" }, 2, "the watch did not keep its promise: watcher 1"},
	}
	for _, c := range cases {
		r := good
		r.WatchEvents = append([]int(nil), good.WatchEvents...)
		c.change(&r)
		if _, failed := checkLoad(r, c.watchers); !strings.Contains(failed, c.want) || failed == "" {
			t.Errorf("%s: failed = %q, want it to contain %q", c.name, failed, c.want)
		}
	}
}

// The claim client's own HTTP/1.1: new grants counted with their latency,
// anything else counted as an error, a connection the server closes
// opened again.
func TestClaimClient(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/leases/p-0-0-") || !strings.HasSuffix(r.URL.Path, "/claim") {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch k := n.Add(1); {
		case k == 3:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"title":"unavailable"}`))
		case k == 4:
			_, _ = w.Write([]byte(`{"acquired":false}`))
		case k%5 == 0:
			w.Header().Set("Connection", "close")
			_, _ = w.Write([]byte(`{"acquired":true,"lease":{"token":1}}`))
		default:
			_, _ = w.Write([]byte(`{"acquired":true,"lease":{"token":1}}`))
		}
	}))
	t.Cleanup(srv.Close)
	c, err := newClaimClient(srv.URL, "p-0-0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	deadline := time.Now().Add(30 * time.Second)
	for n.Load() < 20 && time.Now().Before(deadline) {
		c.run(time.Now().Add(time.Millisecond))
	}
	if n.Load() < 20 {
		t.Fatalf("only %d requests in 30s", n.Load())
	}
	if c.errors != 2 || c.firstErr == nil || !strings.Contains(c.firstErr.Error(), "503") {
		t.Errorf("errors = %d (first %v), want 2, the first a 503", c.errors, c.firstErr)
	}
	if c.grants != n.Load()-2 || int64(len(c.latencies)) != c.grants {
		t.Errorf("grants = %d with %d latencies, want %d", c.grants, len(c.latencies), n.Load()-2)
	}
}

// The report: ratios of medians, FAILED wherever any run of a point failed
// (never a median of the rest), median and max over the sidecars.
func TestTables(t *testing.T) {
	t.Parallel()
	cfg := config{fleet: []int{4, 16}, routes: []string{"direct"}, modes: []string{"none", "floor", "watch", "trigger"}, raw: []int{8}}
	r := newResults(cfg)
	ok := func(grants int64) point {
		return point{grants: grants, seconds: 1, p50US: 1500, p99US: 12000, renewals: 64, pgCPU: time.Duration(grants) * 100 * time.Microsecond,
			pgMeasured: true, serverConns: 8, idleRSS: []float64{20, 24, 22}, idleCPU: []float64{0.01, 0.02, 0.03},
			loadRSS: []float64{30, 31, 35}, loadCPU: []float64{0.1, 0.2, 0.5}}
	}
	r.add("direct", 4, "none", ok(1000))
	r.add("direct", 4, "none", ok(3000))
	r.add("direct", 4, "none", ok(2000))
	r.add("direct", 4, "floor", ok(2000))
	r.add("direct", 4, "watch", ok(1900))
	r.add("direct", 4, "trigger", ok(1000))
	r.add("direct", 16, "none", ok(4000))
	r.add("direct", 16, "watch", ok(4000))
	r.add("direct", 16, "watch", point{failed: "the watch did not keep its promise"})
	r.addRaw(8, point{grants: 5000, seconds: 1, pgCPU: 500 * time.Millisecond, pgMeasured: true})

	out := r.tables()
	for _, want := range []string{
		"| new grants/s ratio | 4 sidecars | 16 sidecars |",
		"| direct: watch / floor | 0.95× | FAILED |",
		"| direct: floor / none | 1.00× | n/a |",
		"| direct: watch / none | 0.95× | FAILED |",
		"| direct: trigger / none | 0.50× | n/a |",
		"| 4 | none | — | 2,000 | 1.50 | 12.00 | 64 | 100 | 0.0 | n/a | 8 | 22.0 / 24.0 | 2.0 / 3.0 | 31.0 / 35.0 | 20.0 / 50.0 |",
		"| 4 | watch | 0.95× | 1,900 |",
		"| 16 | watch | FAILED | FAILED |",
		"| 16 | trigger | n/a | n/a |",
		"| raw lone claim statement, no trigger | 8 conns |",
		"| new grants/s | 5,000 |",
		"| PG CPU µs/grant | 100 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tables lack %q:\n%s", want, out)
		}
	}
	if n := r.failures(); n != 1 {
		t.Errorf("failures = %d, want 1", n)
	}
}
