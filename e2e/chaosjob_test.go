package e2e

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/e2e/chaos"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// The job's half of the chaos run (issue 29): holders that write to a
// fenced resource of their own, frozen past their ttl now and then, and
// runs of `leasehold run` on every sidecar of the fleet while the faults
// hit it. chaos.CheckFence and chaos.CheckRunDeaths judge them.

var (
	fencewriterOnce sync.Once
	fencewriterBin  string
	fencewriterErr  error
)

// fencewriter builds e2e/cmd/fencewriter once.
func fencewriter(t *testing.T) string {
	t.Helper()
	fencewriterOnce.Do(func() {
		fencewriterBin = filepath.Join(filepath.Dir(leaseholdBin), "fencewriter")
		out, err := exec.Command("go", "build", "-o", fencewriterBin, "github.com/leasehold/leasehold/e2e/cmd/fencewriter").CombinedOutput()
		if err != nil {
			fencewriterErr = fmt.Errorf("build fencewriter: %v\n%s", err, out)
		}
	})
	if fencewriterErr != nil {
		t.Fatal(fencewriterErr)
	}
	return fencewriterBin
}

// fenceInstall runs `leasehold fence install --db db` on the job's own
// database, which must exist.
func fenceInstall(t *testing.T, db string) {
	t.Helper()
	if out, err := exec.Command(leaseholdBin, "fence", "install", "--db", db).CombinedOutput(); err != nil {
		t.Fatalf("leasehold fence install: %v\n%s", err, out)
	}
}

