package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/version"
)

func TestCommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		name       string
		args       []string
		env        map[string]string
		code       int
		stdout     string
		stderr     string
		createFile string
	}{
		{name: "no args", args: nil, code: exitcode.Usage, stderr: "Usage:"},
		{name: "help", args: []string{"help"}, code: 0, stdout: "leasehold migrate"},
		{name: "help names fence", args: []string{"help"}, code: 0, stdout: "leasehold fence install --db"},
		{name: "fence sql", args: []string{"fence", "sql", "--dialect", "postgres"}, code: 0, stdout: "CREATE OR REPLACE FUNCTION leasehold_fence(task text, token bigint)"},
		{name: "fence sql bad dialect", args: []string{"fence", "sql", "--dialect", "oracle"}, code: exitcode.Usage, stderr: `--dialect must be postgres or sqlite, not "oracle"`},
		{
			name: "fence install unreachable", code: exitcode.Unavailable, stderr: "leasehold fence install: cannot reach postgres://u:xxxxx@127.0.0.1:1/db",
			args: []string{"fence", "install", "--db", "postgres://u:s3cr3t@127.0.0.1:1/db?connect_timeout=1"},
		},
		{name: "version", args: []string{"version"}, code: 0, stdout: "leasehold " + version.String() + "\n  commit"},
		{name: "--version", args: []string{"--version"}, code: 0, stdout: "leasehold " + version.String() + "\n  commit"},
		{name: "version -h", args: []string{"version", "-h"}, code: 0, stdout: "Usage: leasehold version [--json]"},
		{name: "version stray argument", args: []string{"version", "now"}, code: exitcode.Usage, stderr: `unexpected argument "now"`},
		{name: "unknown verb", args: []string{"frobnicate"}, code: exitcode.Usage, stderr: `unknown command "frobnicate"`},
		{name: "unknown flag", args: []string{"serve", "--bogus"}, code: exitcode.Usage, stderr: "flag provided but not defined"},
		{name: "stray argument", args: []string{"serve", "extra"}, code: exitcode.Usage, stderr: `unexpected argument "extra"`},
		{name: "serve -h", args: []string{"serve", "-h"}, code: 0, stderr: "LEASEHOLD_STORE"},
		{
			name: "non-loopback without token", code: exitcode.Usage, stderr: "refusing to listen",
			args: []string{"serve", "--listen", "0.0.0.0:0", "--store", "sqlite:" + filepath.Join(dir, "a.db")},
		},
		{
			name: "non-loopback from env", code: exitcode.Usage, stderr: "refusing to listen",
			args: []string{"serve", "--store", "sqlite:" + filepath.Join(dir, "b.db")},
			env:  map[string]string{"LEASEHOLD_LISTEN": ":0"},
		},
		{
			name: "bad log format from env", code: exitcode.Usage, stderr: "log-format",
			args: []string{"serve"}, env: map[string]string{"LEASEHOLD_LOG_FORMAT": "xml"},
		},
		{
			name: "probe listener on a socket", code: exitcode.Usage, stderr: "--probe-listen",
			args: []string{"serve", "--probe-listen", "unix:" + filepath.Join(dir, "probe.sock"), "--store", "sqlite:" + filepath.Join(dir, "p.db")},
		},
		{
			name: "probe listener without a port, from env", code: exitcode.Usage, stderr: "--probe-listen",
			args: []string{"serve", "--store", "sqlite:" + filepath.Join(dir, "p.db")}, env: map[string]string{"LEASEHOLD_PROBE_LISTEN": "0.0.0.0"},
		},
		{
			name: "missing token file", code: exitcode.Failure, stderr: "token file",
			args: []string{"serve", "--listen", "127.0.0.1:0", "--token-file", filepath.Join(dir, "none"), "--store", "sqlite:" + filepath.Join(dir, "c.db")},
		},
		{
			name: "migrate", code: 0, createFile: filepath.Join(dir, "m.db"),
			args: []string{"migrate", "--store", "sqlite:" + filepath.Join(dir, "m.db")},
		},
		{
			name: "migrate store from env", code: 0, createFile: filepath.Join(dir, "e.db"),
			args: []string{"migrate"}, env: map[string]string{"LEASEHOLD_STORE": "sqlite:" + filepath.Join(dir, "e.db")},
		},
		{
			name: "migrate unreachable", code: exitcode.Unavailable, stderr: "leasehold migrate: migrate store sqlite:",
			args: []string{"migrate", "--store", "sqlite:" + filepath.Join(dir, "missing", "x.db")},
		},
		{
			name: "migrate bad URL", code: exitcode.Usage, stderr: "must be sqlite:PATH or postgres://",
			args: []string{"migrate", "--store", "mysql://x"},
		},
		{
			name: "serve missing directory", code: exitcode.Unavailable, stderr: "cannot open the database file",
			args: []string{"serve", "--listen", "127.0.0.1:0", "--store", "sqlite:" + filepath.Join(dir, "missing", "x.db")},
		},
		{
			name: "serve URL that does not parse", code: exitcode.Usage, stderr: "its text is not shown, since it holds a password",
			args: []string{"serve", "--listen", "127.0.0.1:0", "--store", "postgres://u:s3cr3t pw@127.0.0.1:1/db"},
		},
		{
			name: "run --store URL that does not parse", code: exitcode.Usage, stderr: "its text is not shown, since it holds a password",
			args: []string{"run", "--store", "postgres://u:s3cr3t pw@127.0.0.1:1/db?password=s3cr3t", "--task", "t", "--", "true"},
		},
		// A raw '@' in a password: the operator's to fix (64), for every
		// verb that takes --store, its password never repeated.
		{
			name: "migrate raw @ in the password", code: exitcode.Usage, stderr: "leasehold migrate: --store: postgres store URL: a raw '@'",
			args: []string{"migrate", "--store", "postgres://u:s3cr3t@pw@127.0.0.1:1/db"},
		},
		{
			name: "prune raw @ in the password", code: exitcode.Usage, stderr: "leasehold prune: --store: postgres store URL: a raw '@'",
			args: []string{"prune", "--store", "postgres://u:s3cr3t@pw@127.0.0.1:1/db"},
		},
		{
			name: "serve raw @ in the password", code: exitcode.Usage, stderr: "leasehold serve: --store: postgres store URL: a raw '@'",
			args: []string{"serve", "--listen", "127.0.0.1:0", "--store", "postgres://u:s3cr3t@pw@127.0.0.1:1/db"},
		},
		{
			name: "run raw @ in the password", code: exitcode.Usage, stderr: "--store: postgres store URL: a raw '@'",
			args: []string{"run", "--store", "postgres://u:s3cr3t@pw@127.0.0.1:1/db", "--task", "t", "--", "true"},
		},
		{
			name: "list raw @ in the password", code: exitcode.Usage, stderr: "leasehold list: --store: postgres store URL: a raw '@'",
			args: []string{"list", "--store", "postgres://u:s3cr3t@pw@127.0.0.1:1/db"},
		},
		{
			name: "run --store with a password parameter", code: 69, stderr: "unavailable",
			args: []string{"run", "--store", "postgres://u@127.0.0.1:1/db?connect_timeout=1&password=s3cr3t", "--task", "t", "--", "true"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(c.args, func(k string) string { return c.env[k] }, &stdout, &stderr)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, c.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), c.stdout) {
				t.Errorf("stdout lacks %q: %s", c.stdout, stdout.String())
			}
			if !strings.Contains(stderr.String(), c.stderr) {
				t.Errorf("stderr lacks %q: %s", c.stderr, stderr.String())
			}
			if strings.Contains(stderr.String(), "s3cr3t") {
				t.Errorf("stderr holds the password: %s", stderr.String())
			}
			if c.createFile != "" {
				if _, err := os.Stat(c.createFile); err != nil {
					t.Errorf("store file: %v", err)
				}
			}
		})
	}
}

