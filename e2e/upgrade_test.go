package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/e2e/chaos"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/internal/harness/releasebuild"
	"github.com/leasehold/leasehold/internal/release"
)

// upgradeDurationEnv overrides how long each store's load runs at least in
// the rolling upgrade (`make chaos-upgrade DURATION=10m` sets it); the
// upgrade's steps then repeat, in turn, for as long as the load runs.
const upgradeDurationEnv = "LEASEHOLD_UPGRADE_DURATION"

// defaultUpgradeDuration keeps the test within its share of `make test`.
const defaultUpgradeDuration = 30 * time.Second

// upgradeGrants is each store's grant target in the bounded run.
var upgradeGrants = grantTarget{short: 250, long: 10000}

// TestRollingUpgrade upgrades a fleet under load, as docs/compatibility.md
// tells an operator to: three sidecars of the latest release (built from the
// commit RELEASES records for it, out of this clone's history) serve one
// store under the chaos load, with keepalive holders and a watcher; the
// tree's binary migrates the store while they serve; the sidecars are
// replaced one by one (SIGTERM, then the new binary at the same address);
// then one is rolled back to the release. The chaos checker must find no
// violation and a linearizable history, the watcher every event, and every
// keepalive holder must either still hold its lease, under its token, or
// have been told it lost it. PostgreSQL, and SQLite with the processes
// sharing one file.
//
// Until a second release exists, "old" is the first release and "new" the
// tree, and both may know the same schema: the migration is then a no-op,
// and the dance still runs in full.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	dur := defaultUpgradeDuration
	soak := false
	if v := os.Getenv(upgradeDurationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive Go duration such as 10m", upgradeDurationEnv, v)
		}
		dur, soak = d, true
	}
	latest := releasebuild.Latest(t)
	oldBin := releasebuild.Build(t, latest, releasebuild.Leasehold)
	py := python3(t)
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		runUpgrade(t, latest, oldBin, py, pgtest.NewDatabase(t), dur, soak)
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		runUpgrade(t, latest, oldBin, py, "sqlite:"+filepath.Join(t.TempDir(), "leasehold.db"), dur, soak)
	})
}

func runUpgrade(t *testing.T, latest release.Release, oldBin, py, store string, dur time.Duration, soak bool) {
	u := startUpgradeFleet(t, oldBin, store)
	if got := u.version(t, 0); got != latest.Version {
		t.Fatalf("the release's sidecar says version %q, want %s", got, latest.Version)
	}
	holders := startHolders(t, u.fleet, 6)

	steps := []chaos.Fault{
		chaos.NewFault("migrate-new", func(ctx context.Context) error {
			out, err := exec.CommandContext(ctx, leaseholdBin, "migrate", "--store", store).CombinedOutput()
			if err != nil {
				return fmt.Errorf("leasehold migrate with the new binary: %v\n%s", err, out)
			}
			return nil
		}),
		u.replace(0, leaseholdBin, "replace-0-new"),
		u.replace(1, leaseholdBin, "replace-1-new"),
		u.replace(2, leaseholdBin, "replace-2-new"),
		u.replace(1, oldBin, "rollback-1-old"),
	}
	runChaos(t, u.fleet, py, dur, upgradeGrants.of(dur), steps, func(c *chaos.Config) {
		c.TaskPrefix = "upgrade/" + t.Name() + "-"
		if !soak {
			c.Rounds = 1 // the upgrade once, in order
		}
	})
	holders.finish(t, u.fleet)

	// The fleet ends as the steps left it: 0 and 2 on the tree's build, 1 back on the release.
	for i, want := range []bool{false, true, false} {
		if got := u.version(t, i); (got == latest.Version) != want {
			t.Errorf("sidecar %d says version %q at the end; on the release (%s): %v, want %v", i, got, latest.Version, got == latest.Version, want)
		}
	}
}

// upgradeFleet is a fleet whose sidecars may run different binaries.
type upgradeFleet struct{ *fleet }

// startUpgradeFleet starts three sidecars of bin on store.
func startUpgradeFleet(t *testing.T, bin, store string) upgradeFleet {
	t.Helper()
	f := &fleet{t: t, stores: []string{store, store, store}, watchCheck: true}
	for range 3 {
		s, err := launchBin(t, bin, nil, store)
		if err != nil {
			t.Fatal(err)
		}
		f.procs = append(f.procs, s)
		f.addrs = append(f.addrs, s.base[len("http://"):])
	}
	for _, s := range f.procs {
		s.waitReady()
	}
	return upgradeFleet{f}
}

