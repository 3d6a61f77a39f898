package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTokenRotation: a --token-file mounted the way Kubernetes mounts a
// Secret (token → ..data/token, ..data → a timestamped directory) is
// swapped for a new token under a running sidecar. The new token is
// accepted without a restart, the old one for the grace period
// (--token-grace), then refused.
func TestTokenRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	generation := func(name, token string) {
		t.Helper()
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "token"), []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	generation("..2026_12_04_01", "old-secret")
	tokenFile := filepath.Join(dir, "token")
	if err := os.Symlink("..data/token", tokenFile); err != nil {
		t.Fatal(err)
	}
	s := startSidecar(t, "sqlite:"+filepath.Join(t.TempDir(), "rotate.db"), "--token-file", tokenFile, "--token-grace", "3s")
	s.waitReady()
	status := func(token string) int { return s.callWithToken(token, http.MethodGet, "/v1/leases", nil).Status }
	if got := status("old-secret"); got != http.StatusOK {
		t.Fatalf("old token before the rotation: %d", got)
	}

	generation("..2026_12_04_02", "new-secret")
	waitUntil(t, "the new token to be accepted", func() bool { return status("new-secret") == http.StatusOK })
	// Within the grace period, which began when the sidecar read the new
	// file, the old token still works; the order of these two checks
	// cannot race, since the grace only ends after the new token works.
	waitUntil(t, "the old token to be refused after the grace period", func() bool { return status("old-secret") == http.StatusUnauthorized })
	if got := status("new-secret"); got != http.StatusOK {
		t.Errorf("new token after the grace period: %d", got)
	}
	if logs := s.logs.String(); !strings.Contains(logs, "credentials reloaded") || strings.Contains(logs, "old-secret") || strings.Contains(logs, "new-secret") {
		t.Errorf("the log must say the credentials were reloaded and never show a token:\n%s", logs)
	}
}

// leaseholdOK runs leasehold with args, failing the test unless it exits
// 0, and returns its stdout (trimmed) and stderr.
func leaseholdOK(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(leaseholdBin, args...)
	cmd.Env = cleanEnv()
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("leasehold %q: %v\n%s", args, err, errOut.String())
	}
	return strings.TrimSpace(string(out)), errOut.String()
}

// TestScopedCredentialsCLI: credentials made with `leasehold credentials
// new` into a file that a running sidecar serves: a scoped token holds its
// own tasks, is refused another team's (403 naming the credential), and a
// credential added to the file later works without a restart.
func TestScopedCredentialsCLI(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "credentials.json")
	newCred := func(args ...string) string {
		t.Helper()
		token, stderr := leaseholdOK(t, append([]string{"credentials", "new", "--file", file}, args...)...)
		if strings.Contains(stderr, token) {
			t.Errorf("the token is printed twice: stderr has it too")
		}
		return token
	}
	billing := newCred("--name", "billing", "--prefix", "billing/", "--right", "hold")
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), billing) {
		t.Fatal("the credentials file holds the token itself, not its hash")
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file mode %v (%v), want 0600", fi.Mode(), err)
	}

	s := startSidecar(t, "sqlite:"+filepath.Join(t.TempDir(), "creds.db"), "--credentials-file", file)
	s.waitReady()
	if r := s.callWithToken(billing, http.MethodPost, "/v1/leases/billing%2Fnightly/claim", map[string]any{"owner": "b"}); r.Status != http.StatusOK {
		t.Fatalf("billing claims its own task: %d %v", r.Status, r.Body)
	}
	r := s.callWithToken(billing, http.MethodPost, "/v1/leases/payroll%2Frun/claim", map[string]any{"owner": "b"})
	if r.Status != http.StatusForbidden || !strings.Contains(fmt.Sprint(r.Body["detail"]), `credential "billing"`) ||
		!strings.Contains(fmt.Sprint(r.Body["detail"]), `"payroll/run"`) {
		t.Fatalf("billing claims payroll/run: %d %v, want 403 naming the credential and the task", r.Status, r.Body)
	}

	payroll := newCred("--name", "payroll", "--prefix", "payroll/", "--right", "hold")
	waitUntil(t, "the added credential to be accepted", func() bool {
		return s.callWithToken(payroll, http.MethodPost, "/v1/leases/payroll%2Frun/claim", map[string]any{"owner": "p"}).Status == http.StatusOK
	})
	for _, tok := range []string{billing, payroll} {
		if strings.Contains(s.logs.String(), tok) {
			t.Errorf("a token reached the sidecar's log")
		}
	}
}

// waitUntil polls cond until it holds, failing the test after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCredentialsRevokeCLI: `leasehold credentials revoke` under a running
// sidecar with the default 2-minute grace: within one re-read the old
// token is refused (no grace), the `leasehold run` it was holding a lease
// for is told lost and stops its child (exit 70), and the credential's
// new token works. A second edit right after it (another credential
// added 0.2 s later, inside the same re-read) does not bring the old token
// back, as deleting and re-adding the entry would have.
func TestCredentialsRevokeCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "credentials.json")
	cli := func(args ...string) string {
		t.Helper()
		out, _ := leaseholdOK(t, args...)
		return out
	}
	leaked := cli("credentials", "new", "--file", file, "--name", "billing", "--prefix", "billing/", "--right", "hold")
	s := startSidecar(t, "sqlite:"+filepath.Join(dir, "revoke.db"), "--credentials-file", file)
	s.waitReady()

	tokenFile := filepath.Join(dir, "leaked-token")
	if err := os.WriteFile(tokenFile, []byte(leaked), 0o600); err != nil {
		t.Fatal(err)
	}
	run := exec.Command(leaseholdBin, "run", "--addr", s.addr, "--token-file", tokenFile, "--task", "billing/job", "--ttl", "3s", "--", "sleep", "600")
	run.Env = cleanEnv()
	var runOut strings.Builder
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- run.Wait() }()
	t.Cleanup(func() { _ = run.Process.Kill() })
	waitUntil(t, "leasehold run to hold billing/job", func() bool {
		r := s.callWithToken(leaked, http.MethodGet, "/v1/leases/billing%2Fjob", nil)
		return r.Status == http.StatusOK && r.Body["held"] == true
	})

	fresh := cli("credentials", "revoke", "--file", file, "--name", "billing")
	time.Sleep(200 * time.Millisecond)
	cli("credentials", "new", "--file", file, "--name", "dash", "--prefix", "*", "--right", "read")
	waitUntil(t, "the new token to be accepted", func() bool {
		return s.callWithToken(fresh, http.MethodGet, "/v1/leases", nil).Status == http.StatusOK
	})
	if got := s.callWithToken(leaked, http.MethodGet, "/v1/leases", nil).Status; got != http.StatusUnauthorized {
		t.Errorf("the revoked token after the re-read: %d, want 401 at once (no grace)", got)
	}
	select {
	case err := <-runDone:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 70 {
			t.Errorf("leasehold run under the revoked token: %v, want exit 70 (lost)\n%s", err, runOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("leasehold run went on after its token was revoked:\n%s", runOut.String())
	}
	if strings.Contains(s.logs.String(), leaked) || strings.Contains(s.logs.String(), fresh) {
		t.Error("a token reached the sidecar's log")
	}
}
