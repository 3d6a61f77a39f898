// Package examples_test runs the client examples that the README and docs/ show (Go, Python,
// TypeScript) as a user would, each as its own program against a real sidecar, and checks what
// they print and that they leave the task free. The root module's TestDocsShowExamples checks
// that the docs show each file verbatim.
package examples_test

import (
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the fenced examples' databases, read back
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/fence"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar"
	_ "modernc.org/sqlite"
)

// The task every example holds.
const task = "nightly-report"

// serve starts a fresh sidecar (SQLite, no token, nothing declared), as `make run` is on first
// start, and returns its address.
func serve(t *testing.T) string {
	t.Helper()
	return testsidecar.Serve(t, sidecar.Options{Store: testsidecar.OpenStore(t, testsidecar.SQLiteURL(t))}).URL
}

// tool finds a program the examples need: outside CI a test without it skips, saying what to
// install; with CI set it fails.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found, and CI never skips: install it to run the examples", name)
		}
		t.Skipf("%s not found (outside CI this skips): install it to run the examples", name)
	}
	return p
}

// run runs an example to the end with LEASEHOLD_ADDR set to addr (and no other LEASEHOLD_*
// variable from the developer's shell) and returns what it printed, stdout and stderr together.
func run(t *testing.T, dir, addr string, extraEnv []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "LEASEHOLD_ADDR="+addr), extraEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// expectLines fails unless out holds each pattern, in order, each on its own line.
func expectLines(t *testing.T, what, out string, patterns ...string) {
	t.Helper()
	re := "(?m)"
	for _, p := range patterns {
		re += "^" + p + "$[\\s\\S]*"
	}
	if !regexp.MustCompile(re).MatchString(out) {
		t.Errorf("%s printed:\n%s\nwant lines matching, in order:\n%s", what, out, strings.Join(patterns, "\n"))
	}
}

// expectFree waits until the example has released the task: its newest history event is a
// release, so a lease left to run out (an expired event) fails. A keepalive client releases by
// hanging up, which the sidecar acts on as soon as it sees it.
func expectFree(t *testing.T, addr string) {
	t.Helper()
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	var newest []leasecore.Event
	testsidecar.WaitFor(t, task+" released or expired", func() bool {
		lease, err := c.Get(t.Context(), task)
		if err != nil || lease != nil {
			return false
		}
		newest, err = c.History(t.Context(), task, 1)
		return err == nil
	})
	if len(newest) != 1 || newest[0].Kind != leasecore.EventReleased {
		t.Errorf("the example did not release %s: its newest history event is %+v", task, newest)
	}
}

// holdElsewhere has another owner hold the task for a minute, as another replica would.
func holdElsewhere(t *testing.T, addr string) {
	t.Helper()
	c, err := client.New(addr, client.WithOwner("other-replica"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(t.Context(), client.ClaimParams{Task: task, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

func TestGoClientExample(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "goclient")
	if out, err := exec.Command("go", "build", "-o", bin, "./goclient").CombinedOutput(); err != nil {
		t.Fatalf("go build ./goclient: %v\n%s", err, out)
	}
	addr := serve(t)
	expectLines(t, "goclient", run(t, ".", addr, nil, bin), `.* running under token 1`)
	expectFree(t, addr)

	holdElsewhere(t, addr)
	expectLines(t, "goclient, the task held elsewhere", run(t, ".", addr, nil, bin), `.* another replica runs it`)
}

// fencedDB makes the job's database the fenced examples write to, fenced as their docs say
// (leasehold fence install applies fence.Install's DDL): a fresh PostgreSQL database, or an
// SQLite file (created empty, as touch does). It returns the database's URL, as leasehold fence
// install --db names it, and a connection to read it back.
func fencedDB(t *testing.T, d fence.Dialect) (string, *sql.DB) {
	t.Helper()
	url, driver, dsn := "", "pgx", ""
	if d == fence.SQLite {
		path := filepath.Join(t.TempDir(), "reports.db")
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		url, driver, dsn = "sqlite:"+path, "sqlite", "file:"+path+"?_pragma=busy_timeout(10000)"
	} else {
		url = pgtest.NewDatabase(t)
		dsn = url
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := fence.Install(t.Context(), db, d); err != nil {
		t.Fatal(err)
	}
	return url, db
}

// expectReports checks that the fenced example's table holds n rows, the highest under token.
func expectReports(t *testing.T, db *sql.DB, n, token int) {
	t.Helper()
	var rows, highest int
	if err := db.QueryRow(`SELECT count(*), max(token) FROM reports`).Scan(&rows, &highest); err != nil {
		t.Fatal(err)
	}
	if rows != n || highest != token {
		t.Errorf("reports holds %d rows, the highest under token %d; want %d, under token %d", rows, highest, n, token)
	}
}

// TestGoFencedExample runs examples/gofenced on each database it names: a PostgreSQL database
// and an SQLite file, each fenced by leasehold fence install's DDL.
func TestGoFencedExample(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "gofenced")
	if out, err := exec.Command("go", "build", "-o", bin, "./gofenced").CombinedOutput(); err != nil {
		t.Fatalf("go build ./gofenced: %v\n%s", err, out)
	}
	for _, d := range []fence.Dialect{fence.Postgres, fence.SQLite} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			url, db := fencedDB(t, d)
			addr := serve(t)
			expectLines(t, "gofenced", run(t, ".", addr, nil, bin, url), `.* report written under fencing token 1`)
			expectFree(t, addr)
			// A newer holder has written meanwhile (the fence holds its token, 5): the next
			// run's token, 2, is refused and its row rolled back.
			if _, err := db.Exec(`UPDATE leasehold_fence SET token = 5 WHERE task = 'nightly-report'`); err != nil {
				t.Fatal(err)
			}
			expectLines(t, "gofenced, a newer holder has written", run(t, ".", addr, nil, bin, url),
				`.* stopped: .*stale fencing token 2 .*5.*`)
			expectFree(t, addr)
			expectReports(t, db, 1, 1)
		})
	}
}

func TestGoLibraryExample(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "golib")
	if out, err := exec.Command("go", "build", "-o", bin, "./golib").CombinedOutput(); err != nil {
		t.Fatalf("go build ./golib: %v\n%s", err, out)
	}
	dir := t.TempDir() // its store is ./leasehold.db
	out := run(t, dir, "", nil, bin)
	expectLines(t, "golib", out,
		`.* store sqlite:\./leasehold\.db`,
		`.* acquired nightly-report, token 1`,
		`.* ran=true err=<nil>`)
	// A second run finds the store as the first left it: both leases released.
	expectLines(t, "golib, run again", run(t, dir, "", nil, bin),
		`.* acquired nightly-report, token 3`,
		`.* ran=true err=<nil>`)
}

