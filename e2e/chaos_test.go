package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/e2e/chaos"
	"github.com/leasehold/leasehold/e2e/leasecheck"
	"github.com/leasehold/leasehold/internal/harness/faultproxy"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// chaosSummaryEnv names a file to which the CHAOS summary lines are also
// appended: go test shows a passing test's log only with -v, and CI prints
// the file after `make test` (.ci/run).
const chaosSummaryEnv = "LEASEHOLD_CHAOS_SUMMARY"

var chaosSummaryMu sync.Mutex

// chaosLogf logs a summary line, and appends it to $LEASEHOLD_CHAOS_SUMMARY
// when that is set.
func chaosLogf(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf(format, args...)
	path := os.Getenv(chaosSummaryEnv)
	if path == "" {
		return
	}
	chaosSummaryMu.Lock()
	defer chaosSummaryMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		_, err = fmt.Fprintf(f, format+"\n", args...)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Errorf("%s: %v", chaosSummaryEnv, err)
	}
}

// chaosDurationEnv overrides how long each chaos run's load lasts at least
// (`make chaos DURATION=10m` sets it).
const chaosDurationEnv = "LEASEHOLD_CHAOS_DURATION"

// defaultChaosDuration keeps the test within its share of `make test`.
const defaultChaosDuration = 50 * time.Second

// grantTarget is a store's grant target: short in any run, and in runs of
// at least longRun (`make chaos`) long per longRun of load. The targets of
// the two stores add up to the issue's: 1,000 grants in the bounded run and
// 20,000 per 10 minutes. SQLite, three processes contending for one file's
// lock under -race, grants several times fewer than PostgreSQL (docs/guarantees.md's
// chaos table has a 10-minute run of each). The load
// goes on past its duration until it has them (and every fault was
// injected once), up to maxLoad(duration).
type grantTarget struct{ short, long int }

var (
	postgresGrants = grantTarget{short: 600, long: 15000}
	sqliteGrants   = grantTarget{short: 400, long: 5000}
)

const longRun = 10 * time.Minute

// of is the target for a load of dur.
func (g grantTarget) of(dur time.Duration) int {
	if dur >= longRun {
		return int(float64(g.long) * dur.Seconds() / longRun.Seconds())
	}
	return g.short
}

// maxLoad is how long a load of at least dur may go on to reach its
// targets: generous, so that only a machine far slower than usual stops it.
func maxLoad(dur time.Duration) time.Duration { return dur + max(dur/2, 100*time.Second) }

// linearizeLimit bounds porcupine's search over a run of dur: past it the
// verdict is Unknown and the test fails rather than hang. The search grows
// with the history, above all with its indeterminate ops (docs/guarantees.md's
// chaos table gives the search's time for 10-minute runs).
func linearizeLimit(dur time.Duration) time.Duration { return 30*time.Second + dur/4 }

// Three sidecars on one store serve Go and python3 clients that claim,
// renew, release and abandon short leases on many tasks while sidecars are
// killed and frozen, PostgreSQL restarts (fast and immediate) and one
// sidecar's link to PostgreSQL is cut; e2e/leasecheck then checks the
// whole history: no violation of the lease rules, and linearizable. Beside
// that load, the job: holders write to a fenced resource of their own and
// are frozen past their ttl (every late write refused), and children of
// leasehold run on every sidecar die before their task's next grant.
func TestChaos(t *testing.T) {
	t.Parallel()
	dur := defaultChaosDuration
	if v := os.Getenv(chaosDurationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive Go duration such as 10m", chaosDurationEnv, v)
		}
		dur = d
	}
	py := python3(t)
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pg := pgtest.StartServer(t) // of its own: it is restarted
		u, err := url.Parse(pg.URL())
		if err != nil {
			t.Fatal(err)
		}
		proxy, err := faultproxy.New(u.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		viaProxy := *u
		viaProxy.Host = proxy.Addr()
		f := startFleet(t, pg.URL(), pg.URL(), viaProxy.String())
		f.watchCheck = true
		f.jobResource = pgtest.NewDatabase(t) // the job's own database, on another server
		faults := []chaos.Fault{
			f.killRestart(0),
			f.freeze(1),
			chaos.NewFault("postgres-restart-immediate", func(context.Context) error { return pg.Bounce("immediate") }),
			chaos.CutLink("proxy-cut", proxy, 1500*time.Millisecond),
			f.killRestart(2),
			chaos.NewFault("postgres-restart-fast", func(context.Context) error { return pg.Bounce("fast") }),
			f.freeze(0),
		}
		runChaos(t, f, py, dur, postgresGrants.of(dur), faults)
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		store := "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db")
		f := startFleet(t, store, store, store)
		f.watchCheck = true
		f.jobResource = "sqlite:" + filepath.Join(t.TempDir(), "resource.db")
		runChaos(t, f, py, dur, sqliteGrants.of(dur), []chaos.Fault{f.killRestart(0), f.freeze(1), f.killRestart(2), f.freeze(0)})
	})
}

