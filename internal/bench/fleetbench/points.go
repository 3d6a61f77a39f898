package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/bench/benchproc"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/internal/harness/pgbouncer"
	"github.com/leasehold/leasehold/internal/harness/procstat"
)

// dropTriggerSQL removes the history NOTIFY trigger and its function
// (migration 0004's), when present.
const dropTriggerSQL = `DROP TRIGGER IF EXISTS leasehold_history_notify ON leasehold_history;
DROP FUNCTION IF EXISTS leasehold_history_notify()`

// point is one fleet (or raw baseline) measurement in one run.
type point struct {
	grants      int64
	seconds     float64
	p50US       float64
	p99US       float64
	renewals    int64
	pgCPU       time.Duration
	pgMeasured  bool
	sidecarsCPU time.Duration // all the sidecars', during the claims
	bouncerCPU  time.Duration
	bouncer     bool
	serverConns int
	// Per sidecar: RSS in MB and CPU in cores, idle and under load.
	idleRSS, idleCPU, loadRSS, loadCPU []float64
	check                              string
	failed                             string
}

func (p point) rate() float64 { return float64(p.grants) / p.seconds }

type bench struct {
	cfg        config
	self       string
	runID      string
	admin      *pgx.Conn
	postmaster int
	trigger    string // migration 0004's CREATE FUNCTION and CREATE TRIGGER
}

