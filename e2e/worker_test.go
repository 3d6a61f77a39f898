package e2e

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/deploy"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// The demo workers of docker-compose.yml.
const (
	composeWorkerA = "worker-a"
	composeWorkerB = "worker-b"
)

// workerTTL is the lease ttl the workers ask for here: short, so that the
// work moves soon after a sidecar dies.
const workerTTL = 2 * time.Second

// The compose fleet with its demo workers, run as processes: migrate, both
// sidecars and, beside each, its worker running the service's own command
// (with a short ttl). One worker works and the other is refused; after the
// working worker's sidecar is SIGKILLed, the other works with a higher
// fencing token, granted within one ttl of the kill plus the idle worker's
// claim retries (see handoverBound). Throughout, the work lines of both
// workers, ordered by the monotonic clock they carry, show one worker at a
// time.
func TestComposeWorkers(t *testing.T) {
	t.Parallel()
	py := python3(t)
	db := pgtest.NewDatabase(t)
	p := loadComposeProject(t)
	dir := t.TempDir()

	out, err := runLeasehold(dockerless(t, p, composeMigrate, db, dir, "migrate")...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", composeMigrate, err, out)
	}
	sidecars := map[string]*sidecar{}
	for _, name := range []string{composeSidecarA, composeSidecarB} {
		sidecars[name] = startSidecar(t, db, dockerless(t, p, name, db, dir, "serve")[1:]...)
	}
	for _, s := range sidecars {
		s.waitReady()
	}
	workers := map[string]*worker{}
	for _, name := range []string{composeWorkerA, composeWorkerB} {
		workers[name] = startWorker(t, py, p, name, dir, sidecars)
	}

	// One works; the other asked and was refused.
	var working, idle *worker
	waitFor(t, "one worker working, the other refused", workers, func() bool {
		for _, w := range workers {
			for _, o := range workers {
				if w != o && len(w.lines("work")) >= 3 && len(o.lines("held")) >= 1 {
					working, idle = w, o
					return true
				}
			}
		}
		return false
	})
	before := working.lines("work")
	oldToken := before[len(before)-1].token

	t.Logf("SIGKILL %s, beside %s, which works with token %d", working.sidecar, working.name, oldToken)
	sidecars[working.sidecar].stop(syscall.SIGKILL)
	// The store's clock once the sidecar is gone: no renewal of the dead
	// holder's lease can begin after this instant.
	killed := storeClock(t, db)
	waitFor(t, "the work to move to "+idle.name, workers, func() bool {
		n := 0
		for _, l := range idle.lines("work") {
			if l.token > oldToken {
				n++
			}
		}
		return n >= 3
	})
	// The new grant, by the store: the history's first acquired event after
	// the old token (read from the history, not the live lease: on a busy
	// machine a 2 s lease may have run out again by the time it is read).
	r := sidecars[idle.sidecar].callWithToken(idle.token, "GET", "/v1/leases/"+url.PathEscape(idle.task)+"/history?limit=1000", nil)
	var newToken float64
	var acquiredAt time.Time
	evs, _ := r.Body["events"].([]any)
	for i := len(evs) - 1; i >= 0; i-- { // oldest first
		e, _ := evs[i].(map[string]any)
		if tok, _ := e["token"].(float64); e["kind"] == "acquired" && int64(tok) > oldToken {
			newToken = tok
			acquiredAt, _ = time.Parse(time.RFC3339Nano, fmt.Sprint(e["at"]))
			break
		}
	}
	if r.Status != http.StatusOK || newToken == 0 || acquiredAt.IsZero() {
		t.Fatalf("the history of %s after the hand-over: %d %s; want an acquired event with a token above %d", idle.task, r.Status, r.Raw, oldToken)
	}
	handover := acquiredAt.Sub(killed)
	bound, retries := handoverBound(t, idle, int64(newToken))
	t.Logf("token %d granted %s after the kill; bound %s (ttl %s + the idle worker's last claims, %s)",
		int64(newToken), handover.Round(time.Millisecond), bound.Round(time.Millisecond), workerTTL, retries.Round(time.Millisecond))
	if handover > bound {
		t.Errorf("the task was handed over %s after its holder's sidecar died, more than one ttl (%s) plus the idle worker's claim retries (%s): a dead holder must cost one ttl",
			handover.Round(time.Millisecond), workerTTL, retries.Round(time.Millisecond))
	}

	for _, w := range workers {
		w.stop()
	}

	var work []workerLine
	for _, w := range workers {
		work = append(work, w.lines("work")...)
	}
	if err := oneWorkerAtATime(work); err != nil {
		t.Fatalf("%v\n%s:\n%s\n%s:\n%s", err, composeWorkerA, workers[composeWorkerA].out.String(), composeWorkerB, workers[composeWorkerB].out.String())
	}
	if lost := working.lines("lost"); !slices.ContainsFunc(lost, func(l workerLine) bool { return l.token == oldToken }) {
		t.Errorf("%s logged no loss of the lease with token %d after its sidecar died:\n%s", working.name, oldToken, working.out.String())
	}
	lastOld := working.lines("work")
	firstNew := slices.IndexFunc(idle.lines("work"), func(l workerLine) bool { return l.token > oldToken })
	t.Logf("%s worked with token %d until mono=%.3f; %s with token %d from mono=%.3f (ttl %s)",
		working.name, oldToken, lastOld[len(lastOld)-1].mono, idle.name, idle.lines("work")[firstNew].token, idle.lines("work")[firstNew].mono, workerTTL)
}

