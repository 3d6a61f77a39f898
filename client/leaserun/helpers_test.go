package leaserun

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/sqlite"
)

// helperEnv makes the test binary act as `leasehold run` (see TestMain), so
// that a test can send a real signal to a real process.
const helperEnv = "LEASERUN_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(Main(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// waitForFile waits until path exists.
func waitForFile(t *testing.T, path string) {
	t.Helper()
	testsidecar.WaitFor(t, filepath.Base(path), func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// testStore is a migrated SQLite store in a temporary directory, with the
// URL that opens it again and a Service over this handle.
type testStore struct {
	url   string
	store leasecore.Store
	svc   *leasecore.Service
}

func newTestStore(t *testing.T) testStore {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return testStore{url: "sqlite:" + path, store: st, svc: leasecore.New(st)}
}

func (s testStore) claim(t *testing.T, task, owner string, ttl time.Duration) *leasecore.Lease {
	t.Helper()
	l, err := s.svc.Claim(context.Background(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatalf("claim %s as %s: %v", task, owner, err)
	}
	return l
}

func (s testStore) release(t *testing.T, task, owner string, token int64) {
	t.Helper()
	ok, err := s.svc.Release(context.Background(), leasecore.ReleaseParams{Task: task, Owner: owner, Token: token})
	if err != nil || !ok {
		t.Fatalf("release %s as %s: %v %v", task, owner, ok, err)
	}
}

// get returns the task's live lease or nil.
func (s testStore) get(t *testing.T, task string) *leasecore.Lease {
	t.Helper()
	l, err := s.svc.Get(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// run is one in-process leasehold run.
type run struct {
	stdout, stderr *lockedbuf.Buffer
	signals        chan os.Signal
	done           chan struct{} // closed when Run has returned
	status         int           // set before done is closed
}

// start runs cfg in the background; its streams and signals are the run's.
func start(t *testing.T, cfg Config) *run {
	t.Helper()
	r := &run{stdout: new(lockedbuf.Buffer), stderr: new(lockedbuf.Buffer), signals: make(chan os.Signal, 1), done: make(chan struct{})}
	cfg.Stdout, cfg.Stderr, cfg.Signals = r.stdout, r.stderr, r.signals
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	go func() {
		r.status = Run(context.Background(), cfg)
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Errorf("leasehold run did not end; stderr:\n%s", r.stderr)
		}
	})
	return r
}

// wait returns the exit status.
func (r *run) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
		return r.status
	case <-time.After(30 * time.Second):
		t.Fatalf("leasehold run did not end within 30 s; stderr:\n%s", r.stderr)
		return 0
	}
}

// until waits for ch, failing the test if the run ends first.
func (r *run) until(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-r.done:
		t.Fatalf("ended with %d too early; stderr:\n%s", r.status, r.stderr)
	}
}

// expect waits for the exit status and checks it.
func (r *run) expect(t *testing.T, want int) {
	t.Helper()
	if got := r.wait(t); got != want {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", got, want, r.stdout, r.stderr)
	}
}

func (r *run) logHas(t *testing.T, s string) {
	t.Helper()
	if !strings.Contains(r.stderr.String(), s) {
		t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
	}
}

// shell is a command that runs script with sh; $1, $2… are args.
func shell(script string, args ...string) []string {
	return append([]string{"sh", "-c", script, "sh"}, args...)
}

// trapTerm is a script that writes "$1" when it starts, writes "$2" and exits
// with status 7 on SIGTERM, and otherwise runs for a long time. "$1" is
// written once the sleep has started: the group's SIGTERM then ends the
// sleep too, so the wait returns even if the signal came before it began
// (when dash would run the trap only after the wait).
const trapTerm = `trap 'echo term > "$2"; exit 7' TERM; sleep 1000 & : > "$1"; wait`

// ignoreTerm is a script that writes "$1" when it starts and ignores SIGTERM.
const ignoreTerm = `trap '' TERM; sleep 1000 & : > "$1"; wait; sleep 1000`