func run(ctx context.Context, cfg config) error {
	src, err := os.ReadFile(cfg.triggerFile)
	if err != nil {
		return fmt.Errorf("-trigger-sql: %w", err)
	}
	trigger, err := triggerSQL(string(src))
	if err != nil {
		return fmt.Errorf("-trigger-sql %s: %w", cfg.triggerFile, err)
	}
	if _, err := pgbouncer.Path(); err != nil && slices.Contains(cfg.routes, "pgbouncer") {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	admin, err := pgx.Connect(ctx, cfg.pgURL)
	if err != nil {
		return fmt.Errorf("connect to LEASEHOLD_TEST_POSTGRES_URL: %w", err)
	}
	defer admin.Close(context.Background())
	b := &bench{cfg: cfg, self: self, runID: randomID(), admin: admin, trigger: trigger}
	b.postmaster = benchproc.FindPostmaster(ctx, admin)

	var pgVersion, maxConns string
	_ = admin.QueryRow(ctx, `SHOW server_version`).Scan(&pgVersion)
	_ = admin.QueryRow(ctx, `SHOW max_connections`).Scan(&maxConns)
	header := fmt.Sprintf("bench-fleet: %s of claims per point after %s idle, %d interleaved run(s), medians; sidecars %v; %d claim connections and pool_max_conns=%d per sidecar; "+
		"PgBouncer (transaction mode) with %d server connections; %d watchers (floor, watch, trigger), %d keepalive streams (ttl %s); %d CPUs; PostgreSQL %s (max_connections %s); %s",
		cfg.duration, cfg.idle, cfg.runs, cfg.fleet, cfg.conns, cfg.pool, cfg.bouncerConns, cfg.watchers, cfg.streams, cfg.streamTTL,
		runtime.NumCPU(), pgVersion, maxConns, time.Now().UTC().Format(time.RFC3339))
	if b.postmaster == 0 {
		header += "\nPostgreSQL's processes are not on this host: its CPU is not measured"
	}
	var log strings.Builder
	logLine := func(line string) {
		fmt.Fprintln(os.Stderr, line)
		log.WriteString(line + "\n")
	}
	logLine(header)

	res := newResults(cfg)
	for r := 1; r <= cfg.runs; r++ {
		for _, c := range cfg.raw {
			prefix := fmt.Sprintf("fb%s-raw-c%d-r%d", b.runID, c, r)
			p, err := b.rawPoint(ctx, c, prefix)
			if err != nil && p.failed == "" {
				p.failed = err.Error()
			}
			res.addRaw(c, p)
			logLine(fmt.Sprintf("run %d raw %2d conns: %s", r, c, rawLine(p)))
		}
		for _, n := range cfg.fleet {
			for _, route := range cfg.routes {
				// The modes take turns going first from run to run.
				for i := range cfg.modes {
					mode := cfg.modes[(i+r-1)%len(cfg.modes)]
					prefix := fmt.Sprintf("fb%s-%s-%s-n%d-r%d", b.runID, route[:1], mode, n, r)
					p, err := b.fleetPoint(ctx, n, route, mode, prefix)
					if err != nil && p.failed == "" {
						p.failed = err.Error()
					}
					res.add(route, n, mode, p)
					logLine(fmt.Sprintf("run %d %s %2d sidecars %-7s: %s", r, route, n, mode, pointLine(p)))
				}
			}
		}
	}
	tables := res.tables()
	fmt.Print(tables)
	if cfg.out != "" {
		report := header + "\n\n" + tables + "\n" + strings.TrimPrefix(log.String(), header+"\n")
		if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench-fleet: report in %s\n", cfg.out)
	}
	if n := res.failures(); n > 0 {
		return fmt.Errorf("%d point(s) failed (see the lines above)", n)
	}
	return nil
}

func pointLine(p point) string {
	if p.failed != "" {
		return "FAILED: " + p.failed
	}
	line := fmt.Sprintf("%d grants in %.2fs = %.0f/s, p50 %.2f ms, p99 %.2f ms, %.0f renewals/s, sidecars CPU %.1f µs/grant",
		p.grants, p.seconds, p.rate(), p.p50US/1e3, p.p99US/1e3, float64(p.renewals)/p.seconds, perGrantUS(p.sidecarsCPU, p.grants))
	if p.pgMeasured {
		line += fmt.Sprintf(", PostgreSQL CPU %.1f µs/grant", perGrantUS(p.pgCPU, p.grants))
	}
	if p.bouncer {
		line += fmt.Sprintf(", PgBouncer CPU %.1f µs/grant", perGrantUS(p.bouncerCPU, p.grants))
	}
	line += fmt.Sprintf(", ≤ %d server connections; sidecar RSS idle %s MB, load %s MB; CPU idle %s%%, load %s%% of a core (median/max)",
		p.serverConns, medMax(p.idleRSS, 1), medMax(p.loadRSS, 1), medMax(p.idleCPU, 100), medMax(p.loadCPU, 100))
	return line + "; check: " + p.check
}

func rawLine(p point) string {
	if p.failed != "" {
		return "FAILED: " + p.failed
	}
	line := fmt.Sprintf("%d grants in %.2fs = %.0f/s", p.grants, p.seconds, p.rate())
	if p.pgMeasured {
		line += fmt.Sprintf(", PostgreSQL CPU %.1f µs/grant", perGrantUS(p.pgCPU, p.grants))
	}
	return line + "; check: " + p.check
}

func medMax(vs []float64, scale float64) string {
	if len(vs) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f/%.1f", benchproc.Median(vs)*scale, slices.Max(vs)*scale)
}

func perGrantUS(d time.Duration, grants int64) float64 {
	if grants == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(grants)
}

// triggerSQL is the history NOTIFY trigger's definition in migration 0004's
// source: from its CREATE FUNCTION to the end of its CREATE TRIGGER.
func triggerSQL(src string) (string, error) {
	const first, last = "CREATE FUNCTION leasehold_history_notify()", "EXECUTE FUNCTION leasehold_history_notify();"
	i := strings.Index(src, first)
	if i < 0 {
		return "", fmt.Errorf("no %q", first)
	}
	j := strings.Index(src[i:], last)
	if j < 0 {
		return "", fmt.Errorf("no %q after the function", last)
	}
	sql := src[i : i+j+len(last)]
	if !strings.Contains(sql, "CREATE TRIGGER leasehold_history_notify") {
		return "", errors.New("no CREATE TRIGGER leasehold_history_notify between the function and its EXECUTE")
	}
	return sql, nil
}

// withParam is the URL u with query parameter k set to v.
func withParam(u, k, v string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	q := parsed.Query()
	q.Set(k, v)
	parsed.RawQuery = q.Encode()
	return parsed.String(), nil
}

// prepare migrates the database at dbURL and sets its notification for
// mode: "none" and "floor" drop the trigger, "trigger" (re)creates
// migration 0004's, "watch" leaves the migrated schema as it is.
func (b *bench) prepare(ctx context.Context, dbURL, mode string) error {
	if out, err := exec.Command(b.cfg.leasehold, "migrate", "--store", dbURL).CombinedOutput(); err != nil {
		return fmt.Errorf("leasehold migrate: %w: %s", err, out)
	}
	var sql string
	switch mode {
	case "none", "floor":
		sql = dropTriggerSQL
	case "trigger":
		sql = dropTriggerSQL + ";\n" + b.trigger
	default:
		return nil
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// Several statements in one simple-protocol call.
	if _, err := conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("set notification mode %s: %w", mode, err)
	}
	return nil
}

// rawPoint: the raw lone claim statement, from fleetbench raw (a process
// of its own), on a new migrated database without the trigger.
func (b *bench) rawPoint(ctx context.Context, clients int, prefix string) (point, error) {
	var p point
	dbURL, drop, err := benchproc.NewDatabase(ctx, b.admin, b.cfg.pgURL, prefix)
	if err != nil {
		return p, err
	}
	defer drop()
	if err := b.prepare(ctx, dbURL, "none"); err != nil {
		return p, err
	}
	r, err := benchproc.RunRaw(tool, b.self, b.postmaster, dbURL, clients, b.cfg.duration, prefix)
	if err != nil {
		return p, err
	}
	p.grants, p.seconds = r.Load.Ops, r.Load.Seconds
	p.pgCPU, p.pgMeasured = r.PGCPU, r.PGMeasured
	p.check, p.failed = r.Check, r.Failed
	return p, nil
}

// fleetPoint: n sidecars on a new database, reached by route, with
// notification mode, driven by fleetbench load.
func (b *bench) fleetPoint(ctx context.Context, n int, route, mode, prefix string) (point, error) {
	var p point
	dbURL, drop, err := benchproc.NewDatabase(ctx, b.admin, b.cfg.pgURL, prefix)
	if err != nil {
		return p, err
	}
	defer drop()
	if err := b.prepare(ctx, dbURL, mode); err != nil {
		return p, err
	}
	storeURL := dbURL
	var bouncer *pgbouncer.Bouncer
	if route == "pgbouncer" {
		bouncer, err = pgbouncer.Start(dbURL, pgbouncer.Config{ServerConns: b.cfg.bouncerConns, MaxClients: n*b.cfg.pool + 100})
		if err != nil {
			return p, err
		}
		defer bouncer.Stop()
		storeURL = bouncer.URL
		p.bouncer = true
	}
	if storeURL, err = withParam(storeURL, "pool_max_conns", strconv.Itoa(b.cfg.pool)); err != nil {
		return p, err
	}
	watchers := b.cfg.watchers
	if mode == "none" {
		watchers = 0
	}
	var flags []string
	if mode == "floor" {
		flags = []string{"--watch-poll", "0"}
	}
	sidecars, err := startFleet(n, b.cfg.leasehold, storeURL, flags...)
	defer stopFleet(sidecars)
	if err != nil {
		return p, err
	}
	conns, err := sampleConns(ctx, b.cfg.pgURL, strings.TrimPrefix(mustPath(dbURL), "/"))
	if err != nil {
		return p, err
	}
	connsStopped := false
	defer func() {
		if !connsStopped {
			conns()
		}
	}()

	bases := make([]string, len(sidecars))
	for i, s := range sidecars {
		bases[i] = s.Base
	}
	cmd := exec.Command(b.self, "load", "-sidecars", strings.Join(bases, ","), "-conns", strconv.Itoa(b.cfg.conns),
		"-watchers", strconv.Itoa(watchers), "-streams", strconv.Itoa(b.cfg.streams), "-stream-ttl", b.cfg.streamTTL.String(),
		"-duration", b.cfg.duration.String(), "-drain", b.cfg.drain.String(), "-prefix", prefix, "-db", dbURL)
	stderr := &lockedbuf.Buffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return p, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return p, err
	}
	if err := cmd.Start(); err != nil {
		return p, err
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	defer func() {
		_ = stdin.Close()
		for range lines {
		}
		_ = cmd.Wait()
	}()
	// On a failure, stdin is closed: a load process waiting for its go
	// line then ends, with its result line.
	expect := func(want string, timeout time.Duration) error {
		err := expectLine(lines, want, timeout, cmd, stderr)
		if err != nil {
			_ = stdin.Close()
		}
		return err
	}
	if err := expect("ready", 5*time.Minute); err != nil {
		return p, lastResult(err, lines)
	}

	// Idle: streams and watchers held, no claims.
	i0, err := sampleFleet(sidecars)
	if err != nil {
		return p, err
	}
	time.Sleep(b.cfg.idle)
	i1, err := sampleFleet(sidecars)
	if err != nil {
		return p, err
	}
	p.idleRSS, p.idleCPU = i1.rss, i1.coresSince(i0)

	// Load.
	l0, err := sampleFleet(sidecars)
	if err != nil {
		return p, err
	}
	pg0, pgOK := benchproc.PostmasterCPU(b.postmaster)
	var bc0 time.Duration
	if bouncer != nil {
		bc0, _ = procstat.ProcessCPU(bouncer.PID())
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return p, err
	}
	if err := expect("stopped", b.cfg.duration+5*time.Minute); err != nil {
		return p, lastResult(err, lines)
	}
	l1, err := sampleFleet(sidecars)
	if err != nil {
		return p, err
	}
	pg1, pgOK1 := benchproc.PostmasterCPU(b.postmaster)
	if bouncer != nil {
		bc1, _ := procstat.ProcessCPU(bouncer.PID())
		p.bouncerCPU = bc1 - bc0
	}
	p.serverConns = conns()
	connsStopped = true
	p.loadRSS, p.loadCPU = l1.rss, l1.coresSince(l0)
	for i := range l1.cpu {
		p.sidecarsCPU += l1.cpu[i] - l0.cpu[i]
	}
	p.pgCPU, p.pgMeasured = pg1-pg0, pgOK && pgOK1

	var last string
	for line := range lines {
		last = line
	}
	werr := cmd.Wait()
	var lr loadResult
	if err := json.Unmarshal([]byte(last), &lr); err != nil {
		return p, fmt.Errorf("fleetbench load: no result (%v): %s", werr, stderr.String())
	}
	p.grants, p.seconds, p.p50US, p.p99US, p.renewals = lr.Grants, lr.Seconds, lr.P50US, lr.P99US, lr.Renewals
	p.check, p.failed = checkLoad(lr, watchers)
	return p, nil
}

// checkLoad is what a point's load result proves, and why the point fails
// when it does ("" when it does not).
func checkLoad(lr loadResult, watchers int) (check, failed string) {
	check = fmt.Sprintf("%d acquired history rows for %d grants counted", lr.StoreGrants, lr.Grants)
	if watchers > 0 {
		check += fmt.Sprintf("; acquired events per watcher %v", lr.WatchEvents)
	}
	switch {
	case lr.Error != "":
		failed = lr.Error
	case lr.Errors > 0:
		failed = fmt.Sprintf("%d claims failed, the first: %s", lr.Errors, lr.FirstError)
	case lr.StreamErrors > 0:
		failed = fmt.Sprintf("%d streams or watchers failed or ended early, the first: %s", lr.StreamErrors, lr.FirstStream)
	case lr.StoreGrants != lr.Grants:
		failed = "grants do not match: " + check
	case len(lr.WatchEvents) != watchers:
		failed = fmt.Sprintf("%d watchers reported, want %d", len(lr.WatchEvents), watchers)
	case lr.WatchCheck != "":
		failed = "the watch did not keep its promise: " + lr.WatchCheck
	}
	return check, failed
}

// lastResult adds the load process's result line, when it printed one, to
// err.
func lastResult(err error, lines <-chan string) error {
	var last string
	for line := range lines {
		last = line
	}
	var lr loadResult
	if json.Unmarshal([]byte(last), &lr) == nil && lr.Error != "" {
		return fmt.Errorf("%w: %s", err, lr.Error)
	}
	return err
}

func mustPath(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return parsed.Path
}

// startFleet starts n sidecars at once (a few at a time), each with flags. The sidecars started are returned even on error,
// for stopFleet.
func startFleet(n int, bin, storeURL string, flags ...string) ([]*benchproc.Sidecar, error) {
	out := make([]*benchproc.Sidecar, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = benchproc.StartSidecar(tool, bin, storeURL, flags...)
		})
	}
	wg.Wait()
	started := slices.DeleteFunc(out, func(s *benchproc.Sidecar) bool { return s == nil })
	return started, errors.Join(errs...)
}