// TestServeProcess runs the real binary, built with a version stamp: it
// reports that version, serves on a port of its choice (naming the version
// on /healthz), answers a claim, and stops cleanly on SIGTERM; a second
// process over the same file continues the task's token counter.
func TestServeProcess(t *testing.T) {
	t.Parallel()
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("-short: builds and runs the binary (CI never skips this)")
	}
	dir := t.TempDir()
	exe := filepath.Join(dir, "leasehold")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	const stamp, commit = "v0.0.0-stamped", "0123456789abcdef0123456789abcdef01234567"
	build := exec.Command(gobin, "build", "-ldflags", "-X github.com/leasehold/leasehold/internal/version.version="+stamp+
		" -X github.com/leasehold/leasehold/internal/version.commit="+commit, "-o", exe, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out, err := exec.Command(exe, "--version").Output(); err != nil || !strings.HasPrefix(string(out), "leasehold "+stamp+"\n  commit    "+commit+"\n") {
		t.Fatalf("leasehold --version: %q, %v; want the stamps %s and %s", out, err, stamp, commit)
	}
	store := "sqlite:" + filepath.Join(dir, "leasehold.db")

	p := startServe(t, exe, store)
	p.waitReady(t)
	if v := p.healthVersion(t); v != stamp {
		t.Errorf("healthz version %q, want %q", v, stamp)
	}
	token := p.claim(t, "nightly", "w1")
	if token != 1 {
		t.Fatalf("first token %d, want 1", token)
	}
	resp := p.post(t, "/v1/leases/nightly/release", `{"owner":"w1"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("release: %d", resp.StatusCode)
	}
	p.stop(t)

	p = startServe(t, exe, store)
	p.waitReady(t)
	if token := p.claim(t, "nightly", "w2"); token != 2 {
		t.Fatalf("token after restart %d, want 2", token)
	}
	p.stop(t)
}

type serveProcess struct {
	cmd  *exec.Cmd
	addr string
	logs *bytes.Buffer // stderr; read it only after exited is closed
	// exited is closed when the process has exited; waitErr is then its
	// exit error.
	exited  chan struct{}
	waitErr error
}

// startServe starts `leasehold serve` on 127.0.0.1:0 and reads the address
// it listens on from its JSON log.
func startServe(t *testing.T, exe, store string) *serveProcess {
	t.Helper()
	cmd := exec.Command(exe, "serve", "--listen", "127.0.0.1:0", "--store", store, "--log-format", "json")
	cmd.Env = withoutLeaseholdEnv(os.Environ())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProcess{cmd: cmd, logs: new(bytes.Buffer), exited: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill() // only the process this test started
			<-p.exited
		}
	})

	addrc := make(chan string, 1)
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "leasehold listening" {
				addrc <- line.Addr
			}
			p.logs.Write(sc.Bytes())
			p.logs.WriteByte('\n')
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-logsDone // Wait closes the pipe: read it to the end first
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()

	select {
	case p.addr = <-addrc:
	case <-p.exited:
		t.Fatalf("serve exited before listening: %v\n%s", p.waitErr, p.logs)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not log its address within 30 s")
	}
	return p
}

func (p *serveProcess) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get("http://" + p.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-deadline:
			t.Fatalf("not ready after 30 s (last: %v)", err)
		case <-tick.C:
		}
	}
}

func (p *serveProcess) post(t *testing.T, path, body string) *http.Response {
	t.Helper()
	resp, err := http.Post("http://"+p.addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (p *serveProcess) healthVersion(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Version string `json:"version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("healthz: %v", err)
	}
	return h.Version
}

func (p *serveProcess) claim(t *testing.T, task, owner string) int64 {
	t.Helper()
	resp := p.post(t, "/v1/leases/"+task+"/claim", `{"owner":"`+owner+`","ttl_ms":60000}`)
	var got struct {
		Acquired bool `json:"acquired"`
		Lease    struct {
			Token int64 `json:"token"`
		} `json:"lease"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK || !got.Acquired {
		t.Fatalf("claim: %d %+v %v", resp.StatusCode, got, err)
	}
	return got.Lease.Token
}

// stop sends SIGTERM and expects a clean exit.
func (p *serveProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		if p.waitErr != nil {
			t.Fatalf("serve after SIGTERM: %v\n%s", p.waitErr, p.logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not stop within 30 s of SIGTERM\n%s", p.logs)
	}
	if !strings.Contains(p.logs.String(), `"msg":"stopped"`) {
		t.Errorf("no clean stop in the log:\n%s", p.logs)
	}
}

func withoutLeaseholdEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			out = append(out, kv)
		}
	}
	return out
}
