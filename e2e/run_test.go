package e2e

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `leasehold run` through a real sidecar: the child sees the lease in its
// environment, its exit code comes back, a held task exits 75 without
// running the child, and the lease is released when the child exits.
func TestRunThroughTheSidecar(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			s := startSidecar(t, kind.url(t))
			s.waitReady()

			cmd := exec.Command(leaseholdBin, "run", "--addr", s.base, "--task", "billing/nightly", "--ttl", "2s", "--owner", "job-1",
				"--", "sh", "-c", `echo "$LEASEHOLD_TASK $LEASEHOLD_OWNER $LEASEHOLD_TOKEN"; exit 3`)
			cmd.Env = cleanEnv()
			out, _ := cmd.Output()
			if code := cmd.ProcessState.ExitCode(); code != 3 {
				t.Fatalf("exit code %d, want the child's 3; output %q", code, out)
			}
			if got := strings.TrimSpace(string(out)); got != "billing/nightly job-1 1" {
				t.Fatalf("child saw %q, want task, owner and token 1", got)
			}
			s.waitFree("billing%2Fnightly")

			if r := s.call("POST", "/v1/leases/billing%2Fnightly/claim", map[string]any{"owner": "other", "ttl_ms": 60000}); r.Status != http.StatusOK {
				t.Fatalf("claim: %s", r.Raw)
			}
			marker := filepath.Join(t.TempDir(), "ran")
			held := exec.Command(leaseholdBin, "run", "--addr", s.base, "--task", "billing/nightly", "--", "touch", marker)
			held.Env = cleanEnv()
			_ = held.Run()
			if code := held.ProcessState.ExitCode(); code != 75 {
				t.Fatalf("exit code on a held task %d, want 75", code)
			}
			if _, err := exec.Command("test", "-e", marker).Output(); err == nil {
				t.Fatal("the child ran although the task was held")
			}
		})
	}
}
