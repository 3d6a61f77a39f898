// Command fleetsim simulates what a thousand pods, each with a leasehold
// sidecar holding its singleton job's lease over a keepalive stream, do to
// one PostgreSQL behind PgBouncer, with as many real `leasehold serve`
// processes as one machine carries (issue 17, "A thousand sidecars,
// simulated"); and it measures an idle sidecar with a few streams, the
// sizing figure for a pod.
//
// Phases, in order (make bench-fleet-sim runs them all under
// scripts/with-postgres.sh, whose server it restarts):
//
//  1. idle: one sidecar holding -idle-streams keepalive streams at the
//     default ttl (leasecore.DefaultTTL), directly on PostgreSQL and then
//     through PgBouncer: after -idle-warmup, its RSS (VmRSS at the end,
//     the highest seen, and the peak VmHWM) and CPU per second over
//     -idle-window.
//  2. steady: -sidecars processes on a new database through one PgBouncer
//     in transaction mode (-server-conns server connections), each store
//     URL with pool_max_conns=-pool. Two -baseline windows first: the
//     sidecars with no streams, then with the watchers, so that the
//     renewals are charged only the PostgreSQL CPU and WAL they add. Then
//     -streams pods, pod i on sidecar
//     i mod -sidecars, each holding one task over a keepalive stream at
//     the default ttl, opened evenly over one renewal period (as pods
//     started at different times would be); -watchers watch streams on the
//     first sidecars (polling through PgBouncer like everything else). Over -steady, after -warmup: renewals and renewal
//     statements a second (the sidecars' counters), transactions a second
//     (pg_stat_database.xact_commit), WAL bytes, PostgreSQL's CPU (the
//     postmaster's process tree), PgBouncer's CPU, and the connections:
//     clients at PgBouncer (/proc/net/tcp) and backends of the database
//     (pg_stat_activity).
//  3. restart: pg_ctl restart -m fast; how long until every sidecar is
//     ready again, and until every pod has had its lease confirmed after
//     the restart; the peak statements and transactions a second; losses
//     and re-opened streams.
//  4. outage: the server stopped for -outage (longer than the ttl, so
//     every lease expires and every stream ends lost), then started: how
//     long until all pods hold their tasks again, at what peak claim rate,
//     and that every re-grant has a higher fencing token.
//  5. drain: every pod hangs up (its sidecar releases); then each watcher
//     must have seen every grant any pod got (each token) and every final
//     release.
//
// The end: the store holds exactly one lease per task, the pod's, with the
// token the pod last got; no token went down; the watchers missed nothing.
// Any failed check makes the exit status 1.
//
// Usage:
//
//	scripts/with-postgres.sh go run ./internal/bench/fleetsim -leasehold bin/leasehold
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/bench/benchproc"
	"github.com/leasehold/leasehold/internal/harness/pgbouncer"
	"github.com/leasehold/leasehold/internal/harness/procstat"
	"github.com/leasehold/leasehold/leasecore"
)

const tool = "fleetsim"

