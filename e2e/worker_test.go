package e2e

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"maps"
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
// fencing token. Throughout, the work lines of both workers, ordered by the
// monotonic clock they carry, show one worker at a time.
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
	waitFor(t, "the work to move to "+idle.name, workers, func() bool {
		n := 0
		for _, l := range idle.lines("work") {
			if l.token > oldToken {
				n++
			}
		}
		return n >= 3
	})
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
	w := &worker{t: t, name: name, sidecar: u.Hostname(), cmd: cmd, out: &lockedbuf.Buffer{}, done: make(chan struct{})}
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

// lines returns the worker's output lines of event so far.
func (w *worker) lines(event string) []workerLine {
	w.t.Helper()
	var ls []workerLine
	sc := bufio.NewScanner(strings.NewReader(w.out.String()))
	for sc.Scan() {
		m := workerLineRE.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != event {
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