// runChaos runs the load and faults on f, for at least dur and until it has
// seen want grants and every fault once (up to maxLoad(dur)), checks the
// history and reports. tweaks may change the load's configuration (the
// fault schedule, say) before it runs.
func runChaos(t *testing.T, f *fleet, py string, dur time.Duration, want int, faults []chaos.Fault, tweaks ...func(*chaos.Config)) {
	t.Helper()
	start := time.Now()
	cfg := chaos.Config{
		URLs:          f.urls(),
		GoClients:     32,
		PythonClients: 6,
		PythonScript:  "testdata/chaos_client.py",
		Python:        py,
		Tasks:         64,
		TaskPrefix:    "chaos/" + t.Name() + "-",
		Duration:      dur,
		MaxDuration:   maxLoad(dur),
		MinGrants:     want,
		Faults:        faults,
		Logf:          t.Logf,
	}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	finishWatch := func() {}
	if f.watchCheck {
		finishWatch = startWatchCheck(t, f, cfg.TaskPrefix)
	}
	var jobs *jobLoad
	if f.jobResource != "" {
		jobs = startJobs(t, f, f.jobResource, "job/"+t.Name()+"-", jobOptions{writers: 3, fenced: true, runners: true})
	}
	res, err := chaos.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if jobs != nil {
		requireJobs(t, jobs.finish(f.stores[0]))
	}
	rep := leasecheck.Check(res.Ops, linearizeLimit(res.Took))
	chaosLogf(t, "CHAOS %s: load %s (at least %s, at most %s), wall %s", t.Name(), res.Took.Round(time.Millisecond), dur, cfg.MaxDuration, time.Since(start).Round(time.Millisecond))
	chaosLogf(t, "CHAOS %s: grants %d (target %d), renewals %d (+%d same-owner refreshes), releases %d, indeterminate %d",
		t.Name(), rep.Grants, want, rep.Renewals, rep.Refreshes, rep.Releases, rep.Indeterminate)
	chaosLogf(t, "CHAOS %s: %s", t.Name(), res.FaultSummary())
	chaosLogf(t, "CHAOS %s: indeterminate ops by cause %v; ops by client %v", t.Name(), res.IndeterminateCauses(), res.OpsByClientKind())
	chaosLogf(t, "CHAOS %s: violations %d, porcupine %s", t.Name(), len(rep.Violations), rep.Linearizable)
	chaosLogf(t, "CHAOS %s details: %s", t.Name(), rep.Summary())
	finishWatch()

	if res.Unfinished != "" {
		t.Errorf("the load stopped at its maximum of %s with %s: this machine was too slow (or too busy) to reach the targets in time, which is not a leasehold failure; the history was still checked",
			cfg.MaxDuration, res.Unfinished)
	}
	for _, e := range res.Errors {
		t.Errorf("harness: %s", e)
	}
	for _, ev := range res.Faults {
		if ev.Err != nil {
			t.Errorf("fault %s failed: %v", ev.Name, ev.Err)
		}
	}
	for i, v := range rep.Violations {
		if i == 20 {
			t.Errorf("… and %d more violations", len(rep.Violations)-i)
			break
		}
		t.Errorf("violation: %s", v)
	}
	if rep.Linearizable != porcupine.Ok {
		t.Errorf("porcupine: %s, want Ok", rep.Linearizable)
	}
	if by := res.OpsByClientKind(); by["python"] == 0 || by["go"] == 0 {
		t.Errorf("ops by client %v: both the Go and the python3 clients should have run", by)
	}
	if rep.Grants < want {
		t.Errorf("%d grants, want at least %d", rep.Grants, want)
	}
	if kinds := res.FaultsByKind(); len(kinds) < len(uniqueNames(faults)) {
		t.Errorf("faults injected by kind %v: every kind of %v should have been injected at least once", kinds, uniqueNames(faults))
	}
}

