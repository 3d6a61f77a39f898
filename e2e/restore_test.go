package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// restoreTasks prefixes the tasks of the restore tests: the watches follow
// them only, not leasehold's own pruner lease that each sidecar start adds.
const restoreTasks = "rs-"

// cliWatch is a `leasehold watch --json` process and the events it printed.
type cliWatch struct {
	t      *testing.T
	stderr *lockedbuf.Buffer

	mu     sync.Mutex
	events []watchEvent  // as printed, in order
	more   chan struct{} // closed and replaced on every line printed
	done   chan struct{} // closed when stdout ends
}

// startCLIWatch runs `leasehold watch --addr base --json --prefix rs-
// --since 0` until the test ends.
func startCLIWatch(t *testing.T, base string) *cliWatch {
	t.Helper()
	cmd := exec.Command(leaseholdBin, "watch", "--addr", base, "--json", "--prefix", restoreTasks, "--since", "0")
	cmd.Env = cleanEnv()
	w := &cliWatch{t: t, stderr: &lockedbuf.Buffer{}, more: make(chan struct{}), done: make(chan struct{})}
	cmd.Stderr = w.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start leasehold watch: %v", err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev watchEvent
			if err := json.Unmarshal(sc.Bytes(), &ev.Event); err != nil {
				ev.Raw = "not JSON: " + sc.Text()
			}
			ev.ID, ev.Name = strconv.FormatInt(ev.Event.ID, 10), ev.Event.Kind
			w.mu.Lock()
			w.events = append(w.events, ev)
			close(w.more)
			w.more = make(chan struct{})
			w.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("leasehold watch (pid %d) stderr:\n%s", cmd.Process.Pid, w.stderr.String())
		}
	})
	return w
}

// waitFor waits up to a minute until the watch has printed an event that
// ok accepts, and returns everything it printed.
func (w *cliWatch) waitFor(what string, ok func(watchEvent) bool) []watchEvent {
	w.t.Helper()
	deadline := time.After(time.Minute)
	for {
		w.mu.Lock()
		evs, more := append([]watchEvent(nil), w.events...), w.more
		w.mu.Unlock()
		for _, ev := range evs {
			if ok(ev) {
				return evs
			}
		}
		select {
		case <-more:
		case <-w.done:
			w.t.Fatalf("leasehold watch ended before printing %s; stderr:\n%s", what, w.stderr.String())
		case <-deadline:
			w.t.Fatalf("leasehold watch did not print %s within a minute; it printed %v; stderr:\n%s", what, watchIDs(evs), w.stderr.String())
		}
	}
}

func watchIDs(evs []watchEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%d:%s:%s", ev.Event.ID, ev.Event.Kind, ev.Event.Task))
	}
	return out
}

// claimRelease claims and releases each of tasks through s.
func claimRelease(t *testing.T, s *sidecar, tasks ...string) {
	t.Helper()
	for _, task := range tasks {
		if r := s.call("POST", "/v1/leases/"+task+"/claim", map[string]any{"owner": "rs", "ttl_ms": 60000}); r.Status != http.StatusOK {
			t.Fatalf("claim %s: %d %v", task, r.Status, r.Body)
		}
		if r := s.call("POST", "/v1/leases/"+task+"/release", map[string]any{"owner": "rs"}); r.Status != http.StatusOK {
			t.Fatalf("release %s: %d %v", task, r.Status, r.Body)
		}
	}
}

// historyNow is every event of tasks that the store holds, through s,
// in id order, as "id:kind:task".
func historyNow(t *testing.T, s *sidecar, tasks []string) []string {
	t.Helper()
	type ev struct {
		id         int64
		kind, task string
	}
	var all []ev
	for _, task := range tasks {
		r := s.call("GET", "/v1/leases/"+task+"/history?limit=1000", nil)
		if r.Status != http.StatusOK {
			t.Fatalf("history of %s: %d %v", task, r.Status, r.Body)
		}
		for _, e := range r.Body["events"].([]any) {
			m := e.(map[string]any)
			all = append(all, ev{int64(m["id"].(float64)), m["kind"].(string), m["task"].(string)})
		}
	}
	var out []string
	for len(all) > 0 { // a few dozen events: a selection sort reads plainly
		k := 0
		for i := range all {
			if all[i].id < all[k].id {
				k = i
			}
		}
		out = append(out, fmt.Sprintf("%d:%s:%s", all[k].id, all[k].kind, all[k].task))
		all = append(all[:k], all[k+1:]...)
	}
	return out
}

