package leaserun

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
)

// TestMainFlags runs Main in-process over flag, environment and exit-status
// cases. "STORE" in args or env stands for a migrated SQLite store of the
// case's own, "CLOSED" for the URL of a server that no longer listens.
func TestMainFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	closed := httptest.NewServer(nil)
	closedURL := closed.URL
	closed.Close()

	echoTask := shell(`echo "task=$LEASEHOLD_TASK"`)
	cases := []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stdout string
		stderr string
		// notStderr, when set, must not be in stderr.
		notStderr string
	}{
		{name: "no args", code: exitcode.Usage, stderr: "--task is required"},
		{name: "no command", args: []string{"--task", "t"}, code: exitcode.Usage, stderr: "no command to run"},
		{name: "only --", args: []string{"--task", "t", "--"}, code: exitcode.Usage, stderr: "no command to run"},
		{name: "help", args: []string{"-h"}, code: 0, stdout: exitcode.Help()},
		{name: "help lists env", args: []string{"--help"}, code: 0, stdout: "LEASEHOLD_<FLAG>"},
		{name: "unknown flag", args: []string{"--bogus", "--task", "t", "--", "true"}, code: exitcode.Usage, stderr: "flag provided but not defined: -bogus"},
		{name: "usage on error", args: []string{"--bogus"}, code: exitcode.Usage, stderr: "Run 'leasehold run -h'"},
		{name: "addr and store", args: []string{"--addr", "http://127.0.0.1:1", "--store", "sqlite:x.db", "--task", "t", "--", "true"}, code: exitcode.Usage, stderr: "--addr and --store are exclusive"},
		{
			name: "addr and store from env", args: []string{"--task", "t", "--", "true"}, code: exitcode.Usage,
			env:    map[string]string{"LEASEHOLD_ADDR": "http://127.0.0.1:1", "LEASEHOLD_STORE": "sqlite:x.db"},
			stderr: "LEASEHOLD_ADDR and LEASEHOLD_STORE are exclusive",
		},
		{name: "bad task", args: []string{"--task", "a b", "--", "true"}, code: exitcode.Usage, stderr: `--task "a b"`},
		{name: "dot segment task", args: []string{"--task", "a/../b", "--", "true"}, code: exitcode.Usage, stderr: `--task "a/../b": must be 1 to 200 characters`},
		{name: "reserved task", args: []string{"--task", "leasehold:prune", "--", "true"}, code: exitcode.Usage, stderr: `--task "leasehold:prune": must not start with "leasehold:"`},
		{name: "reserved task with store", args: []string{"--task", "leasehold:x", "--store", "STORE", "--", "true"}, code: exitcode.Usage, stderr: `--task "leasehold:x": must not start with "leasehold:"`},
		{name: "ttl too short", args: []string{"--task", "t", "--ttl", "50ms", "--", "true"}, code: exitcode.Usage, stderr: `--ttl "50ms": must be between 100ms and 24h0m0s`},
		{name: "zero ttl", args: []string{"--task", "t", "--ttl", "0", "--", "true"}, code: exitcode.Usage, stderr: "--ttl"},
		{name: "bad ttl from env", args: []string{"--task", "t", "--", "true"}, env: map[string]string{"LEASEHOLD_TTL": "soon"}, code: exitcode.Usage, stderr: `LEASEHOLD_TTL="soon"`},
		{name: "negative wait", args: []string{"--task", "t", "--wait", "-1s", "--", "true"}, code: exitcode.Usage, stderr: "--wait"},
		{name: "negative grace", args: []string{"--task", "t", "--grace", "-1s", "--", "true"}, code: exitcode.Usage, stderr: "--grace"},
		{name: "bad owner", args: []string{"--task", "t", "--owner", "a\x01", "--", "true"}, code: exitcode.Usage, stderr: "--owner"},
		{name: "bad addr", args: []string{"--task", "t", "--addr", "ftp://x", "--", "true"}, code: exitcode.Usage, stderr: "--addr"},
		{name: "bad store", args: []string{"--task", "t", "--store", "mysql://x", "--", "true"}, code: exitcode.Usage, stderr: "must be sqlite:PATH or postgres://"},
		{name: "token file with store", args: []string{"--task", "t", "--store", "STORE", "--token-file", tokenFile, "--", "true"}, code: exitcode.Usage, stderr: "--token-file is for a sidecar"},
		{name: "missing token file", args: []string{"--task", "t", "--token-file", filepath.Join(dir, "none"), "--", "true"}, code: exitcode.Usage, stderr: "--token-file"},
		{name: "sidecar not listening", args: []string{"--task", "t", "--addr", "CLOSED", "--", "true"}, code: exitcode.Unavailable, stderr: "msg=unavailable"},
		{
			// leasehold run migrates the store it opens, as serve does.
			name: "new SQLite file", code: 0, stdout: "task=t-new", stderr: "msg=acquired",
			args: append([]string{"--task", "t-new", "--store", "sqlite:" + filepath.Join(dir, "new.db"), "--"}, echoTask...),
		},
		{
			name: "store directory missing", code: exitcode.Unavailable, stderr: "msg=unavailable",
			args: []string{"--task", "t", "--store", "sqlite:" + filepath.Join(dir, "missing", "x.db"), "--", "true"},
		},
		{name: "runs", args: append([]string{"--task", "t1", "--store", "STORE", "--"}, echoTask...), code: 0, stdout: "task=t1", stderr: "msg=acquired"},
		{name: "without --", args: append([]string{"--task", "t1", "--store", "STORE"}, echoTask...), code: 0, stdout: "task=t1"},
		{name: "exit status passed through", args: []string{"--task", "t", "--store", "STORE", "--", "sh", "-c", "exit 3"}, code: 3, stderr: "exit=3"},
		{name: "killed by a signal", args: []string{"--task", "t", "--store", "STORE", "--", "sh", "-c", "kill -USR1 $$"}, code: 138},
		// LEASEHOLD_TASK and LEASEHOLD_OWNER are what a parent leasehold run
		// gave this process: never read, so a nested run holds a lease of
		// its own.
		{name: "task not read from env", args: []string{"--store", "STORE", "--", "true"}, env: map[string]string{"LEASEHOLD_TASK": "from-env"}, code: exitcode.Usage, stderr: "--task is required"},
		{name: "owner not read from env", args: append([]string{"--task", "t4", "--store", "STORE", "--"}, shell(`echo "owner=$LEASEHOLD_OWNER"`)...), env: map[string]string{"LEASEHOLD_OWNER": "parent#1#aa"}, code: 0, stdout: "owner=" + hostPrefix()},
		{name: "command line wins", args: append([]string{"--task", "good", "--store", "STORE", "--"}, echoTask...), env: map[string]string{"LEASEHOLD_TASK": "bad name!"}, code: 0, stdout: "task=good"},
		{name: "store from env", args: append([]string{"--task", "t2", "--"}, echoTask...), env: map[string]string{"LEASEHOLD_STORE": "STORE"}, code: 0, stdout: "task=t2"},
		{
			name: "store on the command line overrules LEASEHOLD_ADDR", code: 0, stdout: "task=t3",
			args: append([]string{"--task", "t3", "--store", "STORE", "--"}, echoTask...),
			env:  map[string]string{"LEASEHOLD_ADDR": "CLOSED"},
		},
		{
			name: "addr on the command line overrules LEASEHOLD_STORE", code: exitcode.Unavailable, stderr: "msg=unavailable",
			args: []string{"--task", "t", "--addr", "CLOSED", "--", "true"},
			env:  map[string]string{"LEASEHOLD_STORE": "STORE"},
		},
		{name: "command not found", args: []string{"--task", "t", "--store", "STORE", "--", filepath.Join(dir, "no-such-command")}, code: exitcode.NotFound, stderr: "command not found; the lease was not claimed"},
		{name: "command not in PATH", args: []string{"--task", "t", "--store", "STORE", "--", "no-such-command-leaserun"}, code: exitcode.NotFound, stderr: "command not found"},
		{name: "command not executable", args: []string{"--task", "t", "--store", "STORE", "--", notExec}, code: exitcode.CannotExec, stderr: "command cannot be executed"},
		{name: "command is a directory", args: []string{"--task", "t", "--store", "STORE", "--", dir}, code: exitcode.CannotExec, stderr: "command cannot be executed"},
		{name: "help lists undeclared", args: []string{"-h"}, code: 0, stdout: "78             run, claim: the task is not declared"},
		// A store URL that does not parse is the operator's to fix, not an
		// unavailable store; its password is not repeated.
		{name: "raw @ in the store's password", args: []string{"--task", "t", "--store", "postgres://u:p@ss@127.0.0.1:5432/x", "--", "true"}, code: exitcode.Usage, stderr: "percent-encode", notStderr: "p@ss"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var st testStore
			subst := func(s string) string {
				switch s {
				case "STORE":
					if st.url == "" {
						st = newTestStore(t)
					}
					return st.url
				case "CLOSED":
					return closedURL
				}
				return s
			}
			args := make([]string, len(c.args))
			for i, a := range c.args {
				args[i] = subst(a)
			}
			env := map[string]string{}
			for k, v := range c.env {
				env[k] = subst(v)
			}
			stdout, stderr := new(lockedbuf.Buffer), new(lockedbuf.Buffer)
			code := Main(context.Background(), args, func(k string) string { return env[k] }, nil, stdout, stderr)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, c.code, stdout, stderr)
			}
			if !strings.Contains(stdout.String(), c.stdout) {
				t.Errorf("stdout lacks %q:\n%s", c.stdout, stdout)
			}
			if !strings.Contains(stderr.String(), c.stderr) {
				t.Errorf("stderr lacks %q:\n%s", c.stderr, stderr)
			}
			if c.notStderr != "" && strings.Contains(stderr.String(), c.notStderr) {
				t.Errorf("stderr has %q:\n%s", c.notStderr, stderr)
			}
			if st.url != "" {
				// Whatever happened, nothing is left held.
				if l := st.get(t, "t"); l != nil {
					t.Errorf("lease left behind: %+v", l)
				}
			}
		})
	}
}

// TestDefaultOwner: with no --owner the command sees
// <hostname>#<pid>#<12 hex digits>, the pid being leasehold run's.
func TestDefaultOwner(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	stdout, stderr := new(lockedbuf.Buffer), new(lockedbuf.Buffer)
	args := append([]string{"--task", "t", "--store", st.url, "--"}, shell(`echo "$LEASEHOLD_OWNER"`)...)
	if code := Main(context.Background(), args, func(string) string { return "" }, nil, stdout, stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(fmt.Sprintf(`^%s#%d#[0-9a-f]{12}$`, regexp.QuoteMeta(host), os.Getpid()))
	if got := strings.TrimSpace(stdout.String()); !want.MatchString(got) {
		t.Errorf("owner %q does not match %s", got, want)
	}
}

// hostPrefix is how a default owner starts: "<hostname>#".
func hostPrefix() string {
	host, err := os.Hostname()
	if err != nil {
		panic(err)
	}
	return host + "#"
}
