package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// storeKinds are the two stores every end-to-end case runs on. Each call
// returns a fresh store URL (a new SQLite file, a new PostgreSQL database).
var storeKinds = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.NewDatabase(t) }},
}

// Two sidecar processes on one store, 32 clients claiming one task at once
// through both: exactly one holder, and every refusal names it.
func TestTwoSidecarsOneHolder(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			a, b := startPair(t, kind.url(t))

			const clients = 32
			results := make([]response, clients)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range clients {
				sc := a
				if i%2 == 1 {
					sc = b
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					results[i] = sc.call("POST", "/v1/leases/nightly-report/claim", map[string]any{
						"owner": fmt.Sprintf("worker-%02d", i), "ttl_ms": 60000,
					})
				}()
			}
			close(start)
			wg.Wait()

			winner := ""
			for i, r := range results {
				switch r.Status {
				case http.StatusOK:
					if winner != "" {
						t.Fatalf("two holders: %s and worker-%02d", winner, i)
					}
					winner = r.lease(t)["owner"].(string)
				case http.StatusConflict:
				default:
					t.Fatalf("claim %d: status %d, want 200 or 409: %s", i, r.Status, r.Raw)
				}
			}
			if winner == "" {
				t.Fatal("nobody acquired the lease")
			}
			for i, r := range results {
				if r.Status != http.StatusConflict {
					continue
				}
				holder, _ := r.Body["holder"].(map[string]any)
				if r.Body["reason"] != "held" || holder == nil || holder["owner"] != winner {
					t.Errorf("refusal %d does not name the holder %q: %s", i, winner, r.Raw)
				}
			}

			// Both sidecars agree on the holder; release through the other
			// sidecar is owner-checked, and the next holder gets a higher token.
			got := b.call("GET", "/v1/leases/nightly-report", nil)
			if got.Body["held"] != true || got.lease(t)["owner"] != winner {
				t.Fatalf("sidecar b sees %s, want held by %s", got.Raw, winner)
			}
			first := got.token(t)
			if r := a.call("POST", "/v1/leases/nightly-report/release", map[string]any{"owner": "not-" + winner}); r.Body["released"] != false {
				t.Fatalf("release by a non-holder: %s, want released false", r.Raw)
			}
			if r := b.call("POST", "/v1/leases/nightly-report/release", map[string]any{"owner": winner}); r.Body["released"] != true {
				t.Fatalf("release by the holder: %s, want released true", r.Raw)
			}
			next := a.call("POST", "/v1/leases/nightly-report/claim", map[string]any{"owner": "late-comer"})
			if next.Status != http.StatusOK || next.token(t) != first+1 {
				t.Fatalf("claim after release: %s, want 200 with token %d", next.Raw, first+1)
			}
		})
	}
}

// The fencing counter survives the death of every process: a sidecar killed
// with SIGKILL and started again hands out the next token, not a repeat.
func TestTokenSurvivesRestart(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			store := kind.url(t)
			s := startSidecar(t, store)
			s.waitReady()
			var last int64
			for i := range 3 {
				r := s.call("POST", "/v1/leases/billing%2Fnightly/claim", map[string]any{"owner": fmt.Sprintf("w%d", i)})
				if r.Status != http.StatusOK {
					t.Fatalf("claim %d: %s", i, r.Raw)
				}
				if r.lease(t)["task"] != "billing/nightly" {
					t.Fatalf("encoded task name came back as %v", r.lease(t)["task"])
				}
				last = r.token(t)
				s.call("POST", "/v1/leases/billing%2Fnightly/release", map[string]any{"owner": fmt.Sprintf("w%d", i)})
			}
			s.stop(syscall.SIGKILL)

			s2 := startSidecar(t, store)
			s2.waitReady()
			r := s2.call("POST", "/v1/leases/billing%2Fnightly/claim", map[string]any{"owner": "after-restart"})
			if r.Status != http.StatusOK || r.token(t) != last+1 {
				t.Fatalf("claim after restart: %s, want token %d", r.Raw, last+1)
			}
		})
	}
}

