package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/sidecar"
)

// Every status of the one table, provoked through the real commands (this
// binary's run, in process) wherever a test can provoke it, and for each
// verb's usage error; each status provoked has its row in exitcode.Table,
// which TestDocsExitStatus holds to docs/cli.md. (128+N, a signal, is
// leaserun's own tests'; 70 for a lease lost while the command runs is
// the e2e tests'.)
func TestExitStatusTable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "lh.db")
	plain := testSidecar(t, db, sidecar.Options{})
	guarded := testSidecar(t, "sqlite:"+filepath.Join(dir, "guarded.db"), sidecar.Options{Token: []byte("s3cret-token-0123456789")})
	declared := testSidecar(t, "sqlite:"+filepath.Join(dir, "declared.db"), sidecar.Options{RequireDeclared: true})
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>a proxy's page</html>"))
	}))
	t.Cleanup(html.Close)
	notExecutable := filepath.Join(dir, "report.sh")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// w1 holds nightly for the cases that find it held.
	if code := run([]string{"claim", "nightly", "--owner", "w1", "--ttl", "1h", "--addr", plain}, noEnv, new(bytes.Buffer), new(bytes.Buffer)); code != exitcode.OK {
		t.Fatalf("claim nightly: exit %d", code)
	}
	cases := []struct {
		name string
		args []string
		want int
	}{
		{"version", []string{"version"}, exitcode.OK},
		{"get a live lease", []string{"get", "nightly", "--addr", plain}, exitcode.OK},
		{"get no live lease", []string{"get", "weekly", "--addr", plain}, exitcode.Failure},

		{"no verb", nil, exitcode.Usage},
		{"unknown verb", []string{"frobnicate"}, exitcode.Usage},
		{"serve unknown flag", []string{"serve", "--bogus"}, exitcode.Usage},
		{"serve stray argument", []string{"serve", "extra"}, exitcode.Usage},
		{"serve off loopback without a token", []string{"serve", "--listen", "0.0.0.0:0", "--store", db}, exitcode.Usage},
		{"migrate unknown flag", []string{"migrate", "--bogus"}, exitcode.Usage},
		{"migrate bad role", []string{"migrate", "--store", db, "--grant-runtime", "bad role"}, exitcode.Usage},
		{"prune stray argument", []string{"prune", "extra"}, exitcode.Usage},
		{"prune bad log format", []string{"prune", "--log-format", "xml", "--store", db}, exitcode.Usage},
		{"credentials without a verb", []string{"credentials"}, exitcode.Usage},
		{"run without --task", []string{"run", "--store", db, "--", "true"}, exitcode.Usage},
		{"run --once-per with --wait", []string{"run", "--task", "t", "--once-per", "1h", "--wait", "1s", "--store", db, "--", "true"}, exitcode.Usage},
		{"run --min-hold 0", []string{"run", "--task", "t", "--min-hold", "0s", "--store", db, "--", "true"}, exitcode.Usage},
		{"get without TASK", []string{"get", "--addr", plain}, exitcode.Usage},
		{"claim bad --ttl", []string{"claim", "t", "--ttl", "1ms", "--addr", plain}, exitcode.Usage},
		{"list bad --addr", []string{"list", "--addr", "ftp://x"}, exitcode.Usage},
		{"fence sql without --dialect", []string{"fence", "sql"}, exitcode.Usage},
		{"fence install without --db", []string{"fence", "install"}, exitcode.Usage},

		{"migrate unopenable store", []string{"migrate", "--store", "sqlite:" + filepath.Join(dir, "missing", "x.db")}, exitcode.Unavailable},
		{"serve unopenable store", []string{"serve", "--listen", "127.0.0.1:0", "--store", "sqlite:" + filepath.Join(dir, "missing", "x.db")}, exitcode.Unavailable},
		{"list not a sidecar", []string{"list", "--addr", html.URL}, exitcode.Unavailable},
		{"watch not a sidecar", []string{"watch", "--addr", html.URL}, exitcode.Unavailable},
		{"run not a sidecar", []string{"run", "--task", "t", "--addr", html.URL, "--", "true"}, exitcode.Unavailable},
		{"get store file missing", []string{"get", "t", "--store", "sqlite:" + filepath.Join(dir, "none.db")}, exitcode.Unavailable},
		{"fence install database file missing", []string{"fence", "install", "--db", "sqlite:" + filepath.Join(dir, "none.db")}, exitcode.Unavailable},

		{"release by another owner", []string{"release", "nightly", "--owner", "w2", "--addr", plain}, exitcode.Lost},

		{"claim held", []string{"claim", "nightly", "--owner", "w2", "--addr", plain}, exitcode.Held},
		{"run held", []string{"run", "--task", "nightly", "--owner", "w2", "--addr", plain, "--", "true"}, exitcode.Held},
		{"run held on the store", []string{"run", "--task", "nightly", "--owner", "w2", "--store", db, "--", "true"}, exitcode.Held},
		{"run --once-per held", []string{"run", "--task", "nightly", "--owner", "w2", "--once-per", "1h", "--addr", plain, "--", "true"}, exitcode.Skipped},
		{"run --once-per held on the store", []string{"run", "--task", "nightly", "--owner", "w2", "--once-per", "1h", "--store", db, "--", "true"}, exitcode.Skipped},

		{"list without the token", []string{"list", "--addr", guarded}, exitcode.NoPerm},
		{"run without the token", []string{"run", "--task", "t", "--addr", guarded, "--", "true"}, exitcode.NoPerm},
		{"claim a reserved task", []string{"claim", "leasehold:prune", "--addr", plain}, exitcode.NoPerm},

		{"claim undeclared", []string{"claim", "adhoc", "--addr", declared}, exitcode.Undeclared},
		{"run undeclared", []string{"run", "--task", "adhoc", "--addr", declared, "--", "true"}, exitcode.Undeclared},

		{"run not executable", []string{"run", "--task", "t", "--store", db, "--", notExecutable}, exitcode.CannotExec},
		{"run not found", []string{"run", "--task", "t", "--store", db, "--", "no-such-command-4f1c"}, exitcode.NotFound},
		{"run the command's own", []string{"run", "--task", "t", "--store", db, "--", "sh", "-c", "exit 3"}, 3},
	}
	rows := map[string]bool{}
	for _, r := range exitcode.Table {
		rows[r.Status] = true
	}
	provoked := map[string]bool{}
	for _, c := range cases {
		row := rowOf(c.want)
		provoked[row] = true
		if !rows[row] {
			t.Errorf("%s: status %d has no row %q in exitcode.Table (nor, then, in docs/cli.md)", c.name, c.want, row)
		}
	}
	for _, r := range exitcode.Table {
		if !provoked[r.Status] && r.Status != "128+N" {
			t.Errorf("no case provokes the row %q", r.Status)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(c.args, noEnv, &stdout, &stderr); code != c.want {
				t.Errorf("leasehold %q: exit %d, want %d\nstdout: %s\nstderr: %s", c.args, code, c.want, stdout.String(), stderr.String())
			}
		})
	}
}

// rowOf is the Status of exitcode.Table's row for code.
func rowOf(code int) string {
	switch {
	case code == exitcode.CannotExec, code == exitcode.NotFound:
		return "126 / 127"
	case code > exitcode.Signal:
		return "128+N"
	}
	for _, r := range exitcode.Table {
		if r.Status == strconv.Itoa(code) {
			return r.Status
		}
	}
	return "the command's"
}

func noEnv(string) string { return "" }

// testSidecar serves a sidecar over the SQLite store at url with opts on
// 127.0.0.1, closed when t ends, and returns its URL.
func testSidecar(t *testing.T, url string, opts sidecar.Options) string {
	t.Helper()
	opts.Store = testsidecar.OpenStore(t, url)
	return testsidecar.Serve(t, opts).URL
}
