package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

var unittestRanRE = regexp.MustCompile(`(?m)^Ran (\d+) tests? in `)

// The Python client's own unittest suite (clients/python/tests) runs against
// real sidecars on each store: one open (with a declared task), one that
// wants a bearer token, one on a Unix socket over the open one's store; and
// its fence against the job's own databases: a SQLite file and a PostgreSQL
// database fenced by `leasehold fence install`, and one without the fence.
// Every test must run (a skip means the suite did not get its sidecars or
// databases) and pass.
func TestPythonClientPackage(t *testing.T) {
	t.Parallel()
	py := pythonWithPsycopg2(t)
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			runPythonClientSuite(t, py, kind.url(t), kind.url(t))
		})
	}
}

// runPythonClientSuite runs clients/python's suite against sidecars on
// openStore (the open one and the Unix socket's) and authStore (the one that
// wants a token).
func runPythonClientSuite(t *testing.T, py, openStore, authStore string) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("py-client-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A declared task, declared before the sidecar starts so that its first
	// read of the declarations has it: clients that give no ttl get its ttl.
	decl := leasecore.TaskDecl{Name: "py/declared", TTL: 7 * time.Second, MaxTTL: 10 * time.Second}
	if _, err := openService(t, openStore).CreateTask(t.Context(), decl, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	open := startSidecar(t, openStore)
	auth := startSidecar(t, authStore, "--token-file", tokenFile)
	// A third sidecar, on a Unix socket, shares the open one's store: what
	// a client does over the socket shows over TCP.
	sock := startSidecar(t, openStore, "--listen", "unix:"+socketPath(t))
	open.waitReady()
	auth.waitReady()
	sock.waitReady()

	// The job's own databases for tests/test_fence.py.
	fencedSQLite := filepath.Join(dir, "resource.db")
	if err := os.WriteFile(fencedSQLite, nil, 0o600); err != nil { // an empty file is an empty database
		t.Fatal(err)
	}
	fencedPG, barePG := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	fenceInstall(t, "sqlite:"+fencedSQLite)
	fenceInstall(t, fencedPG)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", "tests")
	cmd.Dir = filepath.Join("..", "clients", "python")
	cmd.Env = append(cleanEnv(),
		"PYTHONDONTWRITEBYTECODE=1",
		"LEASEHOLD_CLIENT_TEST_URL="+open.base,
		"LEASEHOLD_CLIENT_TEST_UNIX_URL="+sock.addr,
		"LEASEHOLD_CLIENT_TEST_AUTH_URL="+auth.base,
		"LEASEHOLD_CLIENT_TEST_TOKEN_FILE="+tokenFile,
		fmt.Sprintf("LEASEHOLD_CLIENT_TEST_DECLARED=%s=%d", decl.Name, decl.TTL.Milliseconds()),
		"LEASEHOLD_TEST_FENCE_SQLITE_PATH="+fencedSQLite,
		"LEASEHOLD_TEST_FENCE_PG_URL="+fencedPG,
		"LEASEHOLD_TEST_BARE_PG_URL="+barePG,
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest in clients/python: %v\n%s", err, out)
	}
	m := unittestRanRE.FindSubmatch(out)
	if m == nil || string(m[1]) == "0" {
		t.Fatalf("the unittest suite ran no tests:\n%s", out)
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatalf("the unittest suite skipped tests it should have run:\n%s", out)
	}
	t.Logf("clients/python: %s tests passed", m[1])
}

// pythonWithPsycopg2 is a python3 that can import psycopg2, the fence
// tests' PostgreSQL driver (the client itself needs none): the one on PATH,
// else Debian's /usr/bin/python3, which python3-psycopg2 installs it for
// (.ci/run does).
func pythonWithPsycopg2(t *testing.T) string {
	t.Helper()
	candidates := []string{python3(t), "/usr/bin/python3"}
	for _, py := range candidates {
		if exec.Command(py, "-c", "import psycopg2").Run() == nil {
			return py
		}
	}
	missingTool(t, fmt.Sprintf("none of %v can import psycopg2; CI needs it for the Python fence tests (Debian: python3-psycopg2)", candidates),
		fmt.Sprintf("none of %v can import psycopg2 (outside CI this skips): install Debian's python3-psycopg2 to run the Python client's tests", candidates))
	return ""
}