// A sidecar whose store cannot be reached says unavailable (503), never held,
// and is not ready.
func TestUnreachableStoreIsUnavailable(t *testing.T) {
	t.Parallel()
	s := startSidecar(t, pgtest.ClosedURL(t))
	resp, err := http.Get(s.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz = %d, want 503", resp.StatusCode)
	}
	r := s.call("POST", "/v1/leases/prune/claim", map[string]any{"owner": "w1"})
	if r.Status != http.StatusServiceUnavailable || r.Body["acquired"] != false || r.Body["reason"] != "unavailable" {
		t.Fatalf("claim on an unreachable store: %d %s, want 503 unavailable", r.Status, r.Raw)
	}
	if d, _ := r.Body["detail"].(string); d == "" {
		t.Errorf("unavailable answer has no detail: %s", r.Raw)
	}
	if code := s.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}

// SIGTERM stops a serving sidecar cleanly (exit 0).
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	s := startSidecar(t, "sqlite:"+filepath.Join(t.TempDir(), "l.db"))
	s.waitReady()
	if r := s.call("POST", "/v1/leases/t1/claim", map[string]any{"owner": "w"}); r.Status != http.StatusOK {
		t.Fatalf("claim: %s", r.Raw)
	}
	if code := s.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0\n%s", code, s.logs.String())
	}
}

// `leasehold migrate` creates the schema, is idempotent, and fails clearly on
// an unreachable store.
func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			store := kind.url(t)
			for i := range 2 {
				out, err := runLeasehold("migrate", "--store", store)
				if err != nil {
					t.Fatalf("migrate run %d: %v\n%s", i+1, err, out)
				}
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		out, err := runLeasehold("migrate", "--store", pgtest.ClosedURL(t))
		if err == nil {
			t.Fatalf("migrate on a closed port succeeded:\n%s", out)
		}
		if !strings.Contains(strings.ToLower(out), "unavailable") && !strings.Contains(strings.ToLower(out), "refused") {
			t.Errorf("migrate failure does not say why:\n%s", out)
		}
	})
}

// A client in another language (python3, standard library only) claims,
// renews, sees a rival refused, and releases.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	py := python3(t)
	s := startSidecar(t, "sqlite:"+filepath.Join(t.TempDir(), "l.db"))
	s.waitReady()
	cmd := exec.Command(py, "testdata/client.py", s.base)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python client: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "ok") {
		t.Fatalf("python client did not report ok:\n%s", out)
	}
}

func runLeasehold(args ...string) (string, error) {
	cmd := exec.Command(leaseholdBin, args...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The example keepalive client in Python holds a lease while it works, sees
// renewals, and releases it by hanging up.
func TestPythonKeepaliveExample(t *testing.T) {
	t.Parallel()
	py := python3(t)
	s := startSidecar(t, "sqlite:"+filepath.Join(t.TempDir(), "l.db"))
	s.waitReady()
	out, err := exec.Command(py, "../examples/python/keepalive.py", s.base, "py/report", "1.5", "--ttl-ms", "1000").CombinedOutput()
	if err != nil {
		t.Fatalf("example client: %v\n%s", err, out)
	}
	for _, want := range []string{"acquired: ", "renewed: ", "working as ", "with fencing token 1", "done"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("example output lacks %q:\n%s", want, out)
		}
	}
	s.waitFree("py%2Freport")
	// While a holder streams, the example exits 75.
	r := s.call("POST", "/v1/leases/py%2Freport/claim", map[string]any{"owner": "other", "ttl_ms": 60000})
	if r.Status != http.StatusOK {
		t.Fatalf("claim: %s", r.Raw)
	}
	cmd := exec.Command(py, "../examples/python/keepalive.py", s.base, "py/report", "1")
	if out, err := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 75 {
		t.Fatalf("example on a held task: %v (exit %d), want exit 75\n%s", err, cmd.ProcessState.ExitCode(), out)
	}
}

// python3 finds the interpreter for the non-Go client tests: missing, it
// skips outside CI (with what to install) and fails in CI.
func python3(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		missingTool(t, "python3 not found; CI needs it for the non-Go client tests", "python3 not found (outside CI this skips): install python3 to run the non-Go client tests")
	}
	return py
}

// startPair starts two sidecars on one store and waits until both are ready.
func startPair(t *testing.T, store string) (a, b *sidecar) {
	t.Helper()
	a, b = startSidecar(t, store), startSidecar(t, store)
	a.waitReady()
	b.waitReady()
	return a, b
}
