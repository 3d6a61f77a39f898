package sqlite

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/leasecore"
)

// The multi-process tests re-run this test binary as helper processes: the
// environment names the role, the shared file and the owner, and the helper
// talks to its parent over stdin/stdout with lines prefixed helperPrefix.
const (
	helperRoleEnv  = "LEASEHOLD_SQLITE_HELPER"
	helperPathEnv  = "LEASEHOLD_SQLITE_HELPER_PATH"
	helperOwnerEnv = "LEASEHOLD_SQLITE_HELPER_OWNER"
	helperCountEnv = "LEASEHOLD_SQLITE_HELPER_COUNT"
	helperPrefix   = "leasehold-helper: "
)

const (
	roleClaim   = "claim"   // claim tasks contested-0…n-1 once each
	roleChurn   = "churn"   // claim-then-release task churn n times
	roleMigrate = "migrate" // migrate a fresh file
)

// helperProcesses is how many processes join the parent in each test.
const helperProcesses = 3

// TestHelperProcess is not a test: it is the body of a helper process, and
// returns at once unless the helper environment is set.
func TestHelperProcess(t *testing.T) {
	t.Parallel()
	role := os.Getenv(helperRoleEnv)
	if role == "" {
		return
	}
	path, owner := os.Getenv(helperPathEnv), os.Getenv(helperOwnerEnv)
	n, _ := strconv.Atoi(os.Getenv(helperCountEnv))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("helper %s: Open: %v", owner, err)
	}
	defer s.Close()

	// Open the connections now, so that no process starts the race with
	// a head start; a migrating helper starts cold, as a fresh sidecar does.
	if role != roleMigrate {
		if err := errors.Join(s.writer.PingContext(ctx), s.reader.PingContext(ctx)); err != nil {
			t.Fatalf("helper %s: connect: %v", owner, err)
		}
	}
	// Ready, then wait for the parent's go so that every process starts
	// its work at the same moment.
	fmt.Printf("%sready\n", helperPrefix)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatalf("helper %s: waiting for go: %v", owner, err)
	}
	result, err := work(ctx, s, role, owner, n)
	if err != nil {
		t.Fatalf("helper %s: %v", owner, err)
	}
	out, err := json.Marshal(result)
	if err != nil {
		t.Fatalf("helper %s: %v", owner, err)
	}
	fmt.Printf("%sresult %s\n", helperPrefix, out)
}

// outcome is what one process saw of one claim.
type outcome struct {
	Task     string `json:"task"`
	Acquired bool   `json:"acquired"`
	Token    int64  `json:"token,omitempty"`
	Holder   string `json:"holder,omitempty"` // when held
}

// result is what a process reports: the outcomes of its claims (roleClaim)
// or the tokens it was granted (roleChurn).
type result struct {
	Owner    string    `json:"owner"`
	Outcomes []outcome `json:"outcomes,omitempty"`
	Tokens   []int64   `json:"tokens,omitempty"`
}

// work does role's part, in a helper process or in the parent.
func work(ctx context.Context, s *Store, role, owner string, n int) (result, error) {
	r := result{Owner: owner}
	switch role {
	case roleMigrate:
		return r, s.Migrate(ctx)
	case roleClaim:
		for i := range n {
			task := fmt.Sprintf("contested-%d", i)
			lease, err := s.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Hour})
			var held *leasecore.HeldError
			switch {
			case err == nil:
				r.Outcomes = append(r.Outcomes, outcome{Task: task, Acquired: true, Token: lease.Token})
			case errors.As(err, &held):
				r.Outcomes = append(r.Outcomes, outcome{Task: task, Holder: held.Holder.Owner})
			default:
				return r, fmt.Errorf("claim %s: %w", task, err)
			}
		}
		return r, nil
	case roleChurn:
		for len(r.Tokens) < n {
			lease, err := s.Claim(ctx, leasecore.ClaimParams{Task: "churn", Owner: owner, TTL: time.Hour})
			if errors.Is(err, leasecore.ErrHeld) {
				continue // another process holds it between its claim and release
			}
			if err != nil {
				return r, fmt.Errorf("claim: %w", err)
			}
			r.Tokens = append(r.Tokens, lease.Token)
			released, err := s.Release(ctx, leasecore.ReleaseParams{Task: "churn", Owner: owner, Token: lease.Token})
			if err != nil || !released {
				return r, fmt.Errorf("release token %d: released=%v, err=%v", lease.Token, released, err)
			}
		}
		return r, nil
	}
	return r, fmt.Errorf("unknown role %q", role)
}

