// Command fleetbench is make bench-fleet: what a fleet of `leasehold serve`
// processes on one PostgreSQL carries, measured from outside, with and
// without the watch's notification, side by side in one run.
//
// A point is N sidecar processes (benchproc.StartSidecar) on one fresh,
// migrated database, each with a small pool (-pool, the store URL's
// pool_max_conns: N sidecars open up to N × pool server connections, and
// the server's max_connections is 300), reached directly or through one
// PgBouncer in transaction mode (internal/harness/pgbouncer, -bouncer-conns server
// connections). Their clients are one load process of its own (fleetbench
// re-run as `fleetbench load`, never a sidecar's process): -conns keep-alive
// connections per sidecar, each claiming a new task per request; -streams
// keepalive streams (short ttl, so that renewals happen) and -watchers watch
// streams spread over the sidecars, held for the whole point. The load
// process keeps every claim's latency, so p50 and p99 are the whole fleet's.
//
// Notification modes, each on the same fleet shape:
//
//   - none: no watchers, and the history NOTIFY trigger and its function
//     dropped if present: what the fleet does when nobody watches;
//   - floor: the watchers, on a store with no notification at all: no
//     trigger, and the sidecars never asked for changes (serve
//     --watch-poll 0), so that their watches read once a second: the
//     floor the watch's notification must not lower (the target is watch
//     ≥ 0.95 × floor), which pays for delivering every event to the
//     watchers as the other modes with watchers do;
//   - watch: the tree's code as migrated (no trigger since migration 0007:
//     the watch polls), with the watchers connected;
//   - trigger: the watchers, and the trigger (re)created exactly as
//     migration 0004 defines it (read from -trigger-sql): the reference
//     "before", what every write paid for notification until 0007.
//
// Baseline: the raw lone claim statement (benchproc.RawMain) on a migrated
// database without the trigger, at -raw connections.
//
// Each point reports new grants/s, renewals/s, claim latency, PostgreSQL's
// CPU per grant (its postmaster's process tree), the most server connections
// to the database seen in pg_stat_activity (sampled every 100 ms), and each
// sidecar's RSS and CPU idle (streams and watchers held, no claims, for
// -idle) and under load (median and max over the sidecars). A point fails,
// and is never averaged in, when a claim fails, a stream or watcher fails
// or ends early, the store does not hold exactly the grants the clients
// counted (the clients stop cleanly: a claim started is answered), or a
// watcher did not receive exactly the store's acquired events of the
// point's tasks, in id order, once.
//
// Usage (make bench-fleet builds the binaries and starts PostgreSQL):
//
//	fleetbench -leasehold bin/leasehold -fleet "4 16 32 64" -duration 10s -runs 1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/bench/benchproc"
)

const tool = "fleetbench"

// Routes and modes, in the order a run measures them.
var (
	allRoutes = []string{"direct", "pgbouncer"}
	allModes  = []string{"none", "floor", "watch", "trigger"}
)

