// Command httpbench is make bench-http: new durable lease grants per second
// seen by a client in another process, for leasehold and for what it is
// compared with, side by side in one run.
//
// Every op is a new grant on a task of its own (a history row with it):
//
//   - raw pgx: the PostgreSQL driver's single-claim statement
//     (postgres.LoneClaimSQL, so that it cannot drift), one statement and
//     one commit per op on N pooled connections, sent by httpbench itself
//     re-run as a separate process (httpbench raw, benchproc.RawMain);
//   - sidecar PG and sidecar SQLite: `leasehold serve` driven by wrk with
//     claim.lua, a POST …/claim of a new task per request;
//   - etcd: a lease grant and a put attached to it, from etcdload (a module
//     of its own, see its doc) against a real etcd server;
//   - the HTTP floor: a net/http server that answers every request with
//     "hello" (httpbench hello), driven by wrk with the same script.
//
// Each point (system × clients) starts from empty: a new PostgreSQL
// database, SQLite file or etcd data directory, and a new server process.
// Runs are interleaved (every point of run 1, then of run 2, ...) and the
// table gives medians. A point with any error or non-2xx answer fails
// (its cell says so) rather than being averaged in, and so does one whose
// store does not hold as many grants as the client counted.
//
// CPU per op is the server process's utime+stime from /proc before and
// after the load, divided by the successful ops; PostgreSQL's is the
// postmaster's and all its children's, when the server runs on this host.
//
// Usage (make bench-http builds the binaries and starts PostgreSQL):
//
//	httpbench -leasehold bin/leasehold -etcd bin/etcd -etcdload bin/etcdload -duration 10s -runs 3
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/bench/benchproc"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "raw":
			os.Exit(benchproc.RawMain(os.Args[2:], os.Stdout))
		case "hello":
			os.Exit(helloMain(os.Args[2:]))
		}
	}
	var cfg config
	flag.StringVar(&cfg.leasehold, "leasehold", "bin/leasehold", "the leasehold binary")
	flag.StringVar(&cfg.before, "before", "", "another leasehold binary (an earlier build) to measure beside -leasehold in the same runs, with ratios")
	flag.StringVar(&cfg.etcd, "etcd", "bin/etcd", "the etcd server binary")
	flag.StringVar(&cfg.etcdload, "etcdload", "bin/etcdload", "the etcd load client binary")
	flag.StringVar(&cfg.wrk, "wrk", "wrk", "the wrk binary")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "load per point")
	flag.IntVar(&cfg.runs, "runs", 3, "interleaved runs; the table gives medians")
	flag.IntVar(&cfg.wrkThreads, "wrk-threads", 2, "wrk threads at most (fewer when there are fewer clients)")
	clients := flag.String("clients", "1 8 32", "concurrent clients per point, space or comma separated")
	flag.StringVar(&cfg.out, "out", "bench-http.txt", "file that gets a copy of the report")
	flag.Parse()
	var err error
	if cfg.clients, err = parseClients(*clients); err != nil {
		fmt.Fprintln(os.Stderr, "httpbench:", err)
		os.Exit(2)
	}
	cfg.pgURL = os.Getenv("LEASEHOLD_TEST_POSTGRES_URL")
	if cfg.pgURL == "" {
		fmt.Fprintln(os.Stderr, "httpbench: LEASEHOLD_TEST_POSTGRES_URL is not set (run under scripts/with-postgres.sh)")
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "httpbench:", err)
		os.Exit(1)
	}
}

func parseClients(s string) ([]int, error) {
	var out []int
	for f := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-clients: %q is not a positive whole number", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-clients: give at least one count")
	}
	return out, nil
}
