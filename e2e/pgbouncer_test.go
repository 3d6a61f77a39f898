package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/pgbouncer"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// The fleet this test runs through one PgBouncer.
const (
	bouncerSidecars    = 50
	bouncerServerConns = 20 // PgBouncer's max_db_connections
	bouncerPoolSize    = 2  // each sidecar's pool_max_conns
	bouncerStreams     = 5  // sidecars that hold a keepalive stream
	bouncerPruners     = 5  // sidecars that prune every second
	bouncerSharedTasks = 5
	bouncerRounds      = 6 // claims per sidecar
)

// startPgBouncer runs PgBouncer in transaction mode in front of the
// database at dbURL, holding at most bouncerServerConns server
// connections, and returns the database's URL through it. Without
// PgBouncer the test skips (fails under CI).
func startPgBouncer(t *testing.T, dbURL string) string {
	t.Helper()
	b := pgbouncer.StartT(t, dbURL, pgbouncer.Config{ServerConns: bouncerServerConns})
	return b.URL
}

func freeLocalPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// watchServerConns counts the server connections to database db every
// 50 ms over a direct connection to the server (to another database), until
// stop is called, which returns the most seen. Only client backends count:
// an autovacuum worker on db is listed there too (a CI run saw 21, PgBouncer's
// log 20 logins).
func watchServerConns(t *testing.T, server, db string) (stop func() int) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), server)
	if err != nil {
		t.Fatal(err)
	}
	var most atomic.Int64
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		for {
			var n int64
			if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, db).Scan(&n); err == nil && n > most.Load() {
				most.Store(n)
			}
			select {
			case <-quit:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() int {
		close(quit)
		<-done
		return int(most.Load())
	}
}

// post sends a JSON POST to a sidecar, for goroutines other than the test's.
func post(base, path string, body any) (int, map[string]any, error) {
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("answer is not JSON: %s", raw)
	}
	return resp.StatusCode, out, nil
}

