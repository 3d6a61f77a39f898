package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/readonly"
)

// refusesEverything checks that s answers readyz and every lease write 503
// unavailable with a detail that mentions why, and grants nothing.
func refusesEverything(t *testing.T, s *sidecar, task string, token int64, why string) {
	t.Helper()
	answers := map[string]response{
		"readyz":      s.call("GET", "/readyz", nil),
		"claim other": s.call("POST", "/v1/leases/"+task+"-other/claim", map[string]any{"owner": "w2", "ttl_ms": 60000}),
		"claim held":  s.call("POST", "/v1/leases/"+task+"/claim", map[string]any{"owner": "w2", "ttl_ms": 60000}),
		"renew":       s.call("POST", "/v1/leases/"+task+"/renew", map[string]any{"owner": "w1", "token": token, "ttl_ms": 60000}),
		"release":     s.call("POST", "/v1/leases/"+task+"/release", map[string]any{"owner": "w1", "token": token}),
	}
	for what, r := range answers {
		if r.Status != http.StatusServiceUnavailable {
			t.Errorf("%s: %d, want 503: %s", what, r.Status, r.Raw)
			continue
		}
		if !strings.Contains(r.Raw, why) {
			t.Errorf("%s: the answer does not say %q: %s", what, why, r.Raw)
		}
	}
}

// TestSQLiteFileDeletedWhileServing removes the database file under a
// running sidecar. It must answer 503 from then on, readyz included, and
// never grant again, also once a second sidecar has started a new file on
// the path and granted there.
func TestSQLiteFileDeletedWhileServing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	first := startSidecar(t, "sqlite:"+path)
	first.waitReady()
	r := first.call("POST", "/v1/leases/job/claim", map[string]any{"owner": "w1", "ttl_ms": 60000})
	if r.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.Status, r.Raw)
	}
	token := r.token(t)

	// rm leasehold.db*: the file and its -wal and -shm. (Had only the
	// database file gone, SQLite would refuse a new one beside the old
	// -wal, "disk I/O error", and a second sidecar would answer 503.)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil {
			t.Fatal(err)
		}
	}
	refusesEverything(t, first, "job", token, "was deleted or replaced while open; restart the sidecar")

	// A second sidecar on the path starts a new file and grants from it
	// (the old grant is lost with the old file: token 1 again); the first
	// stays refused.
	second := startSidecar(t, "sqlite:"+path)
	second.waitReady()
	if r := second.call("POST", "/v1/leases/job/claim", map[string]any{"owner": "w3", "ttl_ms": 60000}); r.Status != http.StatusOK {
		t.Errorf("claim on the new file: %d %s", r.Status, r.Raw)
	}
	refusesEverything(t, first, "job", token, "was deleted or replaced while open")

	// The first one's shutdown leaves the new file, and its -wal and -shm,
	// alone: a third sidecar sees the second's grant.
	if code := first.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("first sidecar exited %d after SIGTERM", code)
	}
	third := startSidecar(t, "sqlite:"+path)
	third.waitReady()
	r = third.call("POST", "/v1/leases/job/claim", map[string]any{"owner": "w4", "ttl_ms": 60000})
	if holder, _ := r.Body["holder"].(map[string]any); r.Status != http.StatusConflict || holder["owner"] != "w3" {
		t.Errorf("claim through a third sidecar: %d %s, want 409 held by w3", r.Status, r.Raw)
	}
	for _, s := range []*sidecar{second, third} {
		if code := s.stop(syscall.SIGTERM); code != 0 {
			t.Errorf("sidecar %s exited %d after SIGTERM", s.base, code)
		}
	}
}

// TestSQLiteFileNotWritable makes the database file read-only under a
// running sidecar: it is no longer ready, and claims are unavailable.
func TestSQLiteFileNotWritable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := startSidecar(t, "sqlite:"+path)
	s.waitReady()
	r := s.call("POST", "/v1/leases/job/claim", map[string]any{"owner": "w1", "ttl_ms": 60000})
	if r.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.Status, r.Raw)
	}
	readonly.Make(t, path)
	refusesEverything(t, s, "job", r.token(t), "is not writable by this process")
}

// TestServeRefusesAMissingDirectory: an SQLite path in a directory that
// does not exist is not waited out: serve exits 69 (the store is
// unavailable, exitcode's table) and says why.
func TestServeRefusesAMissingDirectory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, leaseholdBin, "serve", "--listen", "127.0.0.1:0", "--store", "sqlite:"+filepath.Join(t.TempDir(), "missing", "leasehold.db"))
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitcode.Unavailable {
		t.Fatalf("serve on a missing directory: %v, want exit %d\n%s", err, exitcode.Unavailable, out)
	}
	if !strings.Contains(string(out), "cannot open the database file") {
		t.Errorf("serve does not say why:\n%s", out)
	}
}
