package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The scheduled-job mode as users run it: five replicas whose schedulers
// fire one job every period, each fire a `leasehold run --once-per` process
// started at the period's start plus a random jitter, through two sidecars on
// one store. The job takes longer than the jitter, so a bare lock would let a
// late replica run it again after the first one released it. In every period
// exactly one replica runs the job; the four others exit 79 with one line
// naming the replica that ran it; nothing else exits; tokens rise period by
// period.
func TestScheduledJobOncePerPeriod(t *testing.T) {
	t.Parallel()
	const (
		replicas = 5
		periods  = 20
		// period is long enough that a replica started up to jitter late on
		// a loaded machine still fires well inside the first half of it:
		// --once-per holds the task for half the period.
		period = 4 * time.Second
		jitter = time.Second
		// job is how long the job runs: much shorter than the jitter, so
		// most late replicas fire after it ended and released the lease,
		// where only the minimum hold keeps them from running it again.
		job = "0.2"
	)
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			store := kind.url(t)
			a, b := startPair(t, store)
			sidecars := []*sidecar{a, b}
			runs := t.TempDir()

			type fire struct {
				period, replica int
				owner           string
				code            int
				stderr          string
			}
			fires := make([]fire, 0, replicas*periods)
			var mu sync.Mutex
			var wg sync.WaitGroup
			start := time.Now().Add(500 * time.Millisecond)
			for k := range periods {
				for r := range replicas {
					at := start.Add(time.Duration(k)*period + rand.N(jitter))
					wg.Go(func() {
						time.Sleep(time.Until(at))
						owner := fmt.Sprintf("replica-%d#period-%d", r, k)
						out := filepath.Join(runs, fmt.Sprintf("period-%02d.replica-%d", k, r))
						cmd := exec.Command(leaseholdBin, "run", "--addr", sidecars[r%2].base, "--task", "reports/hourly",
							"--once-per", period.String(), "--ttl", "2s", "--owner", owner,
							"--", "sh", "-c", `echo "$LEASEHOLD_OWNER $LEASEHOLD_TOKEN" > "$1"; sleep `+job, "job", out)
						cmd.Env = cleanEnv()
						var stderr bytes.Buffer
						cmd.Stderr = &stderr
						_ = cmd.Run()
						mu.Lock()
						fires = append(fires, fire{k, r, owner, cmd.ProcessState.ExitCode(), stderr.String()})
						mu.Unlock()
					})
				}
			}
			wg.Wait()

			// Who ran each period: the files the jobs wrote.
			ranBy := map[int]string{}
			tokens := map[int]int64{}
			entries, err := os.ReadDir(runs)
			if err != nil {
				t.Fatal(err)
			}
			perPeriod := map[int]int{}
			for _, e := range entries {
				var k, r int
				if _, err := fmt.Sscanf(e.Name(), "period-%d.replica-%d", &k, &r); err != nil {
					t.Fatalf("stray file %s", e.Name())
				}
				data, err := os.ReadFile(filepath.Join(runs, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				owner, token, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
				perPeriod[k]++
				ranBy[k] = owner
				tokens[k], _ = strconv.ParseInt(token, 10, 64)
			}
			for k := range periods {
				if perPeriod[k] != 1 {
					t.Errorf("period %d: the job ran %d times, want exactly once", k, perPeriod[k])
				}
			}
			for k := 1; k < periods; k++ {
				if tokens[k] <= tokens[k-1] {
					t.Errorf("period %d ran under token %d, period %d under %d: tokens must rise", k, tokens[k], k-1, tokens[k-1])
				}
			}

			skippedLine := regexp.MustCompile(`msg="skipped: this period's job is another replica's" task=reports/hourly period=4s run_by=(\S+) state=(running|done) started_at=\S+ free_at=\S+`)
			sort.Slice(fires, func(i, j int) bool {
				return fires[i].period < fires[j].period || fires[i].period == fires[j].period && fires[i].replica < fires[j].replica
			})
			skipped := 0
			states := map[string]int{}
			for _, f := range fires {
				switch {
				case f.owner == ranBy[f.period]:
					if f.code != 0 {
						t.Errorf("period %d: the replica that ran the job exited %d, want 0\n%s", f.period, f.code, f.stderr)
					}
				case f.code == 79:
					skipped++
					lines := strings.Split(strings.TrimSpace(f.stderr), "\n")
					m := skippedLine.FindStringSubmatch(f.stderr)
					switch {
					case len(lines) != 1 || m == nil:
						t.Errorf("period %d, replica %d skipped; its stderr is not one skipped line:\n%s", f.period, f.replica, f.stderr)
					case m[1] != ranBy[f.period]:
						t.Errorf("period %d, replica %d skipped naming %s; %s ran it", f.period, f.replica, m[1], ranBy[f.period])
					default:
						states[m[2]]++
					}
				default:
					t.Errorf("period %d, replica %d exited %d, want 0 (ran) or 79 (skipped)\n%s", f.period, f.replica, f.code, f.stderr)
				}
			}
			if want := periods * (replicas - 1); skipped != want {
				t.Errorf("%d fires skipped, want %d", skipped, want)
			}
			// Each period's run is in the history, with its outcome.
			r := a.call("GET", "/v1/leases/reports%2Fhourly/history?limit=1000", nil)
			var hist struct {
				Events []struct {
					Kind  string `json:"kind"`
					Owner string `json:"owner"`
					Run   *struct {
						Outcome    string `json:"outcome"`
						ExitCode   *int   `json:"exit_code"`
						DurationMS int64  `json:"duration_ms"`
					} `json:"run"`
				} `json:"events"`
			}
			if err := json.Unmarshal([]byte(r.Raw), &hist); err != nil {
				t.Fatalf("history: %v: %s", err, r.Raw)
			}
			recorded := 0
			for _, e := range hist.Events {
				if e.Kind != "released" {
					continue
				}
				if e.Run == nil || e.Run.Outcome != "succeeded" || e.Run.ExitCode == nil || *e.Run.ExitCode != 0 || e.Run.DurationMS < 200 {
					t.Errorf("released event of %s: run %+v, want succeeded, exit 0, at least the job's 200 ms", e.Owner, e.Run)
					continue
				}
				recorded++
			}
			if recorded != periods {
				t.Errorf("the history has %d runs with their outcome, want %d", recorded, periods)
			}
			if states["done"] == 0 {
				t.Errorf("no replica fired after the job had ended: the minimum hold was never what skipped one")
			}
			t.Logf("%s: %d periods × %d replicas: one run per period, %d skipped (%d while the job ran, %d after it ended)",
				kind.name, periods, replicas, skipped, states["running"], states["done"])
		})
	}
}