// createResource makes the fenced resource: the table the writers write
// to, then `leasehold fence install`.
func createResource(t *testing.T, db string) {
	t.Helper()
	defer fenceInstall(t, db) // the database is the job's and exists already: install adds the fence
	ctx := t.Context()
	if path, ok := storeurl.SQLitePath(db); ok {
		d, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if _, err := d.ExecContext(ctx, `CREATE TABLE chaos_writes (id INTEGER PRIMARY KEY AUTOINCREMENT, task TEXT NOT NULL, token INTEGER NOT NULL, writer TEXT NOT NULL, seq INTEGER NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		return
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE chaos_writes (id bigserial PRIMARY KEY, task text NOT NULL, token bigint NOT NULL, writer text NOT NULL, seq bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

// resourceRows reads what the resource accepted.
func resourceRows(ctx context.Context, db string) ([]chaos.FenceRow, error) {
	const q = `SELECT id, task, token, writer, seq FROM chaos_writes ORDER BY id`
	var rows interface {
		Next() bool
		Scan(...any) error
		Err() error
	}
	if path, ok := storeurl.SQLitePath(db); ok {
		d, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			return nil, err
		}
		defer d.Close()
		r, err := d.QueryContext(ctx, q)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		rows = r
	} else {
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			return nil, err
		}
		defer conn.Close(ctx)
		r, err := conn.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		rows = r
	}
	var out []chaos.FenceRow
	for rows.Next() {
		var r chaos.FenceRow
		if err := rows.Scan(&r.ID, &r.Task, &r.Token, &r.Writer, &r.Seq); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// storedGrants reads the acquired events of the tasks under prefix, with
// their times on the store's clock.
func storedGrants(ctx context.Context, store, prefix string) ([]chaos.Grant, error) {
	var out []chaos.Grant
	if path, ok := storeurl.SQLitePath(store); ok {
		d, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			return nil, err
		}
		defer d.Close()
		rows, err := d.QueryContext(ctx, `SELECT task, token, at FROM leasehold_history WHERE kind = 'acquired' AND substr(task, 1, length(?1)) = ?1`, prefix)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var g chaos.Grant
			var ms int64
			if err := rows.Scan(&g.Task, &g.Token, &ms); err != nil {
				return nil, err
			}
			g.At = time.UnixMilli(ms)
			out = append(out, g)
		}
		return out, rows.Err()
	}
	conn, err := pgx.Connect(ctx, store)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT task, token, at FROM leasehold_history WHERE kind = 'acquired' AND substr(task, 1, length($1)) = $1`, prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var g chaos.Grant
		if err := rows.Scan(&g.Task, &g.Token, &g.At); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// jobLoad is the job's half of a chaos run: its writers and runners, until
// stop.
type jobLoad struct {
	t        *testing.T
	resource string
	prefix   string
	fenced   bool
	runWork  int
	runTasks int

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	attempts []chaos.FenceAttempt
	children []chaos.RunChild
	runs     map[int]int // leasehold run's exit status → count
	freezes  int
	errs     []string
}

// jobOptions say what a job load runs.
type jobOptions struct {
	writers int  // fenced writer processes (0: none)
	fenced  bool // false: the writers skip the fence (the mutant)
	runners bool // runs of leasehold run on every sidecar
	runBin  string
	// runWork is how many 30 ms steps each supervised child works (0: 60,
	// about 2 s). The run mutant's children work longer, so that a freeze of
	// their sidecar always finds one at work: a waiting mutant then always
	// outlives its lease, and the check does not depend on luck.
	runWork int
	// runTasks is how many tasks the runners share (0: 2). The run mutant's
	// share one, so that the other sidecar's runner is always waiting for it
	// and takes it as soon as a frozen holder's lease runs out.
	runTasks int
}

// startJobs starts the job's load on f; resource is the fenced resource
// database (not the lease store).
func startJobs(t *testing.T, f *fleet, resource, prefix string, o jobOptions) *jobLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	j := &jobLoad{t: t, resource: resource, prefix: prefix, fenced: o.fenced, runWork: cmp.Or(o.runWork, 60), runTasks: cmp.Or(o.runTasks, 2), ctx: ctx, cancel: cancel, runs: map[int]int{}}
	t.Cleanup(cancel)
	if o.writers > 0 {
		createResource(t, resource)
		bin := fencewriter(t)
		var pids []func() int
		for i := range o.writers {
			pid := make(chan int, 1)
			j.wg.Add(1)
			go j.writer(bin, f.urls(), fmt.Sprintf("w%d", i), pid)
			p := <-pid
			pids = append(pids, func() int { return p })
		}
		j.wg.Add(1)
		go j.freezer(pids)
	}
	if o.runners {
		bin := o.runBin
		if bin == "" {
			bin = leaseholdBin
		}
		for _, u := range f.urls() {
			j.wg.Add(1)
			go j.runner(bin, u)
		}
	}
	return j
}

func (j *jobLoad) errorf(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.errs = append(j.errs, fmt.Sprintf(format, args...))
}

// writer runs one fencewriter process and collects its attempts.
func (j *jobLoad) writer(bin string, urls []string, name string, pid chan<- int) {
	defer j.wg.Done()
	cmd := exec.Command(bin, "-addrs", strings.Join(urls, ","), "-tasks", j.prefix+"fenced-0,"+j.prefix+"fenced-1",
		"-db", j.resource, "-writer", name, "-fence="+strconv.FormatBool(j.fenced))
	stderr := &lockedbuf.Buffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		j.errorf("start %s: %v", name, err)
		pid <- 0
		return
	}
	pid <- cmd.Process.Pid
	stop := context.AfterFunc(j.ctx, func() {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen writer must see its SIGTERM
		_ = cmd.Process.Signal(syscall.SIGTERM)
	})
	defer stop()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var a chaos.FenceAttempt
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			j.errorf("%s printed %q: %v", name, sc.Text(), err)
			continue
		}
		j.mu.Lock()
		j.attempts = append(j.attempts, a)
		j.mu.Unlock()
	}
	if err := cmd.Wait(); err != nil && j.ctx.Err() == nil {
		j.errorf("%s exited: %v\n%s", name, err, stderr.String())
	}
}

// freezer stops a writer (SIGSTOP) for twice its ttl every second or two,
// then resumes it: it wakes up believing it holds its lease.
func (j *jobLoad) freezer(pids []func() int) {
	defer j.wg.Done()
	for {
		select {
		case <-j.ctx.Done():
			return
		case <-time.After(time.Duration(800+rand.IntN(1200)) * time.Millisecond):
		}
		p := pids[rand.IntN(len(pids))]()
		if p == 0 || syscall.Kill(p, syscall.SIGSTOP) != nil {
			continue
		}
		select {
		case <-j.ctx.Done():
		case <-time.After(1200 * time.Millisecond): // twice the writers' 600 ms ttl
		}
		_ = syscall.Kill(p, syscall.SIGCONT)
		j.mu.Lock()
		j.freezes++
		j.mu.Unlock()
	}
}

