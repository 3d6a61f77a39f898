package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", to count a SQLite store's grants

	"github.com/leasehold/leasehold/internal/bench/benchproc"
	"github.com/leasehold/leasehold/internal/harness/procstat"
)

type config struct {
	leasehold, etcd, etcdload, wrk string
	before                         string // another leasehold binary measured beside it, or ""
	duration                       time.Duration
	runs, wrkThreads               int
	clients                        []int
	out                            string
	pgURL                          string
}

// point is one system at one client count in one run.
type point struct {
	ops        int64         // successful ops (new grants)
	seconds    float64       // the load's wall time
	serverCPU  time.Duration // the server process's (sidecar, etcd, hello); 0 for raw pgx
	pgCPU      time.Duration // PostgreSQL's, when measured (pgMeasured)
	pgMeasured bool
	p50US      float64 // claim latency percentiles seen by the client, µs;
	p99US      float64 // 0 when not measured (etcd)
	check      string  // what was checked against the store
	failed     string  // why the point does not count; empty when it does
}

func (p point) rate() float64 { return float64(p.ops) / p.seconds }

// bench holds what every point shares.
type bench struct {
	cfg        config
	self       string // this executable, re-run as `raw` and `hello`
	tmp        string
	runID      string
	admin      *pgx.Conn
	postmaster int // 0 when PostgreSQL's processes are not visible here
}

type system struct {
	key, label string
	measure    func(b *bench, clients int, prefix string) (point, error)
}

var systems = []system{
	{"raw", "raw pgx conditional upsert", (*bench).rawPoint},
	{"pg", "`leasehold serve`, PostgreSQL", func(b *bench, c int, p string) (point, error) {
		return b.sidecarPoint("postgres", b.cfg.leasehold, c, p)
	}},
	{"sqlite", "`leasehold serve`, SQLite (FULL)", func(b *bench, c int, p string) (point, error) {
		return b.sidecarPoint("sqlite", b.cfg.leasehold, c, p)
	}},
	{"etcd", "etcd 3.7.3 grant + put", (*bench).etcdPoint},
	{"floor", "Go net/http hello (the HTTP floor)", (*bench).floorPoint},
}

// beforeSystems are the sidecar rows of -before: another build of
// leasehold, measured in the same runs, interleaved with the others.
var beforeSystems = []system{
	{"pg-before", "`leasehold serve` (-before), PostgreSQL", func(b *bench, c int, p string) (point, error) {
		return b.sidecarPoint("postgres", b.cfg.before, c, p)
	}},
	{"sqlite-before", "`leasehold serve` (-before), SQLite (FULL)", func(b *bench, c int, p string) (point, error) {
		return b.sidecarPoint("sqlite", b.cfg.before, c, p)
	}},
}

// systemsOf are the systems a run measures.
func systemsOf(cfg config) []system {
	if cfg.before == "" {
		return systems
	}
	return append(append([]system(nil), systems...), beforeSystems...)
}

func run(cfg config) error {
	ctx := context.Background()
	if _, err := exec.LookPath(cfg.wrk); err != nil {
		return fmt.Errorf("wrk not found (%w): install the Debian package wrk (apt-get install -y wrk)", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "httpbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	admin, err := pgx.Connect(ctx, cfg.pgURL)
	if err != nil {
		return fmt.Errorf("connect to LEASEHOLD_TEST_POSTGRES_URL: %w", err)
	}
	defer admin.Close(ctx)
	b := &bench{cfg: cfg, self: self, tmp: tmp, runID: randomID(), admin: admin}
	b.postmaster = benchproc.FindPostmaster(ctx, admin)

	var pgVersion string
	_ = admin.QueryRow(ctx, `SHOW server_version`).Scan(&pgVersion)
	header := fmt.Sprintf("bench-http: %s per point, %d interleaved run(s), medians; clients %v; wrk threads ≤ %d; %d CPUs; PostgreSQL %s; %s",
		cfg.duration, cfg.runs, cfg.clients, cfg.wrkThreads, numCPU(), pgVersion, time.Now().UTC().Format(time.RFC3339))
	if b.postmaster == 0 {
		header += "\nPostgreSQL's processes are not on this host: its CPU is not measured"
	}
	var log strings.Builder
	logLine := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		fmt.Fprintln(os.Stderr, line)
		log.WriteString(line + "\n")
	}
	logLine("%s", header)

	res := newResults(cfg.clients, systemsOf(cfg))
	for r := 1; r <= cfg.runs; r++ {
		for _, c := range cfg.clients {
			for _, s := range res.systems {
				prefix := fmt.Sprintf("hb%s-%s-c%d-r%d", b.runID, s.key, c, r)
				p, err := s.measure(b, c, prefix)
				if err != nil && p.failed == "" {
					p.failed = err.Error()
				}
				res.add(s.key, c, p)
				logLine("%s", pointLine(r, s.key, c, p))
			}
		}
	}
	report := header + "\n\n" + res.table() + "\n" + log.String()[len(header)+1:]
	fmt.Print(res.table())
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench-http: report in %s\n", cfg.out)
	}
	if n := res.failures(); n > 0 {
		return fmt.Errorf("%d point(s) failed (see the lines above)", n)
	}
	return nil
}