func TestPythonExamples(t *testing.T) {
	t.Parallel()
	python := tool(t, "python3")
	path := []string{"PYTHONPATH=clients/python"} // from the repository root, as the docs run them
	t.Run("claim", func(t *testing.T) {
		t.Parallel()
		addr := serve(t)
		expectLines(t, "claim.py", run(t, "..", addr, path, python, "examples/python/claim.py"),
			`part 1 written under fencing token 1`,
			`part 2 written under fencing token 1`)
		expectFree(t, addr)
		holdElsewhere(t, addr)
		expectLines(t, "claim.py, the task held elsewhere", run(t, "..", addr, path, python, "examples/python/claim.py"),
			`other-replica has it for another \d+ ms`)
	})
	t.Run("run", func(t *testing.T) {
		t.Parallel()
		addr := serve(t)
		expectLines(t, "run.py", run(t, "..", addr, path, python, "examples/python/run.py"),
			`header written under fencing token 1`,
			`rows written under fencing token 1`,
			`totals written under fencing token 1`,
			`done`)
		expectFree(t, addr)
	})
	t.Run("fenced", func(t *testing.T) {
		t.Parallel()
		addr := serve(t)
		url, db := fencedDB(t, fence.SQLite)
		dbPath := strings.TrimPrefix(url, "sqlite:")
		expectLines(t, "fenced.py", run(t, "..", addr, path, python, "examples/python/fenced.py", dbPath),
			`report written under fencing token 1`)
		expectFree(t, addr)
		// A newer holder has written meanwhile (the fence holds its token, 5): the next run's
		// token, 2, is refused and its row rolled back.
		if _, err := db.Exec(`UPDATE leasehold_fence SET token = 5 WHERE task = ?`, task); err != nil {
			t.Fatal(err)
		}
		expectLines(t, "fenced.py, a newer holder has written", run(t, "..", addr, path, python, "examples/python/fenced.py", dbPath),
			`token 2 is stale \(a newer holder wrote under 5\): stop`)
		expectFree(t, addr)
		expectReports(t, db, 1, 1)
	})
	t.Run("token file", func(t *testing.T) {
		t.Parallel()
		// A sidecar behind a bearer token: the examples send it when LEASEHOLD_TOKEN_FILE is set.
		file := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(file, []byte("example-secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		addr := testsidecar.Serve(t, sidecar.Options{
			Store: testsidecar.OpenStore(t, testsidecar.SQLiteURL(t)),
			Token: []byte("example-secret"),
		}).URL
		expectLines(t, "claim.py with a token", run(t, "..", addr, append(path, "LEASEHOLD_TOKEN_FILE="+file), python, "examples/python/claim.py"),
			`part 2 written under fencing token 1`)
	})
}

func TestTypeScriptExample(t *testing.T) {
	t.Parallel()
	node := tool(t, "node")
	npm := tool(t, "npm")
	// As another project would: npm links the client from its package.json's file: dependency
	// (no download: it has no other dependency).
	if out, err := exec.Command(npm, "ci", "--offline", "--no-audit", "--no-fund", "--prefix", "typescript").CombinedOutput(); err != nil {
		t.Fatalf("npm ci in examples/typescript: %v\n%s", err, out)
	}
	addr := serve(t)
	expectLines(t, "main.js", run(t, "typescript", addr, nil, node, "main.js"),
		`report written under fencing token 1`,
		`renew: renewed`,
		`report written under fencing token 2`,
		`done`)
	expectFree(t, addr)

	holdElsewhere(t, addr)
	expectLines(t, "main.js, the task held elsewhere", run(t, "typescript", addr, nil, node, "main.js"),
		`held: .*other-replica.*`)
}
