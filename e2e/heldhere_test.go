package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// probeRE finds the probe listener's address on the listening line, in the
// text or the JSON log format.
var probeRE = regexp.MustCompile(`"?probe"?[=:]"?(127\.0\.0\.1:\d+)`)

// probeBase is the base URL of the sidecar's probe listener
// (--probe-listen), read from the line that logged its address.
func (s *sidecar) probeBase() string {
	s.t.Helper()
	m := probeRE.FindStringSubmatch(s.logs.String())
	if m == nil {
		s.t.Fatalf("the sidecar logged no probe listener address:\n%s", s.logs.String())
	}
	return "http://" + m[1]
}

// heldHere asks base's GET /v1/leases/{task}/held-here, with no token, and
// returns the status and the decoded answer.
func heldHere(t *testing.T, base, task string) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/leases/"+task+"/held-here", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("held-here on %s: %v", base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("held-here on %s answered %d, not JSON: %s", base, resp.StatusCode, raw)
	}
	return resp.StatusCode, body
}

// awaitHeldHere polls held-here on base until it answers want, for at most
// 30 s, and returns the answer.
func awaitHeldHere(t *testing.T, base, task string, want int) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := heldHere(t, base, task)
		if code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("held-here on %s still %d %v after 30 s, want %d", base, code, body, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A real `leasehold run --addr` through a sidecar that requires a token,
// whose probe listener (--probe-listen) answers without one: held-here is
// 200 there, with the run's token and owner, while the run holds the task,
// 503 on a second sidecar of the same store meanwhile, and 503 on both
// once the run has ended and released the lease.
func TestHeldHereFollowsARun(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			store := kind.url(t)
			tokenFile := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(tokenFile, []byte("held-here-e2e-token"), 0o600); err != nil {
				t.Fatal(err)
			}
			a := startSidecar(t, store, "--probe-listen", "127.0.0.1:0", "--token-file", tokenFile)
			b := startSidecar(t, store, "--probe-listen", "127.0.0.1:0")
			a.waitReady()
			b.waitReady()
			pa, pb := a.probeBase(), b.probeBase()
			if pa == a.base || pb == b.base {
				t.Fatalf("probe listeners %s, %s on the API's addresses %s, %s", pa, pb, a.base, b.base)
			}
			const task = "web%2Fprimary"
			for _, p := range []string{pa, pb} {
				if code, body := heldHere(t, p, task); code != http.StatusServiceUnavailable || body["held_here"] != false || body["task"] != "web/primary" {
					t.Fatalf("%s before the run: %d %v, want 503 held_here false", p, code, body)
				}
			}

			// The child says who it is, then waits for its stdin to close.
			run := exec.Command(leaseholdBin, "run", "--addr", a.base, "--token-file", tokenFile, "--task", "web/primary", "--ttl", "2s",
				"--", "sh", "-c", `echo "$LEASEHOLD_OWNER $LEASEHOLD_TOKEN"; exec cat >/dev/null`)
			run.Env = cleanEnv()
			stdin, err := run.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := run.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			run.Stderr = &stderr
			if err := run.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if run.ProcessState == nil {
					_ = run.Process.Kill()
					_ = run.Wait()
				}
			})
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				t.Fatalf("the run's child printed nothing: %v\n%s", err, stderr.String())
			}
			owner, token, _ := strings.Cut(strings.TrimSpace(line), " ")
			wantToken, err := strconv.ParseFloat(token, 64)
			if err != nil || owner == "" {
				t.Fatalf("child printed %q, want its owner and token", line)
			}

			body := awaitHeldHere(t, pa, task, http.StatusOK)
			if body["held_here"] != true || body["task"] != "web/primary" || body["token"] != wantToken || body["owner"] != owner {
				t.Fatalf("held-here on the run's sidecar: %v, want owner %s and token %s", body, owner, token)
			}
			// Held, but not through b: b's probe listener and b's API say so.
			if code, body := heldHere(t, pb, task); code != http.StatusServiceUnavailable {
				t.Fatalf("held-here on the other sidecar during the run: %d %v, want 503", code, body)
			}
			if code, _ := heldHere(t, b.base, task); code != http.StatusServiceUnavailable {
				t.Fatalf("held-here on the other sidecar's API during the run: %d, want 503", code)
			}
			if r := b.call("GET", "/v1/leases/"+task, nil); r.Body["held"] != true {
				t.Fatalf("the lease as the other sidecar reads it: %s, want held", r.Raw)
			}
			// The run's sidecar wants its token on its API, not on the probe listener.
			if code, _ := heldHere(t, a.base, task); code != http.StatusUnauthorized {
				t.Fatalf("held-here on the API of the sidecar with a token, without one: %d, want 401", code)
			}
			if r := a.callWithToken("held-here-e2e-token", "GET", "/v1/leases/"+task+"/held-here", nil); r.Status != http.StatusOK {
				t.Fatalf("held-here on the API with the token: %s", r.Raw)
			}
			// Only the probe routes are served there.
			if resp, err := http.Get(pa + "/v1/leases/" + task); err != nil || resp.StatusCode != http.StatusNotFound {
				t.Fatalf("GET the lease on the probe listener: %v %v, want 404", resp, err)
			} else {
				resp.Body.Close()
			}

			stdin.Close()
			if err := run.Wait(); err != nil {
				t.Fatalf("leasehold run: %v\n%s", err, stderr.String())
			}
			b.waitFree(task)
			for _, p := range []string{pa, pb} {
				if code, body := heldHere(t, p, task); code != http.StatusServiceUnavailable {
					t.Fatalf("%s after the run: %d %v, want 503", p, code, body)
				}
			}
		})
	}
}