type config struct {
	leasehold                   string
	sidecars, streams, watchers int
	pool, serverConns           int
	warmup, steady, outage      time.Duration
	baseline, loginRetry        time.Duration
	probeEvery, probeWindow     time.Duration
	restart                     bool
	idleStreams                 int
	idleWarmup, idleWindow      time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.leasehold, "leasehold", "bin/leasehold", "the leasehold binary to run")
	flag.IntVar(&c.sidecars, "sidecars", 20, "sidecar processes sharing the pods' streams")
	flag.IntVar(&c.streams, "streams", 1000, "pods, each holding one task over one keepalive stream")
	flag.IntVar(&c.watchers, "watchers", 10, "watch streams, one per sidecar on the first sidecars")
	flag.IntVar(&c.pool, "pool", 2, "each sidecar's pool_max_conns (connections to PgBouncer)")
	flag.IntVar(&c.serverConns, "server-conns", 20, "PgBouncer's server connections (default_pool_size and max_db_connections)")
	flag.DurationVar(&c.warmup, "warmup", 15*time.Second, "pause after every pod holds its lease, before the steady window")
	flag.DurationVar(&c.baseline, "baseline", 15*time.Second, "each baseline window: the sidecars with no streams, without and then with the watchers")
	flag.DurationVar(&c.steady, "steady", 60*time.Second, "the steady window; 0 skips the fleet phases")
	flag.DurationVar(&c.loginRetry, "login-retry", 0, "PgBouncer's server_login_retry (whole seconds); 0 keeps its default, 15 s")
	flag.DurationVar(&c.probeEvery, "probe-every", 5*time.Second, "after the steady window, each pod's readiness probe (GET /readyz) at this period, as examples/kubernetes's; 0 skips")
	flag.DurationVar(&c.probeWindow, "probe-window", 30*time.Second, "the window measuring the probes' cost on top of the renewals")
	flag.BoolVar(&c.restart, "restart", true, "restart PostgreSQL under the fleet (pg_ctl restart -m fast)")
	flag.DurationVar(&c.outage, "outage", 35*time.Second, "then stop PostgreSQL for this long (above the default ttl, so every lease expires); 0 skips")
	flag.IntVar(&c.idleStreams, "idle-streams", 10, "keepalive streams on the idle sidecar")
	flag.DurationVar(&c.idleWarmup, "idle-warmup", 15*time.Second, "pause after the idle sidecar's streams are held, before its window (covers a first renewal)")
	flag.DurationVar(&c.idleWindow, "idle-window", 60*time.Second, "the idle sidecar's measured window, each of direct and through PgBouncer; 0 skips")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fleetsim: "+format+"\n", args...)
}

func run(c config) error {
	serverURL := os.Getenv("LEASEHOLD_TEST_POSTGRES_URL")
	if serverURL == "" {
		return fmt.Errorf("needs LEASEHOLD_TEST_POSTGRES_URL (run through scripts/with-postgres.sh)")
	}
	if c.sidecars < 1 || c.streams < 1 || c.pool < 1 || c.serverConns < 1 || c.watchers < 0 {
		return fmt.Errorf("-sidecars, -streams, -pool and -server-conns must be at least 1, -watchers at least 0")
	}
	if err := benchproc.RaiseFileLimit(tool, 2*c.streams+4*c.sidecars, "streams"); err != nil {
		return err
	}
	ctx := context.Background()
	srv, err := openServer(ctx, serverURL)
	if err != nil {
		return err
	}
	defer srv.close()
	if srv.postmaster == 0 {
		logf("PostgreSQL's processes are not visible here: its CPU is not measured")
	}
	var version string
	_ = srv.conn.QueryRow(ctx, `SHOW server_version`).Scan(&version)
	fmt.Printf("# fleetsim: PostgreSQL %s, default ttl %s (renewed every %s), %d cores here\n",
		version, leasecore.DefaultTTL, renewEvery(leasecore.DefaultTTL), numCPU())

	failed := false
	if c.idleWindow > 0 {
		for _, through := range []bool{false, true} {
			if err := idle(c, through); err != nil {
				return err
			}
		}
	}
	if c.steady > 0 {
		ok, err := simulate(ctx, c, srv)
		if err != nil {
			return err
		}
		failed = !ok
	}
	if failed {
		return fmt.Errorf("a check failed (the lines starting with FAIL)")
	}
	return nil
}