func stopFleet(sidecars []*benchproc.Sidecar) {
	var wg sync.WaitGroup
	for _, s := range sidecars {
		wg.Go(s.Stop)
	}
	wg.Wait()
}

// fleetSample is every sidecar's CPU so far and RSS at one moment.
type fleetSample struct {
	at  time.Time
	cpu []time.Duration
	rss []float64 // MB
}

func sampleFleet(sidecars []*benchproc.Sidecar) (fleetSample, error) {
	s := fleetSample{at: time.Now(), cpu: make([]time.Duration, len(sidecars)), rss: make([]float64, len(sidecars))}
	for i, sc := range sidecars {
		cpu, rss, err := sc.Usage("VmRSS")
		if err != nil {
			return s, fmt.Errorf("sidecar %d: %w", i, err)
		}
		s.cpu[i], s.rss[i] = time.Duration(cpu*float64(time.Second)), rss
	}
	return s, nil
}

// coresSince is each sidecar's CPU since an earlier sample, in cores (CPU
// seconds per second).
func (s fleetSample) coresSince(earlier fleetSample) []float64 {
	secs := s.at.Sub(earlier.at).Seconds()
	out := make([]float64, len(s.cpu))
	for i := range s.cpu {
		out[i] = (s.cpu[i] - earlier.cpu[i]).Seconds() / secs
	}
	return out
}

// sampleConns counts the server's connections to database db every 100 ms
// from a connection of its own (to the server's own database), until the
// function it returns is called, which returns the most seen.
func sampleConns(ctx context.Context, server, db string) (func() int, error) {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, err
	}
	most := 0
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		for {
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, db).Scan(&n); err == nil {
				most = max(most, n)
			}
			select {
			case <-quit:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() int {
		close(quit)
		<-done
		return most
	}, nil
}

func randomID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// expectLine waits for the load process's next line, which must be want.
func expectLine(lines <-chan string, want string, timeout time.Duration, cmd *exec.Cmd, stderr *lockedbuf.Buffer) error {
	select {
	case line, ok := <-lines:
		if ok && line == want {
			return nil
		}
		if ok {
			return fmt.Errorf("fleetbench load said %q, want %q: %s", line, want, stderr.String())
		}
		return fmt.Errorf("fleetbench load ended before %q: %s", want, stderr.String())
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		return fmt.Errorf("fleetbench load did not say %q in %s", want, timeout)
	}
}