// runScript is the supervised child (bash, for $EPOCHREALTIME without a
// fork): it publishes its token and PID, then ignores SIGTERM (its sleeps
// inherit that) and works $2 steps of 30 ms, appending a heartbeat, the
// wall clock, to $1.alive before each: the last one it wrote is a proof
// that it was alive then, which no observer's lateness can fake.
const runScript = `echo "$LEASEHOLD_TOKEN $$" > "$1.tmp" && mv "$1.tmp" "$1"; trap '' TERM; n=0; while [ $n -lt "$2" ]; do echo "$EPOCHREALTIME" >> "$1.alive"; sleep 0.03; n=$((n+1)); done`

// runner runs `leasehold run` against the sidecar at u, one run after
// another, on two tasks the other sidecars' runners want too.
func (j *jobLoad) runner(bin, u string) {
	defer j.wg.Done()
	dir, err := os.MkdirTemp("", "leasehold-runjob-")
	if err != nil {
		j.errorf("runner: %v", err)
		return
	}
	defer os.RemoveAll(dir)
	for n := 0; j.ctx.Err() == nil; n++ {
		task := j.prefix + "run-" + strconv.Itoa(rand.IntN(j.runTasks))
		pidfile := filepath.Join(dir, strconv.Itoa(n))
		cmd := exec.Command(bin, "run", "--addr", u, "--task", task, "--ttl", "1s", "--grace", "30s", "--wait", "2s",
			"--", "bash", "-c", runScript, "bash", pidfile, strconv.Itoa(j.runWork))
		cmd.Env = cleanEnv()
		logs := &lockedbuf.Buffer{}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			j.errorf("leasehold run: %v", err)
			return
		}
		exited := make(chan struct{})
		seen := make(chan *chaos.RunChild, 1)
		go func() { seen <- watchChild(pidfile, task, exited) }()
		err := cmd.Wait()
		close(exited)
		code := cmd.ProcessState.ExitCode()
		child := <-seen
		j.mu.Lock()
		j.runs[code]++
		if child != nil {
			child.Lost = code == 70
			child.Log = logs.String()
			if beats, err := os.ReadFile(pidfile + ".alive"); err == nil {
				child.Alive = chaos.ParseHeartbeats(string(beats))
			}
			j.children = append(j.children, *child)
		}
		j.mu.Unlock()
		if err != nil && code != 70 && code != 75 && code != 69 {
			j.errorf("leasehold run on %s exited %d:\n%s", u, code, logs.String())
		}
	}
}

// watchChild waits for the child's PID in pidfile, then for its death,
// through a pidfd, and returns when it was seen dead: an upper bound of the
// death, taken in this process, which neither leasehold run nor the sidecar
// can move. Nil when the child never started (the run exited first).
func watchChild(pidfile, task string, exited <-chan struct{}) *chaos.RunChild {
	var token int64
	var pid int
	for {
		if data, err := os.ReadFile(pidfile); err == nil {
			if _, err := fmt.Sscan(string(data), &token, &pid); err == nil {
				break
			}
		}
		select {
		case <-exited:
			// The run ended: the child is dead, if it started at all.
			if data, err := os.ReadFile(pidfile); err == nil {
				if _, err := fmt.Sscan(string(data), &token, &pid); err == nil {
					return &chaos.RunChild{Task: task, Token: token, DiedBy: time.Now()}
				}
			}
			return nil
		case <-time.After(2 * time.Millisecond):
		}
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		// Already gone (ESRCH): it died before now.
		return &chaos.RunChild{Task: task, Token: token, DiedBy: time.Now()}
	}
	defer unix.Close(fd)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n > 0 || err != nil {
			return &chaos.RunChild{Task: task, Token: token, DiedBy: time.Now()}
		}
	}
}

// jobReport is what finish found.
type jobReport struct {
	fence chaos.FenceReport
	runs  chaos.RunReport
}

