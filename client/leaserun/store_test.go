package leaserun

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/sqlite"
)

// TestStoreEnvironment: the command sees the task, the owner and the
// fencing token, on top of leasehold run's environment; the lease is held
// while it runs and released after.
func TestStoreEnvironment(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	first := st.claim(t, "report", "earlier", time.Minute)
	st.release(t, "report", "earlier", first.Token)

	r := start(t, Config{
		Store: st.url, Task: "report", Owner: "w1",
		Env:     []string{"INHERITED=yes", "LEASEHOLD_TOKEN=stale"},
		Command: shell(`echo "$INHERITED $LEASEHOLD_TASK $LEASEHOLD_OWNER $LEASEHOLD_TOKEN"`),
	})
	r.expect(t, 0)
	if got, want := strings.TrimSpace(r.stdout.String()), "yes report w1 2"; got != want {
		t.Errorf("command saw %q, want %q", got, want)
	}
	if l := st.get(t, "report"); l != nil {
		t.Errorf("not released: %+v", l)
	}
	r.logHas(t, "msg=acquired task=report owner=w1 token=2")
	r.logHas(t, "msg=released task=report token=2 exit=0")
}

// TestStoreRecordsTheOutcome: the release tells the store what the command
// did (exit status, or the signal that killed it), and the history keeps it.
func TestStoreRecordsTheOutcome(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	for _, tc := range []struct {
		command []string
		code    int
		want    leasecore.RunOutcome
	}{
		{shell(`exit 0`), 0, leasecore.RunOutcome{ExitCode: 0}},
		{shell(`exit 3`), 3, leasecore.RunOutcome{ExitCode: 3}},
		{shell(`kill -9 $$`), exitcode.Signal + 9, leasecore.RunOutcome{ExitCode: leasecore.NoExitCode, Error: "killed by signal 9 (killed)"}},
	} {
		r := start(t, Config{Store: st.url, Task: "outcome", Owner: "w1", Command: tc.command})
		r.expect(t, tc.code)
		evs, err := leasecore.New(st.store).History(t.Context(), "outcome", 1)
		if err != nil || len(evs) != 1 || evs[0].Run == nil {
			t.Fatalf("%v: newest event %+v, %v; want released with a run", tc.command, evs, err)
		}
		got := *evs[0].Run
		got.Duration = 0
		if got != tc.want {
			t.Errorf("%v: run %+v, want %+v", tc.command, *evs[0].Run, tc.want)
		}
	}
}

// TestStoreHeld: a task held by another owner ends the run with 75 and the
// command never starts.
func TestStoreHeld(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	st.claim(t, "nightly", "other", time.Minute)
	marker := filepath.Join(t.TempDir(), "ran")
	r := start(t, Config{Store: st.url, Task: "nightly", Owner: "w1", Command: shell(`: > "$1"`, marker)})
	r.expect(t, exitcode.Held)
	if exists(marker) {
		t.Error("the command ran although the task was held")
	}
	r.logHas(t, `msg=held task=nightly holder=other`)
	if l := st.get(t, "nightly"); l == nil || l.Owner != "other" {
		t.Errorf("the holder's lease changed: %+v", l)
	}
}

// TestStoreWaitAcquires: with --wait, a task held at first is acquired once
// the holder releases it.
func TestStoreWaitAcquires(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	held := st.claim(t, "nightly", "other", time.Minute)
	waiting := make(chan struct{})
	var once sync.Once
	cfg := Config{
		Store: st.url, Task: "nightly", Owner: "w1", Wait: 10 * time.Minute,
		Command: shell(`echo "token=$LEASEHOLD_TOKEN"`),
		onHeld:  func() { once.Do(func() { close(waiting) }) },
	}
	r := start(t, cfg)
	r.until(t, waiting)
	st.release(t, "nightly", "other", held.Token)
	r.expect(t, 0)
	if got := strings.TrimSpace(r.stdout.String()); got != "token=2" {
		t.Errorf("command saw %q, want token=2", got)
	}
	r.logHas(t, "msg=waiting task=nightly holder=other")
}