// idle measures one sidecar holding c.idleStreams streams at the default
// ttl, directly on PostgreSQL or through PgBouncer.
func idle(c config, throughBouncer bool) error {
	dbURL, drop, err := benchproc.NewStore(tool, "postgres")
	if err != nil {
		return err
	}
	defer drop()
	storeURL, mode := dbURL, "direct"
	if throughBouncer {
		b, err := pgbouncer.Start(dbURL, pgbouncer.Config{ServerConns: 2})
		if err != nil {
			return err
		}
		defer b.Stop()
		// As docs/stores.md's fleet section advises for a sidecar behind PgBouncer.
		storeURL, mode = b.URL+"&pool_max_conns=2", "pgbouncer"
	}
	sc, err := benchproc.StartSidecar(tool, c.leasehold, storeURL)
	if err != nil {
		return err
	}
	defer sc.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &fleet{}
	pods := make([]*pod, c.idleStreams)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range pods {
		pods[i] = newPod(f, sc.Base, fmt.Sprintf("idle-%02d/job", i), fmt.Sprintf("idle-pod-%02d", i))
		wg.Go(func() { pods[i].run(ctx) })
	}
	if err := awaitAll(ctx, 60*time.Second, func() bool { return allHeld(pods, time.Time{}) }); err != nil {
		return fmt.Errorf("idle %s: the %d streams did not all acquire their leases: %w", mode, len(pods), err)
	}
	time.Sleep(c.idleWarmup)
	cpu0, _, err := sc.Usage("VmRSS")
	if err != nil {
		return err
	}
	renewed0 := f.renewed.Load()
	start := time.Now()
	maxRSS := 0.0
	for time.Since(start) < c.idleWindow {
		time.Sleep(min(time.Second, c.idleWindow-time.Since(start)))
		_, rss, err := sc.Usage("VmRSS")
		if err != nil {
			return err
		}
		maxRSS = max(maxRSS, rss)
	}
	cpu1, rss, err := sc.Usage("VmRSS")
	if err != nil {
		return err
	}
	_, hwm, err := sc.Usage("VmHWM")
	if err != nil {
		return err
	}
	elapsed := time.Since(start).Seconds()
	lost := f.lost.Load()
	fmt.Printf("BenchmarkIdleSidecar/store=%s/streams=%d\t1\t%d ns/op\t%.1f MB-rss\t%.1f MB-rss-max\t%.1f MB-hwm\t%.3f ms-cpu/s\t%.2f renewals/s\t%d lost\n",
		mode, len(pods), int64(elapsed*1e9), rss, maxRSS, hwm, (cpu1-cpu0)/elapsed*1000, float64(f.renewed.Load()-renewed0)/elapsed, lost)
	if lost > 0 {
		fmt.Printf("FAIL idle %s: %d streams lost their lease\n", mode, lost)
	}
	return nil
}

// pgRates is PostgreSQL's work a second over a window.
type pgRates struct{ xact, cores, wal float64 }

// pgWindow measures PostgreSQL's work on the database over d.
func pgWindow(ctx context.Context, srv *server, db string, d time.Duration) (pgRates, error) {
	p0, err := srv.sample(ctx, db)
	if err != nil {
		return pgRates{}, err
	}
	time.Sleep(d)
	p1, err := srv.sample(ctx, db)
	if err != nil {
		return pgRates{}, err
	}
	el := p1.at.Sub(p0.at).Seconds()
	return pgRates{xact: (p1.xactCommit - p0.xactCommit) / el, cores: (p1.cpu - p0.cpu).Seconds() / el, wal: (p1.walBytes - p0.walBytes) / el}, nil
}

// fleetSample is the sidecars' counters summed, and the clients' at one
// moment.
type fleetSample struct {
	at                   time.Time
	renewStmts, renewOps float64
	claimStmts, claimOps float64
	allStmts             float64
	historyReads         float64 // the watch's reads of the history
	expirySweeps         float64 // and its expiry sweeps
	cpuSeconds, rssMB    float64
	renewed, acquired    int64
}

