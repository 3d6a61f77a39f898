package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/internal/harness/serveproc"
	"github.com/leasehold/leasehold/leasecore"
)

// leaseholdBin is the leasehold binary built once for the whole package.
var leaseholdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasehold-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	leaseholdBin = filepath.Join(dir, "leasehold")
	args := []string{"build", "-o", leaseholdBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/leasehold/leasehold/cmd/leasehold")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build leasehold:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sidecar is one running `leasehold serve` process.
type sidecar struct {
	t      *testing.T
	proc   *serveproc.Process
	base   string // http://127.0.0.1:PORT; http://localhost on a Unix socket
	addr   string // what clients are given (--addr): base, or unix:PATH
	socket string // the Unix socket's path, when it serves on one
	hc     *http.Client
	logs   *lockedbuf.Buffer
}

// startSidecar runs `leasehold serve --listen 127.0.0.1:0 --store store` and
// returns once the process has printed the address it listens on (extra
// arguments come last, so `--listen ADDR` among them wins). The process is
// killed at cleanup if the test did not stop it.
func startSidecar(t *testing.T, store string, extra ...string) *sidecar {
	t.Helper()
	s, err := launchSidecar(t, store, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// launchSidecar is startSidecar reporting failure as an error, for callers
// outside the test's goroutine (a fault that restarts a sidecar).
func launchSidecar(t *testing.T, store string, extra ...string) (*sidecar, error) {
	return launchWrapped(t, nil, store, extra...)
}

// launchWrapped is launchSidecar running `leasehold serve` through wrapper:
// a command and its first arguments, to which leasehold's path and
// arguments are appended, and which runs them (say, after setting a limit).
func launchWrapped(t *testing.T, wrapper []string, store string, extra ...string) (*sidecar, error) {
	return launchBin(t, leaseholdBin, wrapper, store, extra...)
}

// launchBin is launchWrapped running the leasehold binary bin: an earlier
// release's, in the rolling upgrade.
func launchBin(t *testing.T, bin string, wrapper []string, store string, extra ...string) (*sidecar, error) {
	logs := &lockedbuf.Buffer{}
	p, err := serveproc.Start(serveproc.Options{
		Bin: bin, Args: append([]string{"--store", store}, extra...),
		Wrapper: wrapper, Env: cleanEnv(), Output: logs,
	})
	if err != nil {
		return nil, fmt.Errorf("%w:\n%s", err, logs.String())
	}
	t.Cleanup(func() {
		select {
		case <-p.Done():
		default:
			p.Kill()
		}
		if t.Failed() {
			t.Logf("leasehold serve (pid %d) output:\n%s", p.PID(), logs.String())
		}
	})
	ep := p.Endpoint
	s := &sidecar{t: t, proc: p, logs: logs, base: ep.Base(), addr: ep.String(), socket: ep.Socket(), hc: http.DefaultClient}
	if s.socket != "" {
		s.hc = &http.Client{Transport: ep.Transport()}
	}
	return s, nil
}

// waitReady polls /readyz until it answers 200.
func (s *sidecar) waitReady() {
	s.t.Helper()
	if err := awaitReadyVia(s.hc, s.base, 30*time.Second); err != nil {
		s.t.Fatalf("sidecar %v:\n%s", err, s.logs.String())
	}
}

// stop sends sig and waits for the process to exit, returning its exit code.
func (s *sidecar) stop(sig syscall.Signal) int {
	s.t.Helper()
	_ = s.proc.Signal(sig)
	return s.wait()
}

// wait waits for the process to exit and returns its exit code.
func (s *sidecar) wait() int {
	s.t.Helper()
	select {
	case <-s.proc.Done():
	case <-time.After(30 * time.Second):
		s.t.Fatal("sidecar did not exit within 30s")
	}
	return s.proc.ExitCode()
}

// cleanEnv is the test's environment without LEASEHOLD_* settings, so that a
// developer's shell cannot change what the processes under test do.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			env = append(env, kv)
		}
	}
	return env
}

// response is a decoded JSON answer.
type response struct {
	Status int
	Body   map[string]any
	Raw    string
}

// call sends a JSON request to the sidecar and decodes the JSON answer.
func (s *sidecar) call(method, path string, body any) response {
	s.t.Helper()
	return s.callWithToken("", method, path, body)
}

// callWithToken is call with an Authorization: Bearer token header, unless
// token is empty.
func (s *sidecar) callWithToken(token, method, path string, body any) response {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	r := response{Status: resp.StatusCode, Raw: string(raw)}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.Body); err != nil {
			s.t.Fatalf("%s %s: answer is not JSON (%v): %s", method, path, err, raw)
		}
	}
	return r
}

// lease returns the "lease" object of an answer.
func (r response) lease(t *testing.T) map[string]any {
	t.Helper()
	l, ok := r.Body["lease"].(map[string]any)
	if !ok {
		t.Fatalf("answer has no lease object: %s", r.Raw)
	}
	return l
}

// token returns lease.token of an answer.
func (r response) token(t *testing.T) int64 {
	t.Helper()
	tok, ok := r.lease(t)["token"].(float64)
	if !ok {
		t.Fatalf("lease has no numeric token: %s", r.Raw)
	}
	return int64(tok)
}

// claimUntil claims task through s as owner e2e (and releases what it got)
// until the answer satisfies done, for at most the declarations' staleness
// bound plus a margin for slow machines; it returns the last answer.
func claimUntil(t *testing.T, s *sidecar, task string, done func(response) bool) response {
	t.Helper()
	deadline := time.Now().Add(leasecore.DefaultDeclarationsMaxAge + 20*time.Second)
	for {
		r := s.call("POST", "/v1/leases/"+task+"/claim", map[string]any{"owner": "e2e"})
		if r.Status == 200 {
			s.call("POST", "/v1/leases/"+task+"/release", map[string]any{"owner": "e2e", "token": r.token(t)})
		}
		if done(r) || time.Now().After(deadline) {
			return r
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// missingTool stops a test that cannot find what it needs: a failure under
// CI, where no test may skip (ciMsg), and a skip elsewhere (skipMsg, which
// says what to install).
func missingTool(t *testing.T, ciMsg, skipMsg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(ciMsg)
	}
	t.Skip(skipMsg)
}