// handoverBound is how long after its holder died a task may be granted to
// the idle worker, whose grant carries token: the contract's one ttl plus
// the claim retry interval of the worker, which polls (it claims again half
// an --interval after each refusal), as its own log shows it.
//
// The dead holder's lease was last renewed before the kill, so it expires at
// most one ttl after it (E ≤ kill + ttl). The idle worker's last claim
// answered "held" reached the store before E, and after the worker logged
// the line before that answer (x₀); the granting claim reached the store
// before the worker logged "acquired" (x₁). So the grant came less than
// x₁ - x₀ after E: two of the worker's claim cycles, read off its monotonic
// clock, which bound its one retry that straddles E. The durations of the
// store's clock and of time.monotonic() are comparable: both are this
// machine's, and nothing here compares their instants.
func handoverBound(t *testing.T, w *worker, token int64) (bound, retries time.Duration) {
	t.Helper()
	claims := w.lines("held", "unavailable", "acquired")
	n := slices.IndexFunc(claims, func(l workerLine) bool { return l.event == "acquired" && l.token == token })
	if n < 0 {
		t.Fatalf("%s logged no acquired line for token %d:\n%s", w.name, token, w.out.String())
	}
	j := n - 1
	for j >= 0 && claims[j].event != "held" {
		j--
	}
	if j < 1 {
		t.Fatalf("%s logged fewer than two claim answers, one of them held, before it acquired token %d: no retry interval to bound the hand-over by\n%s", w.name, token, w.out.String())
	}
	retries = time.Duration((claims[n].mono - claims[j-1].mono) * float64(time.Second))
	return workerTTL + retries, retries
}

