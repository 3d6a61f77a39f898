package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

// The TypeScript client (clients/typescript) passes its own node --test suite
// against real sidecars: one on each store behind a bearer token (whose
// store declares a task with a max_ttl, for the prune lock's clamp), another
// on a Unix socket over the same store, a third over the same store that only
// tests/runs.test.js asks (its /metrics count that file's runs alone), one
// whose store is down (every lease call 503), and a spare one the suite stops
// with SIGTERM to see a keepalive holder told of the shutdown; and two
// PostgreSQL databases of a job's own, one fenced by `leasehold fence install`,
// for the fence helpers (tests/fence.test.js, through npm's pg).
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	node := nodeBin(t, "the TypeScript client's tests")
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			const token = "ts-client-secret"
			tokenFile := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			store := kind.url(t)
			// Declared before the sidecar starts, so that its first read of the
			// declarations has it.
			capped := leasecore.TaskDecl{Name: "ts-prune/capped", TTL: time.Minute, MaxTTL: 10 * time.Minute}
			if _, err := openService(t, store).CreateTask(t.Context(), capped, leasecore.Writer{}); err != nil {
				t.Fatal(err)
			}
			main := startSidecar(t, store, "--token-file", tokenFile)
			// On a Unix socket, over main's store, with its token.
			unix := startSidecar(t, store, "--token-file", tokenFile, "--listen", "unix:"+socketPath(t))
			runs := startSidecar(t, store, "--token-file", tokenFile)
			down := startSidecar(t, pgtest.ClosedURL(t))
			spare := startSidecar(t, "sqlite:"+filepath.Join(t.TempDir(), "spare.db"))
			main.waitReady()
			unix.waitReady()
			runs.waitReady()
			spare.waitReady()
			// The job's own databases for tests/fence.test.js: one with the fence
			// installed by the CLI, one without.
			fenced, bare := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
			fenceInstall(t, fenced)

			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec")
			cmd.Dir = filepath.Join("..", "clients", "typescript")
			cmd.Env = append(cleanEnv(),
				"LEASEHOLD_TEST_URL="+main.base,
				"LEASEHOLD_TEST_TOKEN="+token,
				"LEASEHOLD_TEST_DOWN_URL="+down.base,
				"LEASEHOLD_TEST_SPARE_URL="+spare.base,
				"LEASEHOLD_TEST_SPARE_PID="+strconv.Itoa(spare.proc.PID()),
				"LEASEHOLD_TEST_UNIX_URL="+unix.addr,
				"LEASEHOLD_TEST_RUNS_URL="+runs.base,
				"LEASEHOLD_TEST_FENCE_PG_URL="+fenced,
				"LEASEHOLD_TEST_BARE_PG_URL="+bare,
				fmt.Sprintf("LEASEHOLD_TEST_CAPPED_TASK=%s=%d", capped.Name, capped.MaxTTL.Milliseconds()),
			)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("node --test in clients/typescript: %v\n%s", err, out)
			}
			t.Logf("node --test:\n%s", out)
		})
	}
}

// nodeBin finds Node >= 20 for the tests named by purpose: missing or
// older, it skips outside CI (with what to install) and fails in CI.
func nodeBin(t *testing.T, purpose string) string {
	t.Helper()
	missing := func(why string) {
		missingTool(t, fmt.Sprintf("%s; CI needs Node >= 20 for %s", why, purpose), fmt.Sprintf("%s (outside CI this skips): install Node >= 20 to run %s", why, purpose))
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node not found")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		missing(fmt.Sprintf("node --version: %v", err))
	}
	version := strings.TrimSpace(string(out))
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	if n, err := strconv.Atoi(major); err != nil || n < 20 {
		missing("node is " + version)
	}
	return node
}

// The TypeScript client's hand-written declarations (clients/typescript/index.d.ts)
// type-check under the typescript its package.json pins, together with
// tests/usage.ts, which uses the public API (the prune-lock adapter included)
// as a TypeScript project would and marks the misuses the declarations must
// refuse (@ts-expect-error): `tsc --noEmit -p tsconfig.json` there. The pinned
// typescript comes from npm ci in clients/typescript (.ci/run runs it);
// without it the test skips outside CI, with what to run, and fails in CI.
func TestTypeScriptDeclarations(t *testing.T) {
	t.Parallel()
	nodeBin(t, "the TypeScript declarations' type check")
	dir := filepath.Join("..", "clients", "typescript")
	var pkg struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	readJSON(t, filepath.Join(dir, "package.json"), &pkg)
	pinned := pkg.DevDependencies["typescript"]
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(pinned) {
		t.Fatalf("clients/typescript/package.json: devDependencies.typescript is %q, want an exact version", pinned)
	}
	var lock struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	readJSON(t, filepath.Join(dir, "package-lock.json"), &lock)
	if got := lock.Packages["node_modules/typescript"].Version; got != pinned {
		t.Fatalf("clients/typescript/package-lock.json locks typescript %q, package.json pins %q: run npm install there", got, pinned)
	}
	missing := func(why string) {
		missingTool(t, why+"; CI needs it (.ci/run runs npm ci in clients/typescript)",
			why+" (outside CI this skips): run npm ci in clients/typescript")
	}
	var installed struct {
		Version string `json:"version"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "node_modules", "typescript", "package.json")); err != nil {
		missing("typescript is not installed in clients/typescript/node_modules")
	} else if err := json.Unmarshal(b, &installed); err != nil || installed.Version != pinned {
		missing(fmt.Sprintf("clients/typescript/node_modules has typescript %q, not the pinned %s", installed.Version, pinned))
	}
	npx, err := exec.LookPath("npx")
	if err != nil {
		missing("npx not found")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npx, "--no-install", "tsc", "--noEmit", "-p", "tsconfig.json")
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsc --noEmit -p tsconfig.json in clients/typescript (typescript %s): %v\n%s", pinned, err, out)
	}
}

// readJSON decodes the JSON file at path into v.
func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