// helper is a running helper process.
type helper struct {
	owner  string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string       // helperPrefix lines from stdout, prefix removed
	output *lockedbuf.Buffer // everything it wrote, for failure messages
}

// startHelper starts a helper process for role on path, killed when t ends
// if it has not exited by then.
func startHelper(t *testing.T, role, path, owner string, n int) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(),
		helperRoleEnv+"="+role, helperPathEnv+"="+path, helperOwnerEnv+"="+owner, helperCountEnv+"="+strconv.Itoa(n))
	h := &helper{owner: owner, cmd: cmd, lines: make(chan string, 16), output: &lockedbuf.Buffer{}}
	cmd.Stderr = h.output
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper %s: %v", owner, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
		for sc.Scan() {
			line := sc.Text()
			h.output.Write([]byte(line + "\n"))
			if rest, ok := strings.CutPrefix(line, helperPrefix); ok {
				h.lines <- rest
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill() // our own child, by its PID
			<-done
			_ = cmd.Wait()
		}
	})
	return h
}

// expect waits for the helper's next line, which must start with want, and
// returns the rest.
func (h *helper) expect(t *testing.T, ctx context.Context, want string) string {
	t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			t.Fatalf("helper %s ended before %q:\n%s", h.owner, want, h.output)
		}
		rest, found := strings.CutPrefix(line, want)
		if !found {
			t.Fatalf("helper %s said %q, want %q…:\n%s", h.owner, line, want, h.output)
		}
		return strings.TrimSpace(rest)
	case <-ctx.Done():
		t.Fatalf("helper %s: no %q before the deadline:\n%s", h.owner, want, h.output)
	}
	return ""
}

// finish reads the helper's result and waits for it to exit cleanly.
func (h *helper) finish(t *testing.T, ctx context.Context) result {
	t.Helper()
	raw := h.expect(t, ctx, "result")
	for range h.lines { // drain until stdout closes
	}
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("helper %s: %v:\n%s", h.owner, err, h.output)
	}
	var r result
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatalf("helper %s result %q: %v", h.owner, raw, err)
	}
	return r
}

// race runs role in helperProcesses helper processes and in this one at
// once, all over the file at path, and returns every process's result.
func race(t *testing.T, role, path string, n int, parent *Store) []result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)

	var helpers []*helper
	for i := range helperProcesses {
		helpers = append(helpers, startHelper(t, role, path, fmt.Sprintf("process-%d", i+1), n))
	}
	for _, h := range helpers {
		h.expect(t, ctx, "ready")
	}
	for _, h := range helpers {
		if _, err := io.WriteString(h.stdin, "go\n"); err != nil {
			t.Fatalf("helper %s: %v", h.owner, err)
		}
	}
	if role != roleMigrate {
		if err := errors.Join(parent.writer.PingContext(ctx), parent.reader.PingContext(ctx)); err != nil {
			t.Fatalf("parent: connect: %v", err)
		}
	}
	mine, err := work(ctx, parent, role, "process-0", n)
	if err != nil {
		t.Fatalf("parent: %v", err)
	}
	results := []result{mine}
	for _, h := range helpers {
		results = append(results, h.finish(t, ctx))
	}
	return results
}