// TestWatchAfterRestore: a store restored from an older copy under its
// watchers, on both stores. The watchers' positions are then ahead of the
// restored history, and the ids after it are handed out again to new
// events. `leasehold watch` and the watch stream must say so and start
// over, so that no event written after the restore goes unseen:
//   - SQLite: the sidecar is stopped, the older copy of the file put back
//     and the sidecar started again on the same address (its file guard
//     refuses a file replaced under it), while `leasehold watch` keeps
//     reconnecting with Last-Event-ID; then a watch stream that resumes
//     from the old position starts with reset;
//   - PostgreSQL: a pg_dump taken earlier is restored (tables dropped and
//     recreated, the id sequence set back) under a running sidecar, whose
//     watch hub must notice that the history went back and reset its live
//     streams, the CLI's among them.
func TestWatchAfterRestore(t *testing.T) {
	t.Parallel()
	keep := []string{"rs-keep-1", "rs-keep-2", "rs-keep-3"}
	var lost []string
	for i := range 8 {
		lost = append(lost, fmt.Sprintf("rs-lost-%d", i))
	}
	after := []string{"rs-after-1", "rs-after-2"}
	all := append(append(append([]string(nil), keep...), lost...), after...)

	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "leasehold.db")
		listen := fmt.Sprintf("127.0.0.1:%d", freeLocalPort(t))
		s := startSidecar(t, "sqlite:"+path, "--listen", listen)
		s.waitReady()
		claimRelease(t, s, keep...)
		restart := func(between func()) {
			t.Helper()
			if code := s.stop(syscall.SIGTERM); code != 0 {
				t.Fatalf("sidecar exited %d on SIGTERM", code)
			}
			between()
			s = startSidecar(t, "sqlite:"+path, "--listen", listen)
			s.waitReady()
		}
		backup := filepath.Join(dir, "backup")
		restart(func() { copyDB(t, path, backup) })

		cli := startCLIWatch(t, s.base)
		claimRelease(t, s, lost...)
		before := cli.waitFor("the last event before the restore", func(ev watchEvent) bool {
			return ev.Event.Task == lost[len(lost)-1] && ev.Event.Kind == "released"
		})
		oldHigh := before[len(before)-1].Event.ID

		restart(func() { copyDB(t, backup, path) })
		claimRelease(t, s, after...)
		printed := cli.waitFor("the events written after the restore", func(ev watchEvent) bool {
			return ev.Event.Task == after[len(after)-1] && ev.Event.Kind == "released"
		})
		checkStartedOver(t, cli, printed[len(before):], historyNow(t, s, all), oldHigh)

		// A client that resumes from its old position is told at once.
		w := s.openWatch("/v1/watch?prefix="+restoreTasks, strconv.FormatInt(oldHigh, 10))
		checkResetStream(t, w, oldHigh, historyNow(t, s, all))
	})

	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgDump, psql := pgtest.Tool(t, "pg_dump"), pgtest.Tool(t, "psql")
		db := pgtest.NewDatabase(t)
		s := startSidecar(t, db)
		s.waitReady()
		claimRelease(t, s, keep...)
		dump := filepath.Join(t.TempDir(), "dump.sql")
		run(t, pgDump, "--clean", "--if-exists", "--no-owner", "--file", dump, "--dbname", db)

		cli := startCLIWatch(t, s.base)
		live := s.openWatch("/v1/watch?prefix="+restoreTasks+"&since=0", "")
		claimRelease(t, s, lost...)
		before := cli.waitFor("the last event before the restore", func(ev watchEvent) bool {
			return ev.Event.Task == lost[len(lost)-1] && ev.Event.Kind == "released"
		})
		oldHigh := before[len(before)-1].Event.ID
		// The live stream has sent the replay's end (ready) and the last
		// event before the restore, in whichever order: its replay may
		// have read the history after the lost events were written.
		for seenReady, seenHigh := false, false; !seenReady || !seenHigh; {
			switch ev := live.next(); {
			case ev.Name == "ready":
				seenReady = true
			case ev.Event.ID == oldHigh:
				seenHigh = true
			}
		}

		// The restore, in one transaction, under the running sidecar.
		run(t, psql, "--quiet", "--no-psqlrc", "--set", "ON_ERROR_STOP=1", "--single-transaction", "--file", dump, "--dbname", db)
		claimRelease(t, s, after...)
		printed := cli.waitFor("the events written after the restore", func(ev watchEvent) bool {
			return ev.Event.Task == after[len(after)-1] && ev.Event.Kind == "released"
		})
		want := historyNow(t, s, all)
		checkStartedOver(t, cli, printed[len(before):], want, oldHigh)
		checkResetStream(t, live, oldHigh, want)
	})
}

// checkStartedOver fails t unless the CLI said once that the history went
// back, and printed, after what it printed before, the restored history
// and every event written after the restore: want, whole and in order.
func checkStartedOver(t *testing.T, cli *cliWatch, printed []watchEvent, want []string, oldHigh int64) {
	t.Helper()
	if got := watchIDs(printed); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("after the restore, leasehold watch printed\n%v\nwant the store's history now\n%v", got, want)
	}
	msg := cli.stderr.String()
	if n := strings.Count(msg, "history went back"); n != 1 || !strings.Contains(msg, strconv.FormatInt(oldHigh, 10)) {
		t.Errorf("leasehold watch said %d times that the history went back (want once, naming %d):\n%s", n, oldHigh, msg)
	}
}

// checkResetStream fails t unless w's next events are a reset from
// position oldHigh (id 0), then want, whole and in order.
func checkResetStream(t *testing.T, w *watchStream, oldHigh int64, want []string) {
	t.Helper()
	ev := w.next()
	var reset struct {
		Position int64 `json:"position"`
		Newest   int64 `json:"newest"`
	}
	if ev.Name != "reset" || ev.ID != "0" || json.Unmarshal([]byte(ev.Raw), &reset) != nil || reset.Position != oldHigh || reset.Newest >= oldHigh {
		t.Fatalf("event %s (id %q) %s, want reset (id 0) from position %d", ev.Name, ev.ID, ev.Raw, oldHigh)
	}
	got := watchIDs(w.changes(len(want)))
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("after the reset the stream sent\n%v\nwant\n%v", got, want)
	}
}

// copyDB copies the SQLite database at from (with its WAL, if one is left)
// to to, replacing what was there; no process may have either open.
func copyDB(t *testing.T, from, to string) {
	t.Helper()
	if err := copyDBFiles(from, to); err != nil {
		t.Fatal(err)
	}
}

// copyDBFiles is copyDB for callers outside the test's goroutine.
func copyDBFiles(from, to string) error {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(to + suffix); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(from + suffix)
		if os.IsNotExist(err) && suffix != "" {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(to+suffix, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// run runs a program to completion, failing t with its output on error.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = cleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}
