package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// socketPath is the path of a Unix socket in a new directory with a short
// name (a socket's path must fit in about 100 bytes, which t.TempDir's long
// names can exceed), removed when t ends.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "leasehold.sock")
}

// `leasehold serve --listen unix:PATH` as a process: the socket has mode
// 0660 and the log names it; `leasehold run` and the operator commands
// reach it with --addr unix:PATH or LEASEHOLD_ADDR; a second sidecar on
// the path is refused; SIGTERM removes the socket; after a SIGKILL the
// stale socket is replaced by the next sidecar.
func TestUnixSocket(t *testing.T) {
	t.Parallel()
	path := socketPath(t)
	addr := "unix:" + path
	store := "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db")
	s := startSidecar(t, store, "--listen", addr)
	s.waitReady()
	if s.addr != addr {
		t.Fatalf("the sidecar says it listens on %q, want %q", s.addr, addr)
	}
	if !strings.Contains(s.logs.String(), "addr="+addr+" mode=0660 ") {
		t.Errorf("the listening line does not name the socket and its mode:\n%s", s.logs.String())
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Fatalf("the socket file: %v, %v; want a socket of mode 0660", fi, err)
	}

	run := exec.Command(leaseholdBin, "run", "--addr", addr, "--task", "sock/job", "--owner", "job-1",
		"--", "sh", "-c", `echo "$LEASEHOLD_TOKEN"; exit 3`)
	run.Env = cleanEnv()
	out, _ := run.Output()
	if code := run.ProcessState.ExitCode(); code != 3 || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("leasehold run --addr %s: exit %d, output %q; want the child's 3 and token 1", addr, code, out)
	}
	s.waitFree("sock%2Fjob")

	status := exec.Command(leaseholdBin, "status")
	status.Env = append(cleanEnv(), "LEASEHOLD_ADDR="+addr)
	if out, err := status.Output(); err != nil || !strings.Contains(string(out), "sidecar   "+addr+"\n") {
		t.Errorf("leasehold status with LEASEHOLD_ADDR=%s: %v\n%s", addr, err, out)
	}
	if out, err := runLeasehold("history", "sock/job", "--addr", addr); err != nil || !strings.Contains(out, "released  job-1") {
		t.Errorf("leasehold history --addr %s: %v\n%s", addr, err, out)
	}

	// A second sidecar on the live socket is refused, naming it.
	second := exec.Command(leaseholdBin, "serve", "--listen", addr, "--store", "sqlite:"+filepath.Join(t.TempDir(), "other.db"))
	second.Env = cleanEnv()
	if out, err := second.CombinedOutput(); second.ProcessState.ExitCode() != 1 ||
		!strings.Contains(string(out), addr+": another process is serving on this socket") {
		t.Errorf("a second sidecar on the socket: %v\n%s", err, out)
	}

	if code := s.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, s.logs.String())
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after a clean stop (%v)", err)
	}

	// SIGKILL leaves the socket behind; the next sidecar takes it for stale.
	killed := startSidecar(t, store, "--listen", addr)
	killed.waitReady()
	killed.stop(syscall.SIGKILL)
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("no socket left by SIGKILL: %v", err)
	}
	next := startSidecar(t, store, "--listen", addr)
	next.waitReady()
	if !strings.Contains(next.logs.String(), "removed a stale socket") {
		t.Errorf("the next sidecar does not say it removed the stale socket:\n%s", next.logs.String())
	}
	if r := next.call("GET", "/v1/leases/sock%2Fjob", nil); r.Status != 200 || r.Body["held"] != false {
		t.Errorf("GET over the socket after the restart: %d %s", r.Status, r.Raw)
	}
}

// The curl session over a Unix socket of docs/configuration.md (## On a
// Unix socket) is what curl prints against a fresh sidecar on a socket,
// times aside: the `leasehold serve` line is the sidecar the test starts,
// each `$ curl …` line runs in sh with the socket's path put in.
func TestDocsUnixSocketSession(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	if err != nil {
		missingTool(t, "curl not found; CI needs it for the docs' Unix socket session", "curl not found (outside CI this skips): install curl to run the docs' Unix socket session")
	}
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## On a Unix socket\n")
	if !ok {
		t.Fatal("docs/configuration.md has no ## On a Unix socket section")
	}
	_, block, ok := strings.Cut(section, "```console\n")
	if !ok {
		t.Fatal("the On a Unix socket section has no ```console block")
	}
	block, _, _ = strings.Cut(block, "```")
	block = strings.ReplaceAll(block, "\\\n", "") // continued lines

	steps := strings.Split(block, "$ ")[1:]
	if len(steps) < 3 {
		t.Fatalf("the docs' session has %d steps; it should serve and curl", len(steps))
	}
	serve, _, _ := strings.Cut(steps[0], "\n")
	const docSocket = "/run/leasehold/leasehold.sock"
	if serve != "leasehold serve --listen unix:"+docSocket+" &" {
		t.Fatalf("the docs' session starts with %q, want leasehold serve on unix:%s", serve, docSocket)
	}
	path := socketPath(t)
	s := startSidecar(t, "sqlite:"+filepath.Join(t.TempDir(), "leasehold.db"), "--listen", "unix:"+path)
	s.waitReady()
	for _, step := range steps[1:] {
		line, want, _ := strings.Cut(step, "\n")
		if !strings.HasPrefix(line, "curl ") || !strings.Contains(line, "--unix-socket "+docSocket+" ") {
			t.Fatalf("docs step %q is not curl --unix-socket %s", line, docSocket)
		}
		cmd := exec.Command("sh", "-c", strings.Replace(strings.ReplaceAll(line, docSocket, path), "curl ", curl+" ", 1))
		cmd.Env = cleanEnv()
		got, err := cmd.Output()
		if err != nil {
			t.Fatalf("docs: $ %s: %v", line, err)
		}
		if normalizeTimes(string(got)) != normalizeTimes(want) {
			t.Errorf("docs/configuration.md: $ %s\nprints:\n%s\nthe page shows:\n%s", line, got, want)
		}
	}
}

var (
	stampRE     = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	remainingRE = regexp.MustCompile(`"ttl_remaining_ms":\d+`)
)

// normalizeTimes drops what changes from run to run: times and remaining
// ttls.
func normalizeTimes(s string) string {
	s = stampRE.ReplaceAllString(s, "TIME")
	s = remainingRE.ReplaceAllString(s, `"ttl_remaining_ms":N`)
	return strings.TrimSpace(s)
}
