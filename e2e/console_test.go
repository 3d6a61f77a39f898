package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// TestConsole drives the web console (/ui/) in headless Chromium: the
// node --test suite in e2e/console (playwright-core over Debian's chromium,
// never a downloaded browser) against a real sidecar behind a bearer token,
// over a store with declared tasks and a retention policy. It claims and
// releases through the API and watches the page follow. With
// LEASEHOLD_CONSOLE_SCREENSHOT set (make screenshot), the suite also saves
// a screenshot of the console there.
func TestConsole(t *testing.T) {
	t.Parallel()
	node := nodeBin(t, "the web console's Chromium test")
	chromium := chromiumBin(t)
	dir := filepath.Join("console")
	playwrightCore(t, dir)

	const token = "console-secret"
	tmp := t.TempDir()
	tokenFile := filepath.Join(tmp, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := "sqlite:" + filepath.Join(tmp, "console.db")
	svc := openService(t, store)
	ctx := t.Context()
	if _, err := svc.CreatePolicy(ctx, leasecore.RetentionPolicy{Name: "audit", KeepFor: 90 * 24 * time.Hour, KeepLast: 500}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []leasecore.TaskDecl{
		{Name: "nightly-report", TTL: 30 * time.Second, MaxTTL: 10 * time.Minute, Description: "the nightly PDF report"},
		{Name: "billing/invoices", TTL: 2 * time.Minute, Description: "monthly invoice run", RetentionPolicy: "audit"},
		{Name: "telescope:prune", TTL: 90 * time.Second, Description: "entries pruner", RetentionPolicy: "audit"},
	} {
		if _, err := svc.CreateTask(ctx, d, leasecore.Writer{}); err != nil {
			t.Fatal(err)
		}
	}
	// History recorded for a named credential, as a sidecar's requests
	// are: the console's history shows whose it was.
	invoices, err := svc.Claim(ctx, leasecore.ClaimParams{Task: "billing/invoices", Owner: "billing-7f9c#1#q1", TTL: time.Minute, Credential: "billing-ci"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := svc.Release(ctx, leasecore.ReleaseParams{Task: "billing/invoices", Owner: invoices.Owner, Token: invoices.Token, Credential: "billing-ci"}); !ok || err != nil {
		t.Fatalf("release billing/invoices = %v, %v", ok, err)
	}
	s := startSidecar(t, store, "--token-file", tokenFile)
	// A second sidecar on the same file, without a token: the page asks for none.
	open := startSidecar(t, store)
	// A third, whose credential holds leases but has no admin right: the
	// page offers no force release.
	credentials := filepath.Join(tmp, "credentials.json")
	cmd := exec.Command(leaseholdBin, "credentials", "new", "--file", credentials, "--name", "viewer", "--prefix", "*", "--right", "hold")
	cmd.Env = cleanEnv()
	viewerToken, err := cmd.Output()
	if err != nil {
		t.Fatalf("leasehold credentials new: %v", err)
	}
	viewer := startSidecar(t, store, "--credentials-file", credentials)
	s.waitReady()
	open.waitReady()
	viewer.waitReady()
	// The listening line says where the console is.
	if want := " console=" + s.base + "/ui/ "; !strings.Contains(s.logs.String(), want) {
		t.Errorf("the sidecar's listening line lacks %s:\n%s", want, s.logs.String())
	}

	runCtx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd = exec.CommandContext(runCtx, node, "--test", "--test-reporter=spec", "console.test.js")
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(),
		"LEASEHOLD_CONSOLE_URL="+s.base,
		"LEASEHOLD_CONSOLE_TOKEN="+token,
		"LEASEHOLD_CONSOLE_OPEN_URL="+open.base,
		"LEASEHOLD_CONSOLE_VIEWER_URL="+viewer.base,
		"LEASEHOLD_CONSOLE_VIEWER_TOKEN="+strings.TrimSpace(string(viewerToken)),
		"LEASEHOLD_CHROMIUM="+chromium,
	)
	if shot := os.Getenv("LEASEHOLD_CONSOLE_SCREENSHOT"); shot != "" {
		cmd.Env = append(cmd.Env, "LEASEHOLD_CONSOLE_SCREENSHOT="+shot)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test in e2e/console: %v\n%s", err, out)
	}
	t.Logf("node --test:\n%s", out)
}

// TestConsoleFollowsRestore: the web console (e2e/console/restore.test.js
// in headless Chromium) over a SQLite store that is restored from an older
// copy while the page follows it. The sidecar is stopped, the older file
// put back and the sidecar started again on the same address, when the
// page asks (POST /restore to a control server of this test's): the page
// must say the history went back, drop what the restore undid, and follow
// the events written after the restore, whose ids it had seen before.
func TestConsoleFollowsRestore(t *testing.T) {
	t.Parallel()
	node := nodeBin(t, "the web console's Chromium test")
	chromium := chromiumBin(t)
	dir := filepath.Join("console")
	playwrightCore(t, dir)

	tmp := t.TempDir()
	path, backup := filepath.Join(tmp, "console.db"), filepath.Join(tmp, "backup.db")
	store := "sqlite:" + path
	listen := fmt.Sprintf("127.0.0.1:%d", freeLocalPort(t))
	var mu sync.Mutex // guards s
	s := startSidecar(t, store, "--listen", listen)
	s.waitReady()
	claimRelease(t, s, "rs-kept")
	if code := s.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("sidecar exited %d on SIGTERM", code)
	}
	copyDB(t, path, backup)
	s = startSidecar(t, store, "--listen", listen)
	s.waitReady()
	// What the restore will undo: a lease the page shows, and events that
	// take the ids the restored store hands out again.
	claimRelease(t, s, "rs-gone-1", "rs-gone-2", "rs-gone-3", "rs-gone-4", "rs-gone-5")
	if r := s.call("POST", "/v1/leases/rs-lost/claim", map[string]any{"owner": "before-restore", "ttl_ms": 600000}); r.Status != 200 {
		t.Fatalf("claim rs-lost: %d %v", r.Status, r.Body)
	}

	restore := func() error {
		mu.Lock()
		defer mu.Unlock()
		_ = s.proc.Signal(syscall.SIGTERM)
		select {
		case <-s.proc.Done():
		case <-time.After(30 * time.Second):
			return fmt.Errorf("the sidecar did not stop within 30 s")
		}
		if err := copyDBFiles(backup, path); err != nil {
			return err
		}
		next, err := launchSidecar(t, store, "--listen", listen)
		if err != nil {
			return err
		}
		s = next
		return awaitReady(s.base, 30*time.Second)
	}
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/restore" {
			http.NotFound(w, r)
			return
		}
		if err := restore(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "restored")
	}))
	t.Cleanup(control.Close)

	runCtx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, node, "--test", "--test-reporter=spec", "restore.test.js")
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(),
		"LEASEHOLD_CONSOLE_URL=http://"+listen,
		"LEASEHOLD_CONSOLE_CONTROL="+control.URL,
		"LEASEHOLD_CHROMIUM="+chromium,
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test restore.test.js in e2e/console: %v\n%s", err, out)
	}
	t.Logf("node --test:\n%s", out)
}