func sampleSidecars(scs []*benchproc.Sidecar, f *fleet) (fleetSample, error) {
	out := fleetSample{at: time.Now(), renewed: f.renewed.Load(), acquired: f.acquired.Load()}
	for _, sc := range scs {
		text, err := sc.Metrics()
		if err != nil {
			return out, err
		}
		for _, m := range []struct {
			dst    *float64
			series string
		}{
			{&out.renewStmts, `leasehold_store_write_statements_total{operation="renew"}`},
			{&out.renewOps, `leasehold_store_write_operations_total{operation="renew"}`},
			{&out.claimStmts, `leasehold_store_write_statements_total{operation="claim"}`},
			{&out.claimOps, `leasehold_store_write_operations_total{operation="claim"}`},
		} {
			v, err := benchproc.Metric(text, m.series)
			if err != nil {
				return out, err
			}
			*m.dst += v
		}
		out.allStmts += sumSeries(text, "leasehold_store_write_statements_total{")
		out.historyReads += sumSeries(text, `leasehold_store_operation_duration_seconds_count{operation="read_history"}`)
		out.expirySweeps += sumSeries(text, `leasehold_store_operation_duration_seconds_count{operation="record_expiries"}`)
		cpu, rss, err := sc.Usage("VmRSS")
		if err != nil {
			return out, err
		}
		out.cpuSeconds += cpu
		out.rssMB += rss
	}
	return out, nil
}