// Fifty sidecars share one PgBouncer in transaction mode that holds at most
// twenty server connections: migrations, claims on shared tasks (one holder
// at a time, rising fencing tokens), keepalive streams, the pruner and the
// watch all work through it.
func TestFleetThroughPgBouncer(t *testing.T) {
	server := pgtest.ServerURL(t)
	dbURL := pgtest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	stopWatch := watchServerConns(t, server, dbName)
	watching := true
	defer func() {
		if watching {
			stopWatch()
		}
	}()

	bouncer := startPgBouncer(t, dbURL)
	if out, err := runLeasehold("migrate", "--store", bouncer); err != nil {
		t.Fatalf("migrate through pgbouncer: %v\n%s", err, out)
	}
	// Declarations and history go through PgBouncer too.
	svc := openService(t, bouncer)
	fourEvents(t, svc, "nightly")

	store := bouncer + "&pool_max_conns=" + strconv.Itoa(bouncerPoolSize)
	sidecars := make([]*sidecar, bouncerSidecars)
	errs := make(chan error, bouncerSidecars)
	var wg sync.WaitGroup
	for i := range sidecars {
		wg.Go(func() {
			var extra []string
			if i < bouncerPruners {
				extra = []string{"--prune-interval", "1s"}
			}
			s, err := launchSidecar(t, store, extra...)
			if err == nil {
				err = awaitReady(s.base, 60*time.Second)
			}
			if err != nil {
				errs <- fmt.Errorf("sidecar %d: %w", i, err)
				return
			}
			sidecars[i] = s
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Keepalive streams on the last few sidecars, each on its own task. A
	// ttl of 4 s (renewals every 1.6 s) renews during the few seconds of
	// load, with room for a renewal slowed down by a busy machine (with
	// 1 s, a stream lost its lease to one slow renewal in a CI run).
	streams := make([]*keepalive, bouncerStreams)
	for i := range streams {
		s := sidecars[len(sidecars)-1-i]
		streams[i] = s.openKeepalive(fmt.Sprintf("/v1/leases/stream-%d/keepalive?owner=streamer&ttl_ms=4000", i))
		if ev := streams[i].next(); ev.Name != "acquired" {
			t.Fatalf("stream %d: first event %+v, want acquired", i, ev)
		}
	}

	// A watch on sidecar 0 hears the grants every sidecar makes, through
	// PgBouncer like everything else: it needs no session of its own.
	watch := sidecars[0].openWatch("/v1/watch?prefix=shared-", "")
	watch.ready()

	// Every sidecar claims the shared tasks in turn and releases each grant
	// at once; two owners holding one task at one instant are a violation.
	// A grant may be live from its claim's answer until its release's
	// answer, so that is how long a task is marked held (holding): a grant
	// answered while the task is marked overlaps the marked one, unless
	// that one's release had been sent already and the store committed it
	// before the new grant, its answer still on the way. Which came first
	// the watch says, in the store's order (each grant and release of a
	// task writes its event while holding the task's row, so their ids
	// follow the order they took effect in); a grant answered before the
	// marked one's release was even sent overlaps it whatever the store
	// says.
	type grant struct {
		owner     string
		releasing bool // its release has been sent
	}
	type suspect struct {
		task          int
		earlier, next int64 // tokens
	}
	var (
		mu        sync.Mutex
		holding   [bouncerSharedTasks]map[int64]*grant // by token
		suspects  []suspect
		tokens    [bouncerSharedTasks][]int64
		attempts  atomic.Int64
		failures  = make(chan error, bouncerSidecars*bouncerRounds*(bouncerSidecars+1))
		loadStart = time.Now()
	)
	for i := range holding {
		holding[i] = map[int64]*grant{}
	}
	for i, s := range sidecars {
		wg.Go(func() {
			owner := fmt.Sprintf("w%d", i)
			for r := range bouncerRounds {
				task := (i + r) % bouncerSharedTasks
				path := fmt.Sprintf("/v1/leases/shared-%d/", task)
				attempts.Add(1)
				code, body, err := post(s.base, path+"claim", map[string]any{"owner": owner, "ttl_ms": 60000})
				if err != nil || (code != http.StatusOK && code != http.StatusConflict) {
					failures <- fmt.Errorf("%s claim shared-%d: %d %v %v", owner, task, code, body, err)
					continue
				}
				if code != http.StatusOK {
					continue
				}
				lease, _ := body["lease"].(map[string]any)
				f, _ := lease["token"].(float64)
				tok := int64(f)
				mu.Lock()
				for t, g := range holding[task] {
					if !g.releasing {
						failures <- fmt.Errorf("%s was granted shared-%d (token %d) while %s held it (token %d), its release not yet sent", owner, task, tok, g.owner, t)
					} else {
						suspects = append(suspects, suspect{task: task, earlier: t, next: tok})
					}
				}
				g := &grant{owner: owner}
				holding[task][tok] = g
				tokens[task] = append(tokens[task], tok)
				mu.Unlock()
				mu.Lock()
				g.releasing = true
				mu.Unlock()
				code, body, err = post(s.base, path+"release", map[string]any{"owner": owner, "token": tok})
				if err != nil || code != http.StatusOK || body["released"] != true {
					// Not known to be released: the task stays marked.
					failures <- fmt.Errorf("%s release shared-%d: %d %v %v", owner, task, code, body, err)
					continue
				}
				mu.Lock()
				delete(holding[task], tok)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	loadTime := time.Since(loadStart)
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	grants := 0
	for task, toks := range tokens {
		grants += len(toks)
		if len(toks) == 0 {
			t.Errorf("shared-%d was never granted", task)
		}
		for j := 1; j < len(toks); j++ {
			if toks[j] <= toks[j-1] {
				t.Errorf("shared-%d: token %d granted after %d; tokens must rise", task, toks[j], toks[j-1])
			}
		}
	}

	// The watch delivered every grant and release, with its token.
	type change struct {
		task, kind string
		token      int64
	}
	eventID := map[change]int64{}
	for _, ev := range watch.changes(2 * grants) {
		eventID[change{ev.Event.Task, ev.Event.Kind, ev.Event.Token}] = ev.Event.ID
	}
	for task, toks := range tokens {
		for _, tok := range toks {
			if _, ok := eventID[change{fmt.Sprintf("shared-%d", task), "acquired", tok}]; !ok {
				t.Errorf("the watch never delivered shared-%d's grant of token %d", task, tok)
			}
		}
	}
	// A grant answered while an earlier one's release was on its way is
	// no overlap only if the store took the release first.
	overlaps := 0
	for _, sus := range suspects {
		name := fmt.Sprintf("shared-%d", sus.task)
		released, ok := eventID[change{name, "released", sus.earlier}]
		acquired := eventID[change{name, "acquired", sus.next}]
		if ok && released < acquired {
			continue
		}
		if overlaps++; overlaps > 10 {
			continue
		}
		if !ok {
			t.Errorf("%s: token %d was granted (event %d) while token %d was held, which was never released: two holders at once", name, sus.next, acquired, sus.earlier)
		} else {
			t.Errorf("%s: token %d was granted (event %d) before token %d was released (event %d): two holders at once", name, sus.next, acquired, sus.earlier, released)
		}
	}
	if overlaps > 10 {
		t.Errorf("… and %d more grants made while another owner held the task", overlaps-10)
	}

	// The streams renewed through the load and still hold their leases.
	for i, k := range streams {
		if ev := k.next(); ev.Name != "renewed" {
			t.Errorf("stream %d: event %+v, want renewed", i, ev)
		}
		if r := sidecars[0].call("POST", fmt.Sprintf("/v1/leases/stream-%d/claim", i), map[string]any{"owner": "thief"}); r.Status != http.StatusConflict {
			t.Errorf("claim of streamed task stream-%d: %d %s, want 409", i, r.Status, r.Raw)
		}
	}

	// The pruners pruned the history beyond the policy.
	deadline := time.Now().Add(60 * time.Second)
	for len(history(t, svc, "nightly")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no sidecar pruned the history of nightly within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, k := range streams {
		k.close()
	}
	watching = false
	most := stopWatch()
	if most == 0 || most > bouncerServerConns {
		t.Errorf("server connections to the database: at most %d seen, want between 1 and %d", most, bouncerServerConns)
	}
	t.Logf("%d sidecars (pool_max_conns=%d) through PgBouncer: at most %d server connections; %d claims (%d granted) in %s, %.0f claims/s; %d grants answered while the previous grant's release was on its way",
		len(sidecars), bouncerPoolSize, most, attempts.Load(), grants, loadTime.Round(time.Millisecond), float64(attempts.Load())/loadTime.Seconds(), len(suspects))
}

// A sidecar behind PgBouncer in transaction mode whose store URL lacks the
// query mode that needs (default_query_exec_mode=exec, docs/stores.md)
// cannot even migrate: pgx's default mode prepares named statements on a
// connection, and PgBouncer hands the server connection under it to other
// clients, which prepared the same names. Its answers say so, naming the
// setting, rather than that the schema is not migrated yet; a sidecar
// given the setting serves through the same PgBouncer.
func TestPgBouncerWithoutExecMode(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	// One server connection, so that every client's statements meet on it.
	b := pgbouncer.StartT(t, db, pgbouncer.Config{ServerConns: 1})
	if out, err := runLeasehold("migrate", "--store", b.URL); err != nil {
		t.Fatalf("migrate through pgbouncer: %v\n%s", err, out)
	}
	u, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("default_query_exec_mode")
	u.RawQuery = q.Encode()
	bare := u.String()
	// A client without the setting (here leasehold migrate, which finds the
	// schema in place) leaves its prepared statements on the server
	// connection, as the first sidecar of a fleet would.
	if out, err := runLeasehold("migrate", "--store", bare); err != nil {
		t.Logf("migrate without default_query_exec_mode=exec (may fail; it prepares its statements either way): %v\n%s", err, out)
	}

	s := startSidecar(t, bare)
	const why = "default_query_exec_mode=exec"
	r := s.call("GET", "/readyz", nil)
	if detail, _ := r.Body["detail"].(string); r.Status != http.StatusServiceUnavailable || !strings.Contains(detail, why) || strings.Contains(detail, "not migrated yet") {
		t.Errorf("readyz: %d %s; want 503 naming %s, not \"not migrated yet\"", r.Status, r.Raw, why)
	}
	r = s.call("POST", "/v1/leases/bare/claim", map[string]any{"owner": "w1"})
	if detail, _ := r.Body["detail"].(string); r.Status != http.StatusServiceUnavailable || r.Body["reason"] != "unavailable" ||
		!strings.Contains(detail, why) || strings.Contains(detail, "not migrated yet") {
		t.Errorf("claim: %d %s; want 503 unavailable naming %s, not \"not migrated yet\"", r.Status, r.Raw, why)
	}
	t.Logf("a sidecar behind PgBouncer without %s answers a claim: %s", why, r.Raw)

	fixed := startSidecar(t, b.URL)
	fixed.waitReady()
	if r := fixed.call("POST", "/v1/leases/bare/claim", map[string]any{"owner": "w1"}); r.Status != http.StatusOK {
		t.Errorf("claim through the sidecar with %s: %d %s, want 200", why, r.Status, r.Raw)
	}
}