// chromiumBin finds Debian's chromium: missing, it skips outside CI (with
// what to install) and fails in CI.
func chromiumBin(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	missingTool(t, "chromium not found; CI needs Debian's chromium package for the web console's test (.ci/run installs it as root)", "chromium not found (outside CI this skips): install Debian's chromium package (apt-get install -y chromium) to run the web console's test")
	return ""
}

// playwrightCore makes sure dir/node_modules has playwright-core, running
// npm ci from dir's package-lock.json when it has not: missing and not
// installable, it skips outside CI (with what to run) and fails in CI.
func playwrightCore(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err == nil {
		return
	}
	fail := func(why string) {
		missingTool(t, fmt.Sprintf("%s; CI needs playwright-core in e2e/console/node_modules (npm ci there; .ci/run does it)", why), fmt.Sprintf("%s (outside CI this skips): run npm ci in e2e/console to install playwright-core", why))
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		fail("playwright-core is not installed and npm is not found")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	// playwright-core downloads no browser on install; the variable makes sure.
	cmd.Env = append(os.Environ(), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		fail("npm ci in e2e/console: " + err.Error() + "\n" + string(out))
	}
}

// TestCrossSiteBrowser: other web pages against a sidecar with no token, in
// headless Chromium (e2e/console/crosssite.test.js): pages of another origin
// try an iframe, an img, a form, fetch and EventSource on the claim and
// keepalive routes, and a page rebound to the sidecar's address calls it as
// same-origin. No lease, token or history event may result, and the
// sidecar's console keeps working.
func TestCrossSiteBrowser(t *testing.T) {
	t.Parallel()
	node := nodeBin(t, "the cross-site Chromium test")
	chromium := chromiumBin(t)
	dir := filepath.Join("console")
	playwrightCore(t, dir)

	s := startSidecar(t, "sqlite:"+filepath.Join(t.TempDir(), "crosssite.db"))
	s.waitReady()
	runCtx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, node, "--test", "--test-reporter=spec", "crosssite.test.js")
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "LEASEHOLD_SIDECAR_URL="+s.base, "LEASEHOLD_CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test crosssite.test.js: %v\n%s", err, out)
	}
	t.Logf("node --test:\n%s", out)
}