// sumSeries adds up every series of /metrics text whose line starts with
// prefix (a metric's name and the opening brace of its labels).
func sumSeries(text, prefix string) float64 {
	sum := 0.0
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

func allHeld(pods []*pod, since time.Time) bool {
	return !slices.ContainsFunc(pods, func(p *pod) bool { return !p.heldSince(since) })
}

func countHeld(pods []*pod, since time.Time) int {
	n := 0
	for _, p := range pods {
		if p.heldSince(since) {
			n++
		}
	}
	return n
}

// bouncerClients counts the client connections PgBouncer has accepted.
func bouncerClients(port int) (int, error) {
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return 0, err
		}
		k, err := establishedTo(string(b), port)
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

// simulate runs the fleet phases; false when a check failed.
func simulate(ctx context.Context, c config, srv *server) (bool, error) {
	ok := true
	fail := func(format string, args ...any) {
		ok = false
		fmt.Printf("FAIL "+format+"\n", args...)
	}
	dbURL, drop, err := benchproc.NewStore(tool, "postgres")
	if err != nil {
		return false, err
	}
	defer drop()
	db := dbName(dbURL)
	bouncer, err := pgbouncer.Start(dbURL, pgbouncer.Config{ServerConns: c.serverConns, MaxClients: max(1000, c.sidecars*c.pool+100), LoginRetry: c.loginRetry})
	if err != nil {
		return false, err
	}
	defer bouncer.Stop()
	bouncerPort := portOf(bouncer.URL)
	storeURL := bouncer.URL + "&pool_max_conns=" + strconv.Itoa(c.pool)

	// The first sidecar migrates the new database; the rest find it done.
	scs := make([]*benchproc.Sidecar, c.sidecars)
	defer func() {
		for _, sc := range scs {
			if sc != nil {
				sc.Stop()
			}
		}
	}()
	start := func(i int) error {
		sc, err := benchproc.StartSidecar(tool, c.leasehold, storeURL)
		scs[i] = sc
		return err
	}
	if err := start(0); err != nil {
		return false, err
	}
	var startErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := 1; i < c.sidecars; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := start(i); err != nil {
				mu.Lock()
				startErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if startErr != nil {
		return false, startErr
	}
	retry := "15s (its default)"
	if c.loginRetry > 0 {
		retry = c.loginRetry.String()
	}
	fmt.Printf("# fleet: %d sidecars through one PgBouncer in transaction mode (pool_max_conns=%d each, %d server connections, server_login_retry %s), %d pods, %d watchers\n",
		c.sidecars, c.pool, c.serverConns, retry, c.streams, c.watchers)

	podCtx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var pwg, wwg sync.WaitGroup
	defer wwg.Wait()
	defer stopWatch()
	defer pwg.Wait()
	defer hangUp()

	// Baselines: what the sidecars cost PostgreSQL with no streams, without
	// and then with the watchers, so that the steady window's renewals are
	// charged only what they add.
	// Each sidecar prunes once as it starts; PostgreSQL's backends report
	// their transactions up to 10 s late when idle: let both pass first.
	time.Sleep(11 * time.Second)
	idleRates, err := pgWindow(ctx, srv, db, c.baseline)
	if err != nil {
		return false, err
	}
	watchers := make([]*watcher, c.watchers)
	for i := range watchers {
		watchers[i] = newWatcher(scs[i%c.sidecars].Base, "pod-")
		wwg.Go(func() { watchers[i].run(watchCtx) })
	}
	for _, w := range watchers {
		select {
		case <-w.ready:
		case <-time.After(60 * time.Second):
			return false, fmt.Errorf("a watcher on %s was not ready in 60s", w.base)
		}
	}

	watchRates, err := pgWindow(ctx, srv, db, c.baseline)
	if err != nil {
		return false, err
	}
	name := fmt.Sprintf("BenchmarkFleetSim/sidecars=%d/streams=%d/watchers=%d", c.sidecars, c.streams, c.watchers)
	fmt.Printf("%s/baseline\t1\t%d ns/op\t%.2f pg-xact/s\t%.4f pg-cores\t%.0f wal-B/s\t%.2f pg-xact/s-watched\t%.4f pg-cores-watched\n",
		name, int64(c.baseline), idleRates.xact, idleRates.cores, idleRates.wal, watchRates.xact, watchRates.cores)

	// Open the pods' streams evenly over one renewal period, so that their
	// renewals are spread as a fleet's pods, started at different times,
	// spread theirs.
	f := &fleet{}
	pods := make([]*pod, c.streams)
	ramp := renewEvery(leasecore.DefaultTTL)
	rampStart := time.Now()
	for i := range pods {
		pods[i] = newPod(f, scs[i%c.sidecars].Base, fmt.Sprintf("pod-%04d/job", i), fmt.Sprintf("pod-%04d#1#fleetsim", i))
		time.Sleep(time.Until(rampStart.Add(ramp * time.Duration(i) / time.Duration(len(pods)))))
		pwg.Go(func() { pods[i].run(podCtx) })
	}
	if err := awaitAll(ctx, 120*time.Second, func() bool { return allHeld(pods, time.Time{}) }); err != nil {
		return false, fmt.Errorf("%d of %d pods hold their leases 120s after the ramp: %w", countHeld(pods, time.Time{}), len(pods), err)
	}
	logf("%d pods hold their leases, %s after the ramp began", len(pods), time.Since(rampStart).Round(time.Millisecond))
	time.Sleep(c.warmup)

	// The steady window.
	s0, err := sampleSidecars(scs, f)
	if err != nil {
		return false, err
	}
	p0, err := srv.sample(ctx, db)
	if err != nil {
		return false, err
	}
	b0, _ := procstat.ProcessCPU(bouncer.PID())
	lost0 := f.lost.Load()
	maxClients, maxBackends := 0, 0
	for time.Since(s0.at) < c.steady {
		time.Sleep(min(time.Second, c.steady-time.Since(s0.at)))
		p, err := srv.sample(ctx, db)
		if err != nil {
			return false, err
		}
		maxBackends = max(maxBackends, p.backends)
		n, err := bouncerClients(bouncerPort)
		if err != nil {
			return false, err
		}
		maxClients = max(maxClients, n)
	}
	s1, err := sampleSidecars(scs, f)
	if err != nil {
		return false, err
	}
	p1, err := srv.sample(ctx, db)
	if err != nil {
		return false, err
	}
	b1, _ := procstat.ProcessCPU(bouncer.PID())
	el := s1.at.Sub(s0.at).Seconds()
	renewals := float64(s1.renewed-s0.renewed) / el
	renewOps := (s1.renewOps - s0.renewOps) / el
	renewStmts := (s1.renewStmts - s0.renewStmts) / el
	xacts := (p1.xactCommit - p0.xactCommit) / el
	pgCPU := (p1.cpu - p0.cpu).Seconds() / el
	wal := (p1.walBytes - p0.walBytes) / el
	// What the renewals add to the baseline with watchers, per renewal
	// statement: PostgreSQL's CPU and WAL.
	perStmt := time.Duration(max(0, safeDiv(pgCPU-watchRates.cores, renewStmts)) * 1e9)
	walPerStmt := max(0, safeDiv(wal-watchRates.wal, renewStmts))
	fmt.Printf("%s/steady\t1\t%d ns/op\t%.1f renewals/s\t%.2f renew-stmts/s\t%.1f leases/stmt\t%.1f pg-xact/s\t%.4f pg-cores\t%.0f pg-us/renew-stmt\t%.0f wal-B/renew-stmt\t%.0f wal-B/s\t%.4f bouncer-cores\t%.4f sidecar-cores/sidecar\t%.1f MB-rss/sidecar\t%.1f history-reads/s\t%.1f expiry-sweeps/s\t%d lost\n",
		name, int64(el*1e9), renewals, renewStmts, safeDiv(renewOps, renewStmts), xacts, pgCPU,
		float64(perStmt.Microseconds()), walPerStmt, wal, (b1-b0).Seconds()/el,
		(s1.cpuSeconds-s0.cpuSeconds)/el/float64(c.sidecars), s1.rssMB/float64(c.sidecars),
		(s1.historyReads-s0.historyReads)/el, (s1.expirySweeps-s0.expirySweeps)/el, f.lost.Load()-lost0)
	fmt.Printf("%s/connections\t1\t%d ns/op\t%d bouncer-clients\t%d bouncer-clients-bound\t%d pg-backends-max\t%d pg-backends-bound\n",
		name, int64(el*1e9), maxClients, c.sidecars*c.pool, maxBackends, c.serverConns)
	if want := float64(c.streams) / renewEvery(leasecore.DefaultTTL).Seconds(); renewals < 0.9*want {
		fail("steady: %.1f renewals/s, want about %.1f (%d streams every %s)", renewals, want, c.streams, renewEvery(leasecore.DefaultTTL))
	}
	if maxBackends > c.serverConns {
		fail("steady: %d client backends on the database, above PgBouncer's %d (the watch included: it polls through PgBouncer)", maxBackends, c.serverConns)
	}
	if n := f.lost.Load() - lost0; n > 0 {
		fail("steady: %d streams lost their lease", n)
	}
	capa := capacity{ttl: leasecore.DefaultTTL, cpuPerStmt: perStmt, walPerStmt: walPerStmt, pool: c.pool}
	fmt.Printf("# 1,000 real pods (one stream each, so one renewal per statement): %.1f renewal statements/s and commits/s, %d client connections at PgBouncer (pool_max_conns=%d), server connections at most PgBouncer's pool (%d here); at %s PostgreSQL CPU per statement (measured: the steady window's CPU above the baseline with watchers, over the renewal statements, batches of %.1f): %.3f cores, %.0f kB/s of WAL\n",
		capa.renewalsPerSecond(1000), capa.clientConns(1000), c.pool, c.serverConns, perStmt, safeDiv(renewOps, renewStmts), capa.cores(1000), capa.walPerSecond(1000)/1e3)
	for _, cores := range []float64{1, 2, 4, 8} {
		fmt.Printf("# a PostgreSQL of %g cores at half its CPU for renewals: %d pods\n", cores, capa.podsFor(cores, 0.5))
	}

	// The readiness probes, on top of the renewals: what each costs
	// PostgreSQL. They go on through the restarts, as a kubelet's would.
	var probes, probesFailed atomic.Int64
	cpuPerProbe := time.Duration(0)
	if c.probeEvery > 0 {
		for _, p := range pods {
			pwg.Go(func() { p.probe(podCtx, c.probeEvery, &probes, &probesFailed) })
		}
		time.Sleep(c.probeEvery)
		n0 := probes.Load()
		r, err := pgWindow(ctx, srv, db, c.probeWindow)
		if err != nil {
			return false, err
		}
		perSecond := float64(probes.Load()-n0) / c.probeWindow.Seconds()
		cpuPerProbe = time.Duration(max(0, safeDiv(r.cores-pgCPU, perSecond)) * 1e9)
		fmt.Printf("%s/probes\t1\t%d ns/op\t%.1f probes/s\t%.1f pg-xact/s\t%.4f pg-cores\t%.0f pg-us/probe\t%d failed\n",
			name, int64(c.probeWindow), perSecond, r.xact, r.cores, float64(cpuPerProbe.Microseconds()), probesFailed.Load())
		if probesFailed.Load() > 0 {
			fail("probes: %d readiness probes failed with PostgreSQL up", probesFailed.Load())
		}
		perPod := float64(time.Second) / float64(c.probeEvery)
		fmt.Printf("# 1,000 real pods probed every %s: %.0f probes/s, each 2 statements (and transactions) at PostgreSQL: %.0f/s, %.3f cores\n",
			c.probeEvery, 1000*perPod, 2000*perPod, 1000*perPod*cpuPerProbe.Seconds())
	}

	if c.restart {
		if !restartPhase(ctx, c, srv, db, scs, bouncer, pods, f, name, 0, fail) {
			ok = false
		}
	}
	if c.outage > 0 {
		if !restartPhase(ctx, c, srv, db, scs, bouncer, pods, f, name, c.outage, fail) {
			ok = false
		}
	}

	// The store holds one live lease per task: the pod's, with its token.
	if err := checkStore(ctx, dbURL, pods, fail); err != nil {
		return false, err
	}
	if n := f.tokenWentBy.Load(); n > 0 {
		fail("%d grants came with a token below one the pod had before", n)
	}

	// Drain: the pods hang up, their sidecars release; every watcher must
	// have seen every grant and every final release.
	hangUp()
	pwg.Wait()
	var missG, missR int
	err = awaitAll(ctx, 30*time.Second, func() bool {
		missG, missR = 0, 0
		for _, w := range watchers {
			g, r := w.missing(pods, true)
			missG, missR = missG+g, missR+r
		}
		return missG == 0 && missR == 0
	})
	events, reconnects, resets, disorder := 0, 0, 0, 0
	for _, w := range watchers {
		w.mu.Lock()
		events, reconnects, resets, disorder = events+w.events, reconnects+w.reconnects, resets+w.resets, disorder+w.outOfOrder
		w.mu.Unlock()
	}
	stopWatch()
	fmt.Printf("# watch: %d watchers received %d events (%d a watcher), %d reconnects, %d resets; missing: %d grants, %d releases; ids out of order: %d\n",
		len(watchers), events, safeIntDiv(events, len(watchers)), reconnects, resets, missG, missR, disorder)
	if err != nil {
		fail("watch: after 30 s the watchers still miss %d grants and %d releases", missG, missR)
	}
	if disorder > 0 {
		fail("watch: %d events arrived with an id not above the one before", disorder)
	}
	return ok, nil
}

// restartPhase restarts PostgreSQL under the fleet (after an outage when
// outage > 0) and measures the recovery.
func restartPhase(ctx context.Context, c config, srv *server, db string, scs []*benchproc.Sidecar, bouncer *pgbouncer.Bouncer, pods []*pod, f *fleet, name string, outage time.Duration, fail func(string, ...any)) bool {
	ok := true
	phase := "restart"
	if outage > 0 {
		phase = fmt.Sprintf("outage-%s", outage)
	}
	acquired0, lost0, reopens0, openFailed0 := f.acquired.Load(), f.lost.Load(), f.reopens.Load(), f.openFailed.Load()
	tokens0 := map[*pod]int64{}
	for _, p := range pods {
		tokens0[p], _ = p.lastToken()
	}

	// Sample the sidecars' statement counters every second from before the
	// restart until every pod is confirmed again.
	var stmts, claims series
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if s, err := sampleSidecars(scs, f); err == nil {
				stmts.add(s.at, s.allStmts)
				claims.add(s.at, s.claimOps)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()

	begin := time.Now()
	logf("%s: restarting PostgreSQL", phase)
	if err := srv.restart(ctx, outage); err != nil {
		close(stop)
		<-sampled
		fail("%s: %v", phase, err)
		return false
	}
	up := time.Now()
	xact0, _ := srv.sample(ctx, db)
	ready := time.Duration(0)
	if err := awaitAll(ctx, 60*time.Second, func() bool { return allReady(scs) }); err != nil {
		fail("%s: not every sidecar was ready 60 s after PostgreSQL came back", phase)
		diagnoseNotReady(scs, bouncer)
		ok = false
	} else {
		ready = time.Since(begin)
	}
	var held time.Duration
	err := awaitAll(ctx, 120*time.Second, func() bool { return allHeld(pods, up) })
	if err == nil {
		held = time.Since(begin)
	}
	xact1, _ := srv.sample(ctx, db)
	close(stop)
	<-sampled
	if err != nil {
		fail("%s: %d of %d pods had their lease confirmed 120 s after PostgreSQL came back", phase, countHeld(pods, up), len(pods))
		ok = false
	}
	raised, same := 0, 0
	for _, p := range pods {
		tok, _ := p.lastToken()
		switch {
		case tok > tokens0[p]:
			raised++
		case tok == tokens0[p]:
			same++
		}
	}
	el := xact1.at.Sub(up).Seconds()
	fmt.Printf("%s/%s\t1\t%d ns/op\t%.1f s-down\t%.1f s-to-ready\t%.1f s-to-all-held\t%.0f peak-stmts/s\t%.0f peak-claims/s\t%.1f pg-xact/s-after\t%d lost\t%d reopened\t%d refused-opens\t%d new-grants\t%d tokens-raised\t%d tokens-kept\n",
		name, phase, int64(time.Since(begin)), up.Sub(begin).Seconds(), ready.Seconds(), held.Seconds(),
		stmts.peakRate(time.Second), claims.peakRate(time.Second), safeDiv(xact1.xactCommit-xact0.xactCommit, el),
		f.lost.Load()-lost0, f.reopens.Load()-reopens0, f.openFailed.Load()-openFailed0, f.acquired.Load()-acquired0, raised, same)
	if outage > leasecore.DefaultTTL && raised != len(pods) {
		fail("%s: %d of %d pods got a higher token after an outage longer than the ttl, want all", phase, raised, len(pods))
		ok = false
	}
	return ok
}

func allReady(scs []*benchproc.Sidecar) bool {
	for _, sc := range scs {
		resp, err := streamClient.Get(sc.Base + "/readyz")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return false
		}
	}
	return true
}

// diagnoseNotReady prints what each sidecar that is not ready answers, the
// end of PgBouncer's log, and the stacks of the first such sidecar (which
// ends it).
func diagnoseNotReady(scs []*benchproc.Sidecar, bouncer *pgbouncer.Bouncer) {
	var stuck *benchproc.Sidecar
	for i, sc := range scs {
		resp, err := streamClient.Get(sc.Base + "/readyz")
		if err != nil {
			logf("sidecar %d: %v", i, err)
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		if resp.StatusCode != 200 {
			logf("sidecar %d: %s %s", i, resp.Status, b)
			if stuck == nil {
				stuck = sc
			}
		}
	}
	lines := strings.Split(strings.TrimSpace(bouncer.Logs()), "\n")
	logf("PgBouncer's log, last %d lines:\n%s", min(60, len(lines)), strings.Join(lines[max(0, len(lines)-60):], "\n"))
	if stuck != nil {
		if name, err := stuck.Dump(); err != nil {
			logf("dump: %v", err)
		} else {
			logf("stacks of a sidecar that is not ready: %s", name)
		}
	}
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func safeIntDiv(a, b int) int {
	if b == 0 {
		return 0
	}
	return a / b
}