func pointLine(run int, key string, clients int, p point) string {
	line := fmt.Sprintf("run %d %-6s %2d clients: ", run, key, clients)
	if p.failed != "" {
		return line + "FAILED: " + p.failed
	}
	line += fmt.Sprintf("%d ops in %.2fs = %.0f ops/s", p.ops, p.seconds, p.rate())
	if p.serverCPU > 0 {
		line += fmt.Sprintf(", server CPU %.1f µs/op", perOpUS(p.serverCPU, p.ops))
	}
	if p.pgMeasured {
		line += fmt.Sprintf(", PostgreSQL CPU %.1f µs/op", perOpUS(p.pgCPU, p.ops))
	}
	if p.check != "" {
		line += "; check: " + p.check
	}
	return line
}

func perOpUS(d time.Duration, ops int64) float64 {
	if ops == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(ops)
}

// rawPoint: httpbench raw, a process of its own, on a new database.
func (b *bench) rawPoint(clients int, prefix string) (point, error) {
	var p point
	dbURL, drop, err := benchproc.NewDatabase(context.Background(), b.admin, b.cfg.pgURL, prefix)
	if err != nil {
		return p, err
	}
	defer drop()
	if out, err := exec.Command(b.cfg.leasehold, "migrate", "--store", dbURL).CombinedOutput(); err != nil {
		return p, fmt.Errorf("leasehold migrate: %w: %s", err, out)
	}
	r, err := benchproc.RunRaw("httpbench", b.self, b.postmaster, dbURL, clients, b.cfg.duration, prefix)
	if err != nil {
		return p, err
	}
	p.ops, p.seconds, p.p50US, p.p99US = r.Load.Ops, r.Load.Seconds, r.Load.P50US, r.Load.P99US
	p.pgCPU, p.pgMeasured = r.PGCPU, r.PGMeasured
	p.check, p.failed = r.Check, r.Failed
	return p, nil
}

// sidecarPoint: `leasehold serve` on a new store, driven by wrk.
func (b *bench) sidecarPoint(kind, bin string, clients int, prefix string) (point, error) {
	var p point
	var store string
	var count func() (int64, error)
	switch kind {
	case "postgres":
		dbURL, drop, err := benchproc.NewDatabase(context.Background(), b.admin, b.cfg.pgURL, prefix)
		if err != nil {
			return p, err
		}
		defer drop()
		store = dbURL
		count = func() (int64, error) { return benchproc.CountPostgres(dbURL, prefix) }
	case "sqlite":
		path := filepath.Join(b.tmp, prefix+".db")
		defer removeSQLite(path)
		store = "sqlite:" + path
		count = func() (int64, error) { return countSQLite(path, prefix) }
	}
	srv, err := b.start("sidecar-"+prefix, bin, "serve", "--listen", "127.0.0.1:0", "--store", store)
	if err != nil {
		return p, err
	}
	defer srv.stop()
	if err := srv.waitOK("/readyz"); err != nil {
		return p, err
	}
	p, err = b.wrkPoint(srv, clients, prefix, kind == "postgres")
	if err != nil {
		return p, err
	}
	// Claims in flight when wrk stopped may still commit: stop the sidecar
	// (it finishes them) before counting.
	if err := srv.stop(); err != nil {
		return p, err
	}
	rows, err := count()
	if err != nil {
		return p, fmt.Errorf("count acquired events: %w", err)
	}
	p.check = fmt.Sprintf("%d acquired history rows for %d successful claims", rows, p.ops)
	if p.failed == "" && (rows < p.ops || rows > p.ops+int64(clients)) {
		// Up to one claim per connection may be in flight when wrk stops:
		// committed, but not answered in time to be counted.
		p.failed = "grants do not match: " + p.check + fmt.Sprintf(" (at most %d more may have been in flight)", clients)
	}
	return p, nil
}

// floorPoint: httpbench hello, a process of its own, driven by wrk.
func (b *bench) floorPoint(clients int, prefix string) (point, error) {
	srv, err := b.start("hello-"+prefix, b.self, "hello")
	if err != nil {
		return point{}, err
	}
	defer srv.stop()
	if err := srv.waitOK("/"); err != nil {
		return point{}, err
	}
	return b.wrkPoint(srv, clients, prefix, false)
}