// TestProcessesClaimingOneTaskGetOneHolder: four processes claim the same
// tasks on one file at the same moment; for every task exactly one acquires
// and every other one is told it is held by that one.
func TestProcessesClaimingOneTaskGetOneHolder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	parent := openMigrated(t, path)
	const tasks = 20
	results := race(t, roleClaim, path, tasks, parent)

	wins := map[string]int{}

	for i := range tasks {
		task := fmt.Sprintf("contested-%d", i)
		var winners []string
		holders := map[string]int{}
		for _, r := range results {
			o := r.Outcomes[i]
			if o.Task != task {
				t.Fatalf("%s: outcome %d is for %q", r.Owner, i, o.Task)
			}
			if o.Acquired {
				winners = append(winners, r.Owner)
				wins[r.Owner]++
				if o.Token != 1 {
					t.Errorf("%s: %s acquired with token %d, want 1", task, r.Owner, o.Token)
				}
			} else {
				holders[o.Holder]++
			}
		}
		if len(winners) != 1 {
			t.Errorf("%s: acquired by %v, want exactly one process", task, winners)
			continue
		}
		if want := map[string]int{winners[0]: len(results) - 1}; !maps.Equal(holders, want) {
			t.Errorf("%s: refused processes saw holders %v, want %v", task, holders, want)
		}
	}
	t.Logf("tasks acquired per process: %v", wins)
}

// TestProcessesChurningOneTaskGetUniqueTokens: four processes each claim and
// release one task many times; the tokens granted are 1…N with no repeats,
// and rise within each process.
func TestProcessesChurningOneTaskGetUniqueTokens(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	parent := openMigrated(t, path)
	const perProcess = 25
	results := race(t, roleChurn, path, perProcess, parent)

	var all []int64
	for _, r := range results {
		if len(r.Tokens) != perProcess {
			t.Errorf("%s got %d tokens, want %d", r.Owner, len(r.Tokens), perProcess)
		}
		if !slices.IsSorted(r.Tokens) {
			t.Errorf("%s got tokens out of order: %v", r.Owner, r.Tokens)
		}
		all = append(all, r.Tokens...)
	}
	slices.Sort(all)
	for i, tok := range all {
		if tok != int64(i+1) {
			t.Fatalf("tokens granted across processes, sorted: %v; want 1…%d, each once", all, len(all))
		}
	}

	// Each grant and its release are in the history, once, in token order:
	// the events were written in the transactions that made the changes.
	events, err := parent.History(context.Background(), "churn", leasecore.MaxHistoryLimit)
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	if len(events) != 2*len(all) {
		t.Fatalf("history of churn has %d events, want %d (acquired and released per grant)", len(events), 2*len(all))
	}
	for i, e := range events { // newest first: released N, acquired N, released N-1, …
		tok := int64(len(all) - i/2)
		kind := leasecore.EventReleased
		if i%2 == 1 {
			kind = leasecore.EventAcquired
		}
		if e.Kind != kind || e.Token != tok {
			t.Fatalf("history event %d (newest first) is %s of token %d, want %s of token %d", i, e.Kind, e.Token, kind, tok)
		}
	}
}

// TestProcessesMigratingAFreshFile: four processes migrate one new file at
// once; all succeed and each migration is recorded once.
func TestProcessesMigratingAFreshFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	parent := openStore(t, path)
	race(t, roleMigrate, path, 0, parent)

	ctx := context.Background()
	if err := parent.Ping(ctx); err != nil {
		t.Fatalf("Ping after the race: %v", err)
	}
	var rows, maxVersion int
	err := parent.reader.QueryRowContext(ctx, `SELECT count(*), max(version) FROM leasehold_schema_migrations`).Scan(&rows, &maxVersion)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(parent.migrations); rows != want || maxVersion != want {
		t.Errorf("leasehold_schema_migrations has %d rows up to version %d, want %d", rows, maxVersion, want)
	}
}