// replace is the step "sidecar i stops gracefully (SIGTERM) and bin starts
// at its address": a pod of a rolling update.
func (u upgradeFleet) replace(i int, bin, name string) chaos.Fault {
	return chaos.NewFault(name, func(context.Context) error {
		old := u.proc(i)
		_ = old.proc.Signal(syscall.SIGTERM)
		select {
		case <-old.proc.Done():
		case <-time.After(30 * time.Second):
			return fmt.Errorf("sidecar %d did not stop within 30s of SIGTERM", i)
		}
		if err := u.relaunch(i, bin); err != nil {
			return fmt.Errorf("start %s as sidecar %d: %w", filepath.Base(bin), i, err)
		}
		return nil
	})
}

// version is what sidecar i's /healthz says its build is.
func (u upgradeFleet) version(t *testing.T, i int) string {
	t.Helper()
	resp, err := http.Get(u.proc(i).base + "/healthz")
	if err != nil {
		t.Fatalf("healthz of sidecar %d: %v", i, err)
	}
	defer resp.Body.Close()
	var h struct{ Version string }
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("healthz of sidecar %d: %v", i, err)
	}
	return h.Version
}

// holders are keepalive streams held through the fleet for the whole run,
// each on a task of its own. A holder told it lost its lease (its sidecar
// stopped, or a renewal came too late) opens a new stream through the next
// sidecar, as an app would.
type holders struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	current  []*client.Holder // each holder's live stream, nil between streams
	sessions []int            // streams opened, per holder
	lost     []int            // losses told, per holder
	tokens   [][]int64        // the tokens of each holder's streams, in order
	errs     []error
}

func holderTask(t *testing.T, i int) string {
	return fmt.Sprintf("upgrade/%s-keep-%d", t.Name(), i)
}

func startHolders(t *testing.T, f *fleet, n int) *holders {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &holders{cancel: cancel, current: make([]*client.Holder, n), sessions: make([]int, n), lost: make([]int, n), tokens: make([][]int64, n)}
	for i := range n {
		task, owner := holderTask(t, i), fmt.Sprintf("keeper-%d", i)
		h.wg.Go(func() {
			for try := i; ctx.Err() == nil; try++ {
				c, err := client.New(f.urls()[try%len(f.addrs)], client.WithOwner(owner))
				if err != nil {
					h.fail(err)
					return
				}
				k, err := c.Keepalive(ctx, client.KeepaliveParams{Task: task, TTL: 2 * time.Second, Wait: 5 * time.Second})
				if err != nil {
					// A sidecar mid-replacement, or the task still held by
					// this owner's previous stream until its ttl runs out.
					select {
					case <-ctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
					continue
				}
				h.mu.Lock()
				h.current[i] = k
				h.sessions[i]++
				h.tokens[i] = append(h.tokens[i], k.Token())
				h.mu.Unlock()
				select {
				case <-k.Lost():
					h.mu.Lock()
					h.current[i] = nil
					h.lost[i]++
					h.mu.Unlock()
				case <-ctx.Done():
				}
			}
		})
	}
	return h
}

func (h *holders) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
}

// finish stops opening streams and checks every holder: one that believes
// it holds its lease must be the store's holder under its token; no
// stream's token is lower than the one before it.
func (h *holders) finish(t *testing.T, f *fleet) {
	t.Helper()
	h.cancel()
	h.wg.Wait()
	for _, err := range h.errs {
		t.Errorf("keepalive holder: %v", err)
	}
	c, err := client.New(f.urls()[0])
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for i, k := range h.current {
		task := holderTask(t, i)
		// A stream may get the token of the one before it: its owner's
		// lease outlived the stream (a sidecar stopped without releasing
		// it), and a claim by the same owner refreshes its own lease.
		for j := 1; j < len(h.tokens[i]); j++ {
			if h.tokens[i][j] < h.tokens[i][j-1] {
				t.Errorf("%s: stream %d got token %d after %d", task, j, h.tokens[i][j], h.tokens[i][j-1])
			}
		}
		if h.sessions[i] == 0 {
			t.Errorf("%s: no keepalive stream was ever granted", task)
			continue
		}
		if k == nil {
			continue // told it lost its last stream's lease, and not granted another before the end
		}
		select {
		case <-k.Lost():
			continue // told, just now
		default:
		}
		l, err := c.Get(t.Context(), task)
		switch {
		case err != nil:
			t.Errorf("%s: get: %v", task, err)
		case l == nil || l.Owner != k.Lease().Owner || l.Token != k.Token():
			// The holder still believes it holds: the store must agree,
			// unless the loss is being told right now.
			select {
			case <-k.Lost():
			case <-time.After(5 * time.Second):
				t.Errorf("%s: the holder believes it holds token %d, and was not told it lost it; the store says %+v (%v)", task, k.Token(), l, err)
			}
		default:
			held++
		}
		_ = k.Close()
	}
	chaosLogf(t, "UPGRADE %s: keepalive holders %d, streams %v, losses told %v, holding at the end %d", t.Name(), len(h.current), h.sessions, h.lost, held)
}