type config struct {
	leasehold    string
	fleet        []int // sidecars per point
	routes       []string
	modes        []string
	conns        int // claim connections per sidecar
	pool         int // each sidecar's pool_max_conns
	bouncerConns int // PgBouncer's server connections
	watchers     int
	streams      int
	streamTTL    time.Duration
	duration     time.Duration
	idle         time.Duration
	drain        time.Duration
	runs         int
	raw          []int
	triggerFile  string
	out          string
	pgURL        string
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "raw":
			os.Exit(benchproc.RawMain(os.Args[2:], os.Stdout))
		case "load":
			os.Exit(loadMain(os.Args[2:]))
		}
	}
	var cfg config
	var fleet, routes, modes, raw string
	flag.StringVar(&cfg.leasehold, "leasehold", "bin/leasehold", "the leasehold binary")
	flag.StringVar(&fleet, "fleet", "4 16 32 64", "sidecars per point, space or comma separated")
	flag.StringVar(&routes, "routes", "direct pgbouncer", "how the sidecars reach PostgreSQL: direct, pgbouncer (transaction mode)")
	flag.StringVar(&modes, "modes", "none floor watch trigger", "notification modes: none (no trigger, no watchers), floor (watchers, no notification at all: serve --watch-poll 0), watch (the tree's code, with watchers), trigger (migration 0004's trigger, with watchers)")
	flag.IntVar(&cfg.conns, "conns", 2, "claim connections per sidecar")
	flag.IntVar(&cfg.pool, "pool", 2, "each sidecar's pool_max_conns")
	flag.IntVar(&cfg.bouncerConns, "bouncer-conns", 16, "PgBouncer's server connections to the database")
	flag.IntVar(&cfg.watchers, "watchers", 4, "watch streams per point (modes floor, watch and trigger), spread over the sidecars")
	flag.IntVar(&cfg.streams, "streams", 64, "keepalive streams per point, spread over the sidecars")
	flag.DurationVar(&cfg.streamTTL, "stream-ttl", 3*time.Second, "the keepalive streams' ttl")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "claims per point")
	flag.DurationVar(&cfg.idle, "idle", 3*time.Second, "the idle window before the claims, for the sidecars' idle CPU")
	flag.DurationVar(&cfg.drain, "drain", 30*time.Second, "how long watchers may take to catch up after the claims")
	flag.IntVar(&cfg.runs, "runs", 1, "interleaved runs; the tables give medians")
	flag.StringVar(&raw, "raw", "8 32", "connections of the raw lone-claim baseline, space or comma separated; empty: none")
	flag.StringVar(&cfg.triggerFile, "trigger-sql", "leasecore/postgres/migrations/0004_watch.sql", "the migration that defines the history NOTIFY trigger")
	flag.StringVar(&cfg.out, "out", "bench-fleet.txt", "file that gets a copy of the report")
	flag.Parse()
	err := func() error {
		var err error
		if cfg.fleet, err = parseCounts("-fleet", fleet, false); err != nil {
			return err
		}
		if cfg.raw, err = parseCounts("-raw", raw, true); err != nil {
			return err
		}
		if cfg.routes, err = parseWords("-routes", routes, allRoutes); err != nil {
			return err
		}
		if cfg.modes, err = parseWords("-modes", modes, allModes); err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"-conns", cfg.conns}, {"-pool", cfg.pool}, {"-bouncer-conns", cfg.bouncerConns}, {"-runs", cfg.runs}} {
			if f.v < 1 {
				return fmt.Errorf("%s must be at least 1, not %d", f.name, f.v)
			}
		}
		if cfg.watchers < 0 || cfg.streams < 0 {
			return errors.New("-watchers and -streams must not be negative")
		}
		if cfg.duration <= 0 || cfg.idle <= 0 || cfg.streamTTL <= 0 {
			return errors.New("-duration, -idle and -stream-ttl must be positive")
		}
		if cfg.pgURL = os.Getenv("LEASEHOLD_TEST_POSTGRES_URL"); cfg.pgURL == "" {
			return errors.New("LEASEHOLD_TEST_POSTGRES_URL is not set (run under scripts/with-postgres.sh)")
		}
		return nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
}

// parseCounts reads a list of positive whole numbers separated by spaces or
// commas; an empty list only when empty is allowed.
func parseCounts(name, s string, empty bool) ([]int, error) {
	var out []int
	for f := range strings.FieldsFuncSeq(s, isSeparator) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive whole number", name, f)
		}
		out = append(out, n)
	}
	if len(out) == 0 && !empty {
		return nil, fmt.Errorf("%s: give at least one number", name)
	}
	return out, nil
}

// parseWords reads a list of words from allowed, separated by spaces or
// commas, each at most once; they keep allowed's order.
func parseWords(name, s string, allowed []string) ([]string, error) {
	seen := map[string]bool{}
	for f := range strings.FieldsFuncSeq(s, isSeparator) {
		ok := false
		for _, a := range allowed {
			ok = ok || a == f
		}
		if !ok {
			return nil, fmt.Errorf("%s: %q is not one of %s", name, f, strings.Join(allowed, ", "))
		}
		if seen[f] {
			return nil, fmt.Errorf("%s: %q is given twice", name, f)
		}
		seen[f] = true
	}
	var out []string
	for _, a := range allowed {
		if seen[a] {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: give at least one of %s", name, strings.Join(allowed, ", "))
	}
	return out, nil
}

func isSeparator(r rune) bool { return r == ' ' || r == ',' }

// watcherSidecar is the sidecar (0…n-1) that watcher k of w is opened on:
// the watchers spread evenly over the fleet.
func watcherSidecar(k, n, w int) int { return k * n / w }