// finish stops the job load and checks it against the resource and the
// store's history.
func (j *jobLoad) finish(store string) jobReport {
	t := j.t
	t.Helper()
	j.cancel()
	j.wg.Wait()
	var rep jobReport
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.errs {
		t.Errorf("job load: %s", e)
	}
	if len(j.attempts) > 0 {
		rows, err := resourceRows(t.Context(), j.resource)
		if err != nil {
			t.Fatalf("read the fenced resource: %v", err)
		}
		rep.fence = chaos.CheckFence(rows, j.attempts)
		chaosLogf(t, "CHAOS %s: fenced writes %d (accepted %d, refused %d, of which %d late writes of holders frozen past their ttl, errors %d), rows %d, freezes %d, violations %d",
			t.Name(), len(j.attempts), rep.fence.Accepted, rep.fence.Refused, rep.fence.LateRefused, rep.fence.Errors, rep.fence.Rows, j.freezes, len(rep.fence.Violations))
	}
	if len(j.children) > 0 {
		grants, err := storedGrants(t.Context(), store, j.prefix+"run-")
		if err != nil {
			t.Fatalf("read the grants: %v", err)
		}
		rep.runs = chaos.CheckRunDeaths(j.children, grants)
		chaosLogf(t, "CHAOS %s: leasehold run: %d runs by exit status %v, %d children, %d stopped for a lost lease (%d of them followed by another grant), %d followed by another grant; smallest margin from the last heartbeat to the next grant %s (lost leases: %s); seen dead by the observer: smallest margin %s, %d only after the next grant (an upper bound: the heartbeats decide); violations %d",
			t.Name(), sumRuns(j.runs), j.runs, rep.runs.Children, rep.runs.Lost, rep.runs.LostFollowed, rep.runs.Followed, rep.runs.MinAlive, rep.runs.MinLostAlive, rep.runs.MinSeenDead, rep.runs.SeenLate, len(rep.runs.Violations))
	}
	return rep
}

func sumRuns(m map[int]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// requireJobs fails the test on any violation, and when the run did not
// exercise what it checks: late writes refused, children stopped for a
// lost lease and then followed by another holder.
func requireJobs(t *testing.T, rep jobReport) {
	t.Helper()
	for _, v := range append(rep.fence.Violations, rep.runs.Violations...) {
		t.Errorf("job violation: %s", v)
	}
	if rep.fence.LateRefused == 0 {
		t.Errorf("no late write was refused (%+v): the freezes did not exercise the fence", rep.fence)
	}
	if rep.runs.LostFollowed == 0 {
		t.Errorf("no child of leasehold run was stopped for a lost lease and followed by another grant (%+v): the faults did not exercise it", rep.runs)
	}
}

// The job checks catch what they are for: writers that skip the fence let
// a frozen holder's late write land after a newer holder's, and a
// leasehold run built to wait for the sidecar's word
// (-tags leasehold_mutant_waitsidecar) lets a child outlive its lease when
// its sidecar freezes.
func TestChaosJobMutants(t *testing.T) {
	t.Parallel()
	t.Run("fence-off", func(t *testing.T) {
		t.Parallel()
		store := "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db")
		f := startFleet(t, store, store)
		j := startJobs(t, f, "sqlite:"+filepath.Join(t.TempDir(), "resource.db"), "mutant/fence-", jobOptions{writers: 3, fenced: false})
		time.Sleep(20 * time.Second) // the load runs meanwhile
		rep := j.finish(store)
		if len(rep.fence.Violations) == 0 {
			t.Errorf("writers without the fence: no violation found (%+v); the checker cannot tell a fence from none", rep.fence)
		}
	})
	t.Run("run-waits-for-sidecar", func(t *testing.T) {
		t.Parallel()
		bin := filepath.Join(t.TempDir(), "leasehold-mutant")
		if out, err := exec.Command("go", "build", "-tags", "leasehold_mutant_waitsidecar", "-o", bin, "github.com/leasehold/leasehold/cmd/leasehold").CombinedOutput(); err != nil {
			t.Fatalf("build the mutant: %v\n%s", err, out)
		}
		store := "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db")
		f := startFleet(t, store, store)
		j := startJobs(t, f, "", "mutant/run-", jobOptions{runners: true, runBin: bin, runWork: 300, runTasks: 1})
		// Freezes alternate between the two sidecars, so that whichever one's
		// runner holds the task is frozen within two freezes.
		for i := range 8 {
			freeze := chaos.Freeze("sidecar-freeze", func() int { return f.proc(i % 2).proc.PID() }, 5*time.Second)
			time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Millisecond)
			if err := freeze.Inject(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		rep := j.finish(store)
		if len(rep.runs.Violations) == 0 {
			t.Errorf("a leasehold run that waits for the sidecar's word: no child's heartbeat after its task's next grant (%+v); the checker cannot tell", rep.runs)
		}
	})
}