// wrkPoint runs wrk against srv and measures srv's CPU (and PostgreSQL's).
func (b *bench) wrkPoint(srv *server, clients int, prefix string, withPG bool) (point, error) {
	var p point
	cpu0, err := procstat.ProcessCPU(srv.pid())
	if err != nil {
		return p, err
	}
	pg0, pgOK := benchproc.PostmasterCPU(b.postmaster)
	wr, err := runWrk(b.cfg, b.tmp, srv.base, clients, prefix)
	if err != nil {
		return p, err
	}
	cpu1, err := procstat.ProcessCPU(srv.pid())
	if err != nil {
		return p, err
	}
	pg1, pgOK1 := benchproc.PostmasterCPU(b.postmaster)
	p.ops = wr.Requests - wr.Status
	p.seconds = secondsOf(wr.DurationUS)
	p.p50US, p.p99US = float64(wr.P50US), float64(wr.P99US)
	p.serverCPU = cpu1 - cpu0
	if withPG {
		p.pgCPU, p.pgMeasured = pg1-pg0, pgOK && pgOK1
	}
	if n := wr.errorCount(); n > 0 {
		p.failed = fmt.Sprintf("wrk: %d of %d answers above 399, socket errors: connect %d, read %d, write %d, timeout %d",
			wr.Status, wr.Requests, wr.Connect, wr.Read, wr.Write, wr.Timeout)
	}
	return p, nil
}

// etcdPoint: a new etcd server, loaded by etcdload.
func (b *bench) etcdPoint(clients int, prefix string) (point, error) {
	var p point
	var srv *server
	var endpoint string
	var err error
	for attempt := 0; attempt < 3; attempt++ { // a free port can be lost to a race
		var cport, pport int
		if cport, err = benchproc.FreePort(); err != nil {
			return p, err
		}
		if pport, err = benchproc.FreePort(); err != nil {
			return p, err
		}
		endpoint = fmt.Sprintf("http://127.0.0.1:%d", cport)
		peer := fmt.Sprintf("http://127.0.0.1:%d", pport)
		dataDir := filepath.Join(b.tmp, fmt.Sprintf("%s-%d.etcd", prefix, attempt))
		defer os.RemoveAll(dataDir)
		srv, err = b.start("etcd-"+prefix, b.cfg.etcd,
			"--name", "bench", "--data-dir", dataDir, "--log-level", "warn",
			"--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "bench="+peer)
		if err != nil {
			return p, err
		}
		srv.base = endpoint
		if err = srv.waitOK("/health"); err == nil {
			break
		}
		srv.stop()
	}
	if err != nil {
		return p, err
	}
	defer srv.stop()
	cpu0, err := procstat.ProcessCPU(srv.pid())
	if err != nil {
		return p, err
	}
	out, err := exec.Command(b.cfg.etcdload, "-endpoint", endpoint, "-clients", strconv.Itoa(clients),
		"-duration", b.cfg.duration.String(), "-prefix", prefix+"/").Output()
	cpu1, cerr := procstat.ProcessCPU(srv.pid())
	lr, perr := benchproc.ParseLoad(out)
	if perr != nil {
		return p, fmt.Errorf("etcdload: %v (%w)", perr, err)
	}
	if cerr != nil {
		return p, cerr
	}
	p.ops, p.seconds, p.serverCPU = lr.Ops, lr.Seconds, cpu1-cpu0
	p.check = fmt.Sprintf("%d keys for %d grant+puts", lr.Keys, lr.Ops)
	switch {
	case lr.Error != "":
		p.failed = fmt.Sprintf("%d errors: %s", lr.Errors, lr.Error)
	case lr.Keys != lr.Ops:
		p.failed = "keys do not match: " + p.check
	}
	return p, nil
}

func countSQLite(path, prefix string) (int64, error) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	err = db.QueryRow(strings.Replace(benchproc.GrantsSQL, "$1", "?", 1), benchproc.TasksLike(prefix)).Scan(&n)
	return n, err
}

func removeSQLite(path string) {
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		_ = os.Remove(path + suffix)
	}
}

// server is a server process httpbench started, its output in a log file.
type server struct {
	cmd     *exec.Cmd
	logPath string
	base    string // http://127.0.0.1:PORT
	done    chan struct{}
	stopped bool
}

var addrRE = regexp.MustCompile(`addr=127\.0\.0\.1:(\d+)`)

// start runs a server. When it prints addr=127.0.0.1:PORT (leasehold serve
// and httpbench hello do), base is set from it.
func (b *bench) start(name, bin string, args ...string) (*server, error) {
	logPath := filepath.Join(b.tmp, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &server{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	return s, nil
}

func (s *server) pid() int { return s.cmd.Process.Pid }

func (s *server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitOK waits (60 s at most) for the server's address, when it prints
// one, and then for GET path to answer 200.
func (s *server) waitOK(path string) error {
	deadline := time.Now().Add(60 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-s.done:
			return fmt.Errorf("%s exited: %s", s.cmd.Path, s.logTail())
		default:
		}
		if s.base == "" {
			b, _ := os.ReadFile(s.logPath)
			if m := addrRE.FindSubmatch(b); m != nil {
				s.base = "http://127.0.0.1:" + string(m[1])
			}
			continue
		}
		resp, err := http.Get(s.base + path)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("%s was not ready in 60s: %s", s.cmd.Path, s.logTail())
}

// stop ends the server with SIGTERM (SIGKILL after 30 s) and waits for it.
func (s *server) stop() error {
	if s.stopped {
		return nil
	}
	s.stopped = true
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return errors.New(s.cmd.Path + " did not stop on SIGTERM in 30s")
	}
	return nil
}

func randomID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
