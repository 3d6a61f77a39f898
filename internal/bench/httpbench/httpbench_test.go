package main

import (
	"strings"
	"testing"
	"time"
)

// wrk's own report, then claim.lua's line, as wrk 4.1 prints them.
const wrkOutput = `Running 5s test @ http://127.0.0.1:41234
  2 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.52ms  410.11us  12.03ms   90.12%
    Req/Sec     2.61k   201.33     3.01k    71.00%
  26012 requests in 5.00s, 9.81MB read
  Non-2xx or 3xx responses: 3
Requests/sec:   5201.62
Transfer/sec:      1.96MB
wrk-result requests=26012 duration_us=5000782 status=3 connect=0 read=1 write=0 timeout=0 p50_us=1480 p99_us=3021
`

func TestParseWrk(t *testing.T) {
	t.Parallel()
	r, err := parseWrk(wrkOutput)
	if err != nil {
		t.Fatal(err)
	}
	want := wrkResult{Requests: 26012, DurationUS: 5000782, Status: 3, Read: 1, P50US: 1480, P99US: 3021}
	if r != want {
		t.Errorf("parseWrk = %+v, want %+v", r, want)
	}
	if n := r.errorCount(); n != 4 {
		t.Errorf("errorCount = %d, want 4 (3 statuses, 1 read error)", n)
	}
	if s := secondsOf(r.DurationUS); s < 5.0007 || s > 5.0008 {
		t.Errorf("secondsOf(%d) = %v", r.DurationUS, s)
	}

	bad := []struct{ name, out, err string }{
		{"no result line", "Running 5s test @ http://127.0.0.1:1\n", "no wrk-result line"},
		{"missing field", "wrk-result requests=1 duration_us=5 status=0 connect=0 read=0 write=0 timeout=0 p50_us=1\n", "missing p99_us"},
		{"unknown field", strings.Replace(wrkOutput, "timeout=0", "timeout=0 retries=2", 1), `unexpected field "retries=2"`},
		{"not a number", strings.Replace(wrkOutput, "status=3", "status=x", 1), "status"},
		{"no duration", strings.Replace(wrkOutput, "duration_us=5000782", "duration_us=0", 1), "duration_us must be positive"},
	}
	for _, c := range bad {
		if _, err := parseWrk(c.out); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.err)
		}
	}
}

func TestWrkThreads(t *testing.T) {
	t.Parallel()
	cases := []struct{ clients, limit, want int }{
		{1, 2, 1}, {8, 2, 2}, {32, 2, 2}, {32, 4, 4}, {9, 2, 1}, {9, 4, 3}, {3, 8, 3}, {5, 0, 1},
	}
	for _, c := range cases {
		if got := wrkThreads(c.clients, c.limit); got != c.want {
			t.Errorf("wrkThreads(%d, %d) = %d, want %d", c.clients, c.limit, got, c.want)
		}
	}
}

func TestParseClients(t *testing.T) {
	t.Parallel()
	got, err := parseClients("1 8,32")
	if err != nil || len(got) != 3 || got[0] != 1 || got[1] != 8 || got[2] != 32 {
		t.Errorf("parseClients = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "8 x", "-1"} {
		if _, err := parseClients(bad); err == nil {
			t.Errorf("parseClients(%q) accepted", bad)
		}
	}
}

// The table gives medians over runs, ratios of medians, and "failed"
// wherever a run of a point failed, never a median of the others.
func TestTable(t *testing.T) {
	t.Parallel()
	r := newResults([]int{1, 32}, systems)
	ok := func(ops int64, secs float64, cpu time.Duration) point {
		return point{ops: ops, seconds: secs, serverCPU: cpu, pgCPU: cpu / 2, pgMeasured: true}
	}
	for _, p := range []point{ok(1000, 1, time.Second), ok(3000, 1, time.Second), ok(2000, 1, time.Second)} {
		r.add("raw", 1, p)
		r.add("pg", 1, point{ops: p.ops / 2, seconds: 1, serverCPU: 50 * time.Millisecond})
	}
	lat := ok(12345, 1, 0)
	lat.p50US, lat.p99US = 1500, 12345
	r.add("raw", 32, lat)
	r.add("pg", 32, ok(20000, 1, 0))
	r.add("pg", 32, point{ops: 1, seconds: 1, failed: "wrk: 1 answer above 399"})
	r.add("floor", 1, ok(20000, 2, 200*time.Millisecond))

	table := r.table()
	for _, want := range []string{
		"| ops/s | 1 client | 32 clients |",
		"| raw pgx conditional upsert | 2,000 | 12,345 |",
		"| `leasehold serve`, PostgreSQL | 1,000 | failed |",
		"| sidecar PG / raw pgx | 0.50× | failed |",
		"| sidecar PG / etcd | n/a | failed |",
		"| Go net/http hello (the HTTP floor) | 10,000 | n/a |",
		"| CPU µs/claim: sidecar on PostgreSQL | 50.0 | failed |",
		"| CPU µs/claim: PostgreSQL under the sidecar | n/a | failed |",
		"| CPU µs/claim: PostgreSQL under raw pgx | 250 | 0.0 |",
		"| CPU µs/request: HTTP floor server | 10.0 | n/a |",
		"| p50 ms: raw pgx | n/a | 1.50 |",
		"| p99 ms: raw pgx | n/a | 12.35 |",
	} {
		if !strings.Contains(table, want+"\n") {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if n := r.failures(); n != 1 {
		t.Errorf("failures = %d, want 1", n)
	}
	if strings.Contains(table, "-before") {
		t.Errorf("a run without -before has its rows:\n%s", table)
	}
}

// With -before, the earlier build's sidecars get rows of their own and a
// ratio against them.
func TestTableBefore(t *testing.T) {
	t.Parallel()
	r := newResults([]int{8}, systemsOf(config{before: "bin/old"}))
	r.add("pg", 8, point{ops: 3000, seconds: 1, serverCPU: 150 * time.Millisecond})
	r.add("pg-before", 8, point{ops: 2000, seconds: 1, serverCPU: 200 * time.Millisecond})
	table := r.table()
	for _, want := range []string{
		"| `leasehold serve` (-before), PostgreSQL | 2,000 |",
		"| sidecar PG / its -before build | 1.50× |",
		"| CPU µs/claim: -before sidecar on PostgreSQL | 100 |",
	} {
		if !strings.Contains(table, want+"\n") {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}