func uniqueNames(fs []chaos.Fault) []string {
	var names []string
	seen := map[string]bool{}
	for _, f := range fs {
		if !seen[f.Name()] {
			seen[f.Name()] = true
			names = append(names, f.Name())
		}
	}
	return names
}

// fleet is the sidecars of a chaos run. Each keeps its address across
// restarts, so clients need not follow it.
type fleet struct {
	t      *testing.T
	stores []string
	addrs  []string // 127.0.0.1:PORT

	// watchCheck: a client follows the fleet's watch streams through the
	// run, and what it was sent is checked against the history
	// (chaoswatch_test.go). Not in the failover run: there PostgreSQL may
	// show a commit before its standby has it, and lose it in the
	// promotion, which a watcher then saw and the history no longer holds.
	watchCheck bool
	// jobResource, when set, is the database (postgres:// or sqlite:) of
	// the job's own resource: fenced writers and runs of leasehold run go
	// with the load, and are checked (chaosjob_test.go).
	jobResource string

	mu    sync.Mutex
	procs []*sidecar
}

// startFleet starts one sidecar per store URL and waits until all are
// ready.
func startFleet(t *testing.T, stores ...string) *fleet {
	t.Helper()
	f := &fleet{t: t, stores: stores}
	for _, st := range stores {
		s := startSidecar(t, st)
		f.procs = append(f.procs, s)
		f.addrs = append(f.addrs, s.base[len("http://"):])
	}
	for _, s := range f.procs {
		s.waitReady()
	}
	return f
}

func (f *fleet) urls() []string {
	var us []string
	for _, a := range f.addrs {
		us = append(us, "http://"+a)
	}
	return us
}

func (f *fleet) proc(i int) *sidecar {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procs[i]
}

// killRestart is the fault "sidecar i dies (SIGKILL) and is started again at
// its address" (relaunch).
func (f *fleet) killRestart(i int) chaos.Fault {
	return chaos.NewFault("sidecar-kill-restart", func(context.Context) error {
		old := f.proc(i)
		_ = old.proc.Signal(syscall.SIGKILL)
		<-old.proc.Done()
		if err := f.relaunch(i, leaseholdBin); err != nil {
			return fmt.Errorf("restart sidecar %d: %w", i, err)
		}
		return nil
	})
}

// relaunch starts bin as sidecar i at its address, once the one before it
// has exited, and waits until it is ready. While no sidecar listens there,
// the kernel may give the port to another socket (a client's connection
// takes its local port from the same range as the :0 the sidecar first
// listened on); the start is tried again until that socket is gone, for up
// to 30 s.
func (f *fleet) relaunch(i int, bin string) error {
	deadline := time.Now().Add(30 * time.Second)
	var (
		s   *sidecar
		err error
	)
	for {
		s, err = launchBin(f.t, bin, nil, f.stores[i], "--listen", f.addrs[i])
		if err == nil || !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling for the port, with a deadline
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.procs[i] = s
	f.mu.Unlock()
	return awaitReady(s.base, 30*time.Second)
}

// freeze is the fault "sidecar i stops (SIGSTOP) for longer than the
// longest ttl, then resumes".
func (f *fleet) freeze(i int) chaos.Fault {
	return chaos.Freeze("sidecar-freeze", func() int { return f.proc(i).proc.PID() }, 1200*time.Millisecond)
}

// awaitReady polls base's /readyz until it answers 200, for up to d.
func awaitReady(base string, d time.Duration) error {
	return awaitReadyVia(http.DefaultClient, base, d)
}

// awaitReadyVia is awaitReady asking through client (its transport: over a
// Unix socket, for a sidecar serving on one).
func awaitReadyVia(client *http.Client, base string, d time.Duration) error {
	deadline := time.Now().Add(d)
	hc := &http.Client{Transport: client.Transport, Timeout: time.Second}
	for {
		resp, err := hc.Get(base + "/readyz")
		status := 0
		if err == nil {
			status = resp.StatusCode
			resp.Body.Close()
			if status == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s (last: status %s, %v)", base, d, strconv.Itoa(status), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