// storeClock reads the store's clock: PostgreSQL's at db.
func storeClock(t *testing.T, db string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var now time.Time
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// workerLine is one line of worker.py's output: EVENT mono=SECONDS key=value….
type workerLine struct {
	worker string
	event  string
	mono   float64 // time.monotonic(): one clock for every process on the machine
	token  int64   // 0 when the line has none
}

var (
	workerLineRE  = regexp.MustCompile(`^([a-z]+) mono=([0-9.]+)\b`)
	workerTokenRE = regexp.MustCompile(` token=(\d+)\b`)
)

// oneWorkerAtATime checks work lines of several workers: ordered by their
// monotonic time, their fencing tokens never go down, and no token is worked
// with by two workers. So no worker works under an older lease once another
// has started under a newer one, and two workers never hold one lease.
func oneWorkerAtATime(work []workerLine) error {
	work = slices.Clone(work)
	slices.SortStableFunc(work, func(a, b workerLine) int { return cmp.Compare(a.mono, b.mono) })
	holder := map[int64]string{}
	for i, l := range work {
		if l.token <= 0 {
			return fmt.Errorf("%s: work line at mono=%f carries no fencing token", l.worker, l.mono)
		}
		if w, ok := holder[l.token]; ok && w != l.worker {
			return fmt.Errorf("%s and %s both work with token %d (%s at mono=%f)", w, l.worker, l.token, l.worker, l.mono)
		}
		holder[l.token] = l.worker
		if i > 0 && l.token < work[i-1].token {
			prev := work[i-1]
			return fmt.Errorf("%s works with token %d at mono=%f, after %s worked with the newer token %d at mono=%f", l.worker, l.token, l.mono, prev.worker, prev.token, prev.mono)
		}
	}
	return nil
}

// The check above fails on two workers whose leases overlap, and on two
// workers sharing one token.
func TestOneWorkerAtATimeCheck(t *testing.T) {
	t.Parallel()
	ok := []workerLine{
		{"a", "work", 10.0, 3}, {"a", "work", 11.0, 3},
		{"b", "work", 13.5, 4}, {"b", "work", 14.5, 4},
		{"a", "work", 20.0, 6},
	}
	if err := oneWorkerAtATime(ok); err != nil {
		t.Errorf("one worker at a time: %v", err)
	}
	for name, bad := range map[string][]workerLine{
		"a works on after b took over": {{"a", "work", 10.0, 3}, {"b", "work", 13.5, 4}, {"a", "work", 14.0, 3}},
		"a and b share a token":        {{"a", "work", 10.0, 3}, {"b", "work", 10.5, 3}},
		"a line with no token":         {{"a", "work", 10.0, 0}},
	} {
		if err := oneWorkerAtATime(bad); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// worker is one running examples/worker/worker.py.
type worker struct {
	t       *testing.T
	name    string // compose service
	task    string // the task it works on
	token   string // the bearer token it sends
	sidecar string // the compose service it points at
	cmd     *exec.Cmd
	out     *lockedbuf.Buffer
	done    chan struct{}
}

// startWorker runs the compose service name's command, with what Docker
// provides replaced: the script by the repository's file the service's bind
// mount shows, --sidecar's host by the address of the sidecar process of
// that service, --token-file by a copy of the secret it names; --ttl-ms is
// workerTTL and --interval a fifth of a second, for many work lines.
func startWorker(t *testing.T, py string, p *types.Project, name, dir string, sidecars map[string]*sidecar) *worker {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	script, flags, err := deploy.WorkerCommand(s)
	if err != nil {
		t.Fatal(err)
	}
	hostScript, ok := deploy.HostPath(s, script)
	if !ok {
		t.Fatalf("%s: no bind mount shows %s", name, script)
	}
	u, err := url.Parse(flags["sidecar"])
	if err != nil {
		t.Fatalf("%s: --sidecar: %v", name, err)
	}
	sc, ok := sidecars[u.Hostname()]
	if !ok {
		t.Fatalf("%s: --sidecar %s is no sidecar service", name, u)
	}
	var secret string
	for _, ref := range s.Secrets {
		target := cmp.Or(ref.Target, ref.Source)
		if !path.IsAbs(target) {
			target = "/run/secrets/" + target
		}
		if target == flags["token-file"] {
			secret = ref.Source
		}
	}
	if secret == "" {
		t.Fatalf("%s: --token-file %q is no secret the service mounts", name, flags["token-file"])
	}
	tokenFile := filepath.Join(dir, name+"-"+secret)
	if err := os.WriteFile(tokenFile, []byte(readSecret(t, p, secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags["sidecar"] = sc.base
	flags["token-file"] = tokenFile
	flags["ttl-ms"] = strconv.FormatInt(workerTTL.Milliseconds(), 10)
	flags["interval"] = "0.2"
	args := []string{hostScript}
	for _, k := range slices.Sorted(maps.Keys(flags)) {
		args = append(args, "--"+k, flags[k])
	}
	t.Logf("%s without Docker: python3 %s", name, strings.Join(args, " "))

	cmd := exec.Command(py, args...)
	cmd.Env = append(cleanEnv(), "PYTHONDONTWRITEBYTECODE=1")
	w := &worker{t: t, name: name, task: cmp.Or(flags["task"], "demo-report"), token: readSecret(t, p, secret),
		sidecar: u.Hostname(), cmd: cmd, out: &lockedbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = w.out, w.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			_ = cmd.Process.Kill()
			<-w.done
		}
		if t.Failed() {
			t.Logf("%s (pid %d) output:\n%s", name, cmd.Process.Pid, w.out.String())
		}
	})
	return w
}

// lines returns the worker's output lines of the events so far, in order.
func (w *worker) lines(events ...string) []workerLine {
	w.t.Helper()
	var ls []workerLine
	sc := bufio.NewScanner(strings.NewReader(w.out.String()))
	for sc.Scan() {
		m := workerLineRE.FindStringSubmatch(sc.Text())
		if m == nil || !slices.Contains(events, m[1]) {
			continue
		}
		l := workerLine{worker: w.name, event: m[1]}
		var err error
		if l.mono, err = strconv.ParseFloat(m[2], 64); err != nil {
			w.t.Fatalf("%s: %q: %v", w.name, sc.Text(), err)
		}
		if tm := workerTokenRE.FindStringSubmatch(sc.Text()); tm != nil {
			l.token, _ = strconv.ParseInt(tm[1], 10, 64)
		}
		ls = append(ls, l)
	}
	return ls
}

// stop ends the worker with SIGTERM (it hangs up, releasing its lease) and
// waits for it; a worker that exits on its own before that failed.
func (w *worker) stop() {
	w.t.Helper()
	select {
	case <-w.done:
		w.t.Fatalf("%s exited before it was stopped (%v):\n%s", w.name, w.cmd.ProcessState, w.out.String())
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		w.t.Fatalf("%s did not exit within 30s of SIGTERM", w.name)
	}
	if code := w.cmd.ProcessState.ExitCode(); code != 0 {
		w.t.Errorf("%s: exit code %d after SIGTERM, want 0\n%s", w.name, code, w.out.String())
	}
}

// waitFor polls cond until it holds, failing the test (with the workers'
// output) after a deadline generous for a busy machine.
func waitFor(t *testing.T, what string, workers map[string]*worker, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	for !cond() {
		for _, w := range workers {
			select {
			case <-w.done:
				t.Fatalf("waiting for %s: %s exited (%v):\n%s", what, w.name, w.cmd.ProcessState, w.out.String())
			default:
			}
		}
		select {
		case <-ctx.Done():
			var b strings.Builder
			for _, w := range workers {
				fmt.Fprintf(&b, "%s:\n%s\n", w.name, w.out.String())
			}
			t.Fatalf("no %s within 90s:\n%s", what, b.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