// TestStoreWaitRunsOut: a wait that runs out ends the run with 75.
func TestStoreWaitRunsOut(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	st.claim(t, "nightly", "other", time.Minute)
	var tries int
	var mu sync.Mutex
	marker := filepath.Join(t.TempDir(), "ran")
	r := start(t, Config{
		Store: st.url, Task: "nightly", Owner: "w1", Wait: 300 * time.Millisecond,
		Command: shell(`: > "$1"`, marker),
		onHeld:  func() { mu.Lock(); tries++; mu.Unlock() },
	})
	r.expect(t, exitcode.Held)
	if exists(marker) {
		t.Error("the command ran although the task stayed held")
	}
	mu.Lock()
	defer mu.Unlock()
	if tries == 0 {
		t.Error("never waited")
	}
}

// TestStoreLost: when the lease is lost while the command runs, the
// command's group gets SIGTERM and leasehold run exits 70, whatever the
// command's own status.
func TestStoreLost(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	dir := t.TempDir()
	started, termed := filepath.Join(dir, "started"), filepath.Join(dir, "termed")
	r := start(t, Config{
		Store: st.url, Task: "nightly", Owner: "w1", TTL: time.Second,
		Command: shell(trapTerm, started, termed),
	})
	waitForFile(t, started)
	l := st.get(t, "nightly")
	if l == nil || l.Owner != "w1" {
		t.Fatalf("lease while the command runs: %+v", l)
	}
	// The next renewal is refused: not_held.
	st.release(t, "nightly", "w1", l.Token)
	r.expect(t, exitcode.Lost)
	if !exists(termed) {
		t.Error("the command did not get SIGTERM")
	}
	r.logHas(t, "msg=lost task=nightly token=1")
	r.logHas(t, "not_held")
	r.logHas(t, "exit=7")
}

// TestStoreLostGraceKill: a command that ignores SIGTERM is killed after
// --grace.
func TestStoreLostGraceKill(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	started := filepath.Join(t.TempDir(), "started")
	r := start(t, Config{
		Store: st.url, Task: "nightly", Owner: "w1", TTL: time.Second, Grace: 100 * time.Millisecond,
		Command: shell(ignoreTerm, started),
	})
	waitForFile(t, started)
	st.release(t, "nightly", "w1", 1)
	r.expect(t, exitcode.Lost)
	r.logHas(t, "SIGKILL")
	r.logHas(t, "exit=137")
}

// TestStoreSignalForwarded: a signal to leasehold run reaches the command;
// the command's status is the run's, and the lease is released after it.
func TestStoreSignalForwarded(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	dir := t.TempDir()
	started, termed := filepath.Join(dir, "started"), filepath.Join(dir, "termed")
	r := start(t, Config{Store: st.url, Task: "nightly", Owner: "w1", Command: shell(trapTerm, started, termed)})
	waitForFile(t, started)
	r.signals <- syscall.SIGTERM
	r.expect(t, 7)
	if !exists(termed) {
		t.Error("the command did not get SIGTERM")
	}
	if l := st.get(t, "nightly"); l != nil {
		t.Errorf("not released: %+v", l)
	}
	r.logHas(t, "msg=released")
}

// TestStoreSignalBeforeStart: a signal while waiting for a held task ends the
// run with 128+N, without running the command.
func TestStoreSignalBeforeStart(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	st.claim(t, "nightly", "other", time.Minute)
	waiting := make(chan struct{})
	var once sync.Once
	marker := filepath.Join(t.TempDir(), "ran")
	r := start(t, Config{
		Store: st.url, Task: "nightly", Owner: "w1", Wait: 10 * time.Minute,
		Command: shell(`: > "$1"`, marker),
		onHeld:  func() { once.Do(func() { close(waiting) }) },
	})
	r.until(t, waiting)
	r.signals <- syscall.SIGINT
	r.expect(t, 128+int(syscall.SIGINT))
	if exists(marker) {
		t.Error("the command ran")
	}
}

// TestStoreProcessSignal runs leasehold run as a real process (this test
// binary, see TestMain) and sends it SIGTERM: the command gets it, the
// process exits with the command's status and the lease is released.
func TestStoreProcessSignal(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	dir := t.TempDir()
	started, termed := filepath.Join(dir, "started"), filepath.Join(dir, "termed")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"--store", st.url, "--task", "nightly", "--owner", "w1", "--"}, shell(trapTerm, started, termed)...)...)
	cmd.Env = append(withoutLeaseholdEnv(os.Environ()), helperEnv+"=1")
	stderr := new(lockedbuf.Buffer)
	cmd.Stderr = stderr
	cmd.WaitDelay = time.Second // a leftover of the command may hold the pipe
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := cmd.Process
	exited := make(chan *os.ProcessState, 1)
	go func() {
		_ = cmd.Wait()
		exited <- cmd.ProcessState
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = p.Kill() // only the process this test started
			<-exited
		}
	})
	waitForFile(t, started)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var state *os.ProcessState
	select {
	case state = <-exited:
		exited <- state
	case <-time.After(30 * time.Second):
		t.Fatalf("leasehold run did not exit within 30 s of SIGTERM; stderr:\n%s", stderr)
	}
	if state.ExitCode() != 7 {
		t.Errorf("exit %v, want 7; stderr:\n%s", state, stderr)
	}
	if !exists(termed) {
		t.Error("the command did not get SIGTERM")
	}
	if l := st.get(t, "nightly"); l != nil {
		t.Errorf("not released: %+v", l)
	}
}

func withoutLeaseholdEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			out = append(out, kv)
		}
	}
	return out
}

// TestStoreDeclaredTTL: with no --ttl the lease gets the task's declared
// ttl, as any claim without one does; --ttl still wins.
func TestStoreDeclaredTTL(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	if _, err := st.svc.CreateTask(context.Background(), leasecore.TaskDecl{Name: "declared-job", TTL: 45 * time.Second}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ttl, want time.Duration
	}{{0, 45 * time.Second}, {20 * time.Second, 20 * time.Second}} {
		dir := t.TempDir()
		running, proceed := filepath.Join(dir, "running"), filepath.Join(dir, "proceed")
		r := start(t, Config{
			Store: st.url, Task: "declared-job", Owner: "w1", TTL: c.ttl,
			Command: shell(`: > "$1"; while [ ! -e "$2" ]; do sleep 0.01; done`, running, proceed),
		})
		waitForFile(t, running)
		if l := st.get(t, "declared-job"); l == nil || l.TTL != c.want {
			t.Errorf("--ttl %s: lease %+v, want ttl %s", c.ttl, l, c.want)
		}
		if err := os.WriteFile(proceed, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		r.expect(t, 0)
	}
}

// TestMissingCommandClaimsNothing: a command that is missing or cannot be
// executed is found out before the claim, so it takes no fencing token and
// writes no history: the next claim of the task gets token 1.
func TestMissingCommandClaimsNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := newTestStore(t)
	for _, c := range []struct {
		command string
		want    int
	}{
		{filepath.Join(dir, "no-such-command"), exitcode.NotFound},
		{"no-such-command-leaserun", exitcode.NotFound},
		{notExec, exitcode.CannotExec},
	} {
		r := start(t, Config{Store: st.url, Task: "typo", Owner: "w1", Command: []string{c.command, "arg"}})
		r.expect(t, c.want)
		r.logHas(t, "the lease was not claimed")
		if strings.Contains(r.stderr.String(), "msg=acquired") {
			t.Errorf("%s: claimed before the command was found:\n%s", c.command, r.stderr)
		}
	}
	events, err := st.svc.History(context.Background(), "typo", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 0 {
		t.Errorf("history written for a command that never ran: %+v", events)
	}
	if l := st.claim(t, "typo", "w2", time.Minute); l.Token != 1 {
		t.Errorf("first real claim got token %d, want 1: a fencing token was taken", l.Token)
	}
}

// TestStoreMigratesNewFile: --store on an SQLite file that does not exist
// yet creates it with its schema, and the lease is held and released there.
func TestStoreMigratesNewFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fresh.db")
	r := start(t, Config{Store: "sqlite:" + path, Task: "fresh", Owner: "w1", Command: shell(`echo "token=$LEASEHOLD_TOKEN"`)})
	r.expect(t, 0)
	if !strings.Contains(r.stdout.String(), "token=1") {
		t.Errorf("stdout lacks token=1:\n%s", r.stdout)
	}
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	events, err := leasecore.New(st).History(context.Background(), "fresh", 10)
	if err != nil {
		t.Fatalf("history of the new file: %v", err)
	}
	if len(events) == 0 {
		t.Errorf("no history in the new file after a run")
	}
}
