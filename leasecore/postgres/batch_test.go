package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

// take builds a batch from the queue in order: one call per task, the later
// calls of a task left queued in their order, calls whose callers gave up
// dropped, at most maxBatch calls.
func TestTakeDefersDuplicatesAndDropsAbandoned(t *testing.T) {
	t.Parallel()
	b := &batcher[string, bool]{task: func(s string) string { return strings.SplitN(s, "#", 2)[0] }}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	enqueue := func(ctx context.Context, reqs ...string) {
		for _, r := range reqs {
			b.queue = append(b.queue, &call[string, bool]{ctx: ctx, req: r, done: make(chan answer[bool], 1)})
		}
	}
	enqueue(context.Background(), "x#1", "y#1", "x#2")
	enqueue(cancelled, "z#1")
	enqueue(context.Background(), "y#2", "w#1", "x#3")
	given := &call[string, bool]{ctx: context.Background(), req: "v#1"}
	given.state.Store(dropped)
	b.queue = append(b.queue, given)

	reqs := func(calls []*call[string, bool]) []string {
		var out []string
		for _, c := range calls {
			out = append(out, c.req)
		}
		return out
	}
	for _, want := range []struct{ batch, left []string }{
		{[]string{"x#1", "y#1", "w#1"}, []string{"x#2", "y#2", "x#3"}},
		{[]string{"x#2", "y#2"}, []string{"x#3"}},
		{[]string{"x#3"}, nil},
	} {
		batch := b.take()
		if got := reqs(batch); !slices.Equal(got, want.batch) {
			t.Fatalf("batch %v, want %v", got, want.batch)
		}
		for _, c := range batch {
			if c.state.Load() != taken {
				t.Errorf("%s in a batch is not marked taken", c.req)
			}
		}
		if got := reqs(b.queue); !slices.Equal(got, want.left) {
			t.Fatalf("left queued %v, want %v", got, want.left)
		}
	}

	for i := range maxBatch + 3 {
		enqueue(context.Background(), fmt.Sprintf("t%d", i))
	}
	if n := len(b.take()); n != maxBatch {
		t.Errorf("a batch of %d calls, want at most %d", n, maxBatch)
	}
	if n := len(b.queue); n != 3 {
		t.Errorf("%d calls left queued, want 3", n)
	}
}

// blockFlushers occupies every slot of one batcher, so that the calls made
// next queue up: lockSQL runs in a transaction that stays open, then
// start(i) is called batchFlushers times, each in its own goroutine, and
// must make a call that waits on a row that transaction locked (the first
// calls find the queue empty and go out alone, one per slot). blockFlushers
// returns once that many statements wait on a lock; unblock rolls the
// transaction back and waits for those calls to return.
func blockFlushers(t *testing.T, url, lockSQL string, start func(i int)) (unblock func()) {
	t.Helper()
	ctx := t.Context()
	tx, err := mustConn(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, lockSQL); err != nil {
		t.Fatalf("lock the gate row: %v", err)
	}
	var wg sync.WaitGroup
	for i := range batchFlushers {
		wg.Go(func() { start(i) })
	}
	waitStatementsBlocked(t, url, batchFlushers)
	return func() {
		if err := tx.Rollback(ctx); err != nil {
			t.Fatalf("roll back the gate: %v", err)
		}
		wg.Wait()
	}
}

// waitStatementsBlocked waits until n statements on leasehold_leases in the
// database at url wait on a lock.
func waitStatementsBlocked(t *testing.T, url string, n int) {
	t.Helper()
	observer := mustConn(t, url)
	poll(t, fmt.Sprintf("%d statements to wait on a row lock", n), func() bool {
		var waiting int
		err := observer.QueryRow(t.Context(), `
			SELECT count(*) FROM pg_stat_activity
			 WHERE datname = current_database() AND pid <> pg_backend_pid()
			   AND wait_event_type = 'Lock' AND query LIKE '%leasehold_leases%'`).Scan(&waiting)
		return err == nil && waiting >= n
	})
}

// blockClaims occupies the claim slots of st with claims of a new task (a
// gate) that an open transaction is inserting. The claims blocked are
// answered (acquired or held) after unblock; their outcome is not checked.
func blockClaims(t *testing.T, url string, st *Store) (unblock func()) {
	t.Helper()
	gate := fmt.Sprintf("gate/%d", gates.Add(1))
	lock := fmt.Sprintf(`INSERT INTO leasehold_leases VALUES ('%s', 'gatekeeper', 1, now(), now(), now() + interval '1 hour', 3600000, 0, '', NULL)`, gate)
	return blockFlushers(t, url, lock, func(i int) {
		_, _ = st.Claim(context.Background(), leasecore.ClaimParams{Task: gate, Owner: fmt.Sprintf("gate-%d", i), TTL: time.Minute})
	})
}

// gates numbers the gate tasks of blockClaims.
var gates atomic.Int64

// recordBatches makes b report the tasks of each batch it sends. It must be
// called before b is used.
func recordBatches[Q, R any](b *batcher[Q, R]) (batches func() [][]string) {
	var (
		mu   sync.Mutex
		seen [][]string
	)
	b.mu.Lock()
	b.sent = func(tasks []string) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, tasks)
	}
	b.mu.Unlock()
	return func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// claimAsync claims in a goroutine; the channel gets the outcome.
func claimAsync(ctx context.Context, st *Store, task, owner string) <-chan result {
	done := make(chan result, 1)
	go func() {
		l, err := st.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Minute})
		done <- result{owner, l, err}
	}()
	return done
}

type result struct {
	owner string
	lease *leasecore.Lease
	err   error
}

// waitQueued waits until n calls wait in b's queue.
func waitQueued[Q, R any](t *testing.T, b *batcher[Q, R], n int) {
	t.Helper()
	poll(t, fmt.Sprintf("%d calls queued", n), func() bool { return b.queuedCalls() == n })
}

// A lone claim goes out alone, without a batch. Hundreds of concurrent
// claims of distinct new tasks all acquire, each with token 1, and go out in
// full batches: with the slots held up, 600 claims pile up and leave in
// batches of maxBatch and the rest.
func TestBatchedClaimsOfDistinctTasks(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	batches := recordBatches(st.claims)
	if l, err := st.Claim(t.Context(), leasecore.ClaimParams{Task: "lone", Owner: "a", TTL: time.Minute}); err != nil || l.Token != 1 {
		t.Fatalf("lone claim: %+v %v", l, err)
	}
	if b := batches(); len(b) != 0 {
		t.Errorf("a lone claim was queued for a flusher: batches %v", b)
	}
	unblock := blockClaims(t, url, st)

	const n = 600
	results := make([]<-chan result, n)
	for i := range results {
		results[i] = claimAsync(t.Context(), st, fmt.Sprintf("distinct/%03d", i), fmt.Sprintf("owner-%d", i))
	}
	waitQueued(t, st.claims, n)
	unblock()

	for i, done := range results {
		r := <-done
		switch {
		case r.err != nil:
			t.Errorf("claim %d: %v", i, r.err)
		case r.lease.Task != fmt.Sprintf("distinct/%03d", i) || r.lease.Owner != r.owner || r.lease.Token != 1 || r.lease.RenewCount != 0:
			t.Errorf("claim %d by %s: got %+v, want its own task acquired with token 1", i, r.owner, r.lease)
		}
	}
	sizes := map[int]int{}
	seen := map[string]bool{}
	for _, b := range batches() {
		sizes[len(b)]++
		for _, task := range b {
			if seen[task] {
				t.Errorf("%s sent in two batches", task)
			}
			seen[task] = true
		}
	}
	if want := map[int]int{maxBatch: n / maxBatch, n % maxBatch: 1}; !mapsEqual(sizes, want) {
		t.Errorf("batch sizes (size: count) %v, want %v", sizes, want)
	}
}

func mapsEqual(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A second claim of a task already in a batch waits for a later batch, and
// the two are decided one after the other: one owner acquires and the other
// is told it holds the task, and the statement never fails for proposing a
// row twice.
func TestBatchDefersDuplicateTask(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	batches := recordBatches(st.claims)
	unblock := blockClaims(t, url, st)

	var results []<-chan result
	for i, c := range []struct{ task, owner string }{{"dup/x", "a"}, {"dup/y", "c"}, {"dup/x", "b"}} {
		results = append(results, claimAsync(t.Context(), st, c.task, c.owner))
		waitQueued(t, st.claims, i+1) // fix the queue's order
	}
	unblock()
	a, c, b := <-results[0], <-results[1], <-results[2]

	sent := batches()
	if want := [][]string{{"dup/x", "dup/y"}, {"dup/x"}}; !slices.EqualFunc(sent, want, slices.Equal[[]string]) {
		t.Errorf("batches sent %v, want %v", sent, want)
	}
	if c.err != nil || c.lease.Token != 1 {
		t.Errorf("claim of dup/y: %+v %v, want acquired with token 1", c.lease, c.err)
	}
	win, lose := a, b
	if a.err != nil {
		win, lose = b, a
	}
	var held *leasecore.HeldError
	if win.err != nil || win.lease.Token != 1 || !errors.As(lose.err, &held) || held.Holder.Owner != win.owner {
		t.Errorf("claims of dup/x by a and b: (%+v, %v) and (%+v, %v), want one acquired with token 1 and the other told the winner holds it",
			a.lease, a.err, b.lease, b.err)
	}
}

// A call whose context is already cancelled is unavailable and never queued;
// one whose context ends while it is queued returns unavailable at once and
// is never sent; one whose context ends while its statement is in flight
// returns unavailable at once. A batch sent by a flusher runs under its own
// timeout, so it still commits; a call sent alone runs under its caller's
// context, which pgx answers by closing the connection and asking the server
// to cancel, so whether it commits depends on which arrives first (as before
// batching), and is not checked.
func TestBatchCallerContexts(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	ctx := t.Context()
	count := func(task string) int {
		var n int
		if err := mustConn(t, url).QueryRow(ctx, `SELECT count(*) FROM leasehold_leases WHERE task = $1`, task).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	wantUnavailable := func(what string, err error) {
		t.Helper()
		if !errIsUnavailableOnly(err) {
			t.Errorf("%s: %v, want unavailable", what, err)
		}
	}
	// hold starts a transaction that inserts task's row and keeps it open,
	// so that claims of task wait; it returns the rollback.
	hold := func(task string) (rollback func()) {
		tx, err := mustConn(t, url).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		if _, err := tx.Exec(ctx, claimSQL, task, "holder", int64(60000), "", "", int64(0)); err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err := st.Claim(cancelled, leasecore.ClaimParams{Task: "ctx/cancelled", Owner: "a", TTL: time.Minute})
	wantUnavailable("claim with a cancelled context", err)
	_, err = st.Renew(cancelled, leasecore.RenewParams{Task: "ctx/cancelled", Owner: "a"})
	wantUnavailable("renew with a cancelled context", err)
	_, err = st.Release(cancelled, leasecore.ReleaseParams{Task: "ctx/cancelled", Owner: "a"})
	wantUnavailable("release with a cancelled context", err)
	if n := st.claims.queuedCalls() + st.renewals.queuedCalls() + st.releases.queuedCalls(); n != 0 {
		t.Errorf("%d calls with cancelled contexts were queued", n)
	}

	// Ends while queued.
	unblock := blockClaims(t, url, st)
	queuedCtx, cancelQueued := context.WithCancel(ctx)
	queued := claimAsync(queuedCtx, st, "ctx/queued", "a")
	waitQueued(t, st.claims, 1)
	cancelQueued()
	wantUnavailable("claim whose context ended while queued", (<-queued).err)
	unblock()
	if _, err := st.Claim(ctx, leasecore.ClaimParams{Task: "ctx/after", Owner: "a", TTL: time.Minute}); err != nil {
		t.Fatalf("a claim after the gate: %v", err)
	}
	if n := count("ctx/queued"); n != 0 {
		t.Errorf("the claim given up while queued was sent: %d rows for its task", n)
	}

	// Ends in flight, in a batch a flusher sent: queued while the slots
	// are busy, sent when they come free, and held up by a row lock.
	rollback := hold("ctx/in-batch")
	unblock = blockClaims(t, url, st)
	batchCtx, cancelBatch := context.WithCancel(ctx)
	inBatch := claimAsync(batchCtx, st, "ctx/in-batch", "a")
	waitQueued(t, st.claims, 1)
	unblock()
	waitStatementsBlocked(t, url, 1)
	cancelBatch()
	wantUnavailable("claim whose context ended while its batch was in flight", (<-inBatch).err)
	rollback()
	poll(t, "the batch whose caller gave up to commit", func() bool {
		l, err := st.Get(ctx, "ctx/in-batch")
		return err == nil && l != nil && l.Owner == "a"
	})

	// Ends in flight, sent alone.
	rollback = hold("ctx/alone")
	aloneCtx, cancelAlone := context.WithCancel(ctx)
	alone := claimAsync(aloneCtx, st, "ctx/alone", "a")
	waitStatementsBlocked(t, url, 1)
	if n := st.claims.queuedCalls(); n != 0 {
		t.Errorf("a lone claim was queued (%d calls queued)", n)
	}
	cancelAlone()
	wantUnavailable("claim whose context ended while it was sent alone", (<-alone).err)
	rollback()
}

// Close fails the queued calls at once as unavailable, lets the batches in
// flight finish, and makes later calls unavailable.
func TestCloseWithCallsQueued(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	unblock := blockClaims(t, url, st)

	const n = 20
	queued := make([]<-chan result, n)
	for i := range queued {
		queued[i] = claimAsync(t.Context(), st, fmt.Sprintf("close/%d", i), "a")
	}
	waitQueued(t, st.claims, n)
	closed := make(chan error, 1)
	go func() { closed <- st.Close() }()
	for i, done := range queued {
		r := <-done // before the flushers are unblocked
		if !errIsUnavailableOnly(r.err) || !strings.Contains(r.err.Error(), "closed") {
			t.Errorf("queued claim %d at Close: %v, want unavailable (closed)", i, r.err)
		}
	}
	unblock()
	if err := <-closed; err != nil {
		t.Errorf("close: %v", err)
	}
	_, err := st.Claim(t.Context(), leasecore.ClaimParams{Task: "close/after", Owner: "a", TTL: time.Minute})
	if !errIsUnavailableOnly(err) {
		t.Errorf("claim after Close: %v, want unavailable", err)
	}
	var rows int
	if err := mustConn(t, url).QueryRow(t.Context(), `SELECT count(*) FROM leasehold_leases WHERE task LIKE 'close/%'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d claims failed at Close were sent anyway", rows)
	}
}

// One batch of renewals checks each renewal on its own and tells each
// caller its own outcome: renewed, or lost with the right reason.
func TestBatchedRenewalsEachChecked(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	svc := leasecore.New(st)
	ctx := t.Context()
	claimed := func(task, owner string, ttl time.Duration) *leasecore.Lease {
		t.Helper()
		l, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: owner, TTL: ttl})
		if err != nil {
			t.Fatalf("claim %s: %v", task, err)
		}
		return l
	}
	const ok = leasecore.LostReason("") // renewed
	cases := []struct {
		task, owner string
		token       int64
		want        leasecore.LostReason
	}{
		{"renew/ok-any-token", "a", 0, ok},
		{"renew/ok-token", "a", -1, ok}, // -1: the lease's token
		{"renew/wrong-token", "a", 99, leasecore.LostTokenMismatch},
		{"renew/other-owner", "b", 0, leasecore.LostHeldByOther},
		{"renew/released", "a", 0, leasecore.LostNotHeld},
		{"renew/expired", "a", 0, leasecore.LostExpired},
		{"renew/never", "a", 0, leasecore.LostNotHeld},
	}
	tokens := map[string]int64{}
	for _, c := range cases {
		switch c.task {
		case "renew/never":
		case "renew/expired":
			claimed(c.task, "a", leasecore.MinTTL)
		default:
			tokens[c.task] = claimed(c.task, "a", time.Minute).Token
		}
	}
	if ok, err := svc.Release(ctx, leasecore.ReleaseParams{Task: "renew/released", Owner: "a"}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	poll(t, "renew/expired to expire", func() bool {
		l, err := svc.Get(ctx, "renew/expired")
		return err == nil && l == nil
	})
	// Many renewals of their own leases in the same batches.
	const many = 300
	for i := range many {
		claimed(fmt.Sprintf("renew/many/%03d", i), "m", time.Minute)
	}

	claimed("gate", "gatekeeper", time.Minute)
	batches := recordBatches(st.renewals)
	unblock := blockFlushers(t, url, `SELECT FROM leasehold_leases WHERE task = 'gate' FOR UPDATE`, func(int) {
		_, _ = st.Renew(context.Background(), leasecore.RenewParams{Task: "gate", Owner: "gatekeeper"})
	})
	type renewed struct {
		lease *leasecore.Lease
		err   error
	}
	renew := func(p leasecore.RenewParams) <-chan renewed {
		done := make(chan renewed, 1)
		go func() {
			l, err := st.Renew(ctx, p)
			done <- renewed{l, err}
		}()
		return done
	}
	var outcomes []<-chan renewed
	for _, c := range cases {
		token := c.token
		if token < 0 {
			token = tokens[c.task]
		}
		outcomes = append(outcomes, renew(leasecore.RenewParams{Task: c.task, Owner: c.owner, Token: token, TTL: 2 * time.Minute}))
	}
	var bulk []<-chan renewed
	for i := range many {
		bulk = append(bulk, renew(leasecore.RenewParams{Task: fmt.Sprintf("renew/many/%03d", i), Owner: "m"}))
	}
	waitQueued(t, st.renewals, len(cases)+many)
	unblock()

	for i, c := range cases {
		r := <-outcomes[i]
		var lost *leasecore.LostError
		switch {
		case c.want == ok && (r.err != nil || r.lease.RenewCount != 1 || r.lease.TTL != 2*time.Minute):
			t.Errorf("%s by %s: (%+v, %v), want renewed once with the new TTL", c.task, c.owner, r.lease, r.err)
		case c.want != ok && (!errors.As(r.err, &lost) || lost.Reason != c.want || lost.Task != c.task):
			t.Errorf("%s by %s: (%+v, %v), want lost: %s", c.task, c.owner, r.lease, r.err, c.want)
		}
	}
	for i, done := range bulk {
		if r := <-done; r.err != nil || r.lease.RenewCount != 1 || r.lease.TTL != time.Minute {
			t.Errorf("renew/many/%03d: (%+v, %v), want renewed once, TTL kept", i, r.lease, r.err)
		}
	}
	var largest int
	for _, b := range batches() {
		largest = max(largest, len(b))
	}
	if largest != maxBatch {
		t.Errorf("largest renewal batch %d, want %d", largest, maxBatch)
	}
}

// Claims, renewals and releases of a few tasks from many goroutines over
// several stores, so that batches of different stores and kinds lock
// overlapping sets of rows at once, never deadlock (every operation
// answers, none unavailable) and never hand out a token twice.
func TestBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	stores := []*Store{mustMigrated(t, url), mustMigrated(t, url), mustMigrated(t, url)}
	tasks := []string{"dl/a", "dl/b", "dl/c", "dl/d", "dl/e", "dl/f"}
	const (
		workers = 48
		rounds  = 25
	)
	var (
		mu     sync.Mutex
		errs   []error
		grants = map[string]map[int64]string{}
	)
	for _, task := range tasks {
		grants[task] = map[int64]string{}
	}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	var wg sync.WaitGroup
	for w := range workers {
		svc := leasecore.New(stores[w%len(stores)])
		owner := fmt.Sprintf("worker-%d", w)
		rng := rand.New(rand.NewPCG(uint64(w), 1))
		wg.Go(func() {
			ctx := t.Context()
			for range rounds {
				task := tasks[rng.IntN(len(tasks))]
				l, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Minute})
				if errors.Is(err, leasecore.ErrHeld) {
					continue
				}
				if err != nil {
					fail(fmt.Errorf("%s claim %s: %w", owner, task, err))
					continue
				}
				mu.Lock()
				if prev, dup := grants[task][l.Token]; dup && prev != owner {
					errs = append(errs, fmt.Errorf("%s token %d granted to %s and %s", task, l.Token, prev, owner))
				}
				grants[task][l.Token] = owner
				mu.Unlock()
				if _, err := svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: owner, Token: l.Token}); err != nil {
					fail(fmt.Errorf("%s renew %s: %w", owner, task, err))
				}
				if ok, err := svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: owner, Token: l.Token}); !ok || err != nil {
					fail(fmt.Errorf("%s release %s: %v %w", owner, task, ok, err))
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	conn := mustConn(t, url)
	for _, task := range tasks {
		var counter int64
		err := conn.QueryRow(t.Context(), `SELECT token FROM leasehold_leases WHERE task = $1`, task).Scan(&counter)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if counter != int64(len(grants[task])) {
			t.Errorf("%s: counter %d after %d grants", task, counter, len(grants[task]))
		}
	}
}

// Contenders for one task spread over several stores, each claim sharing
// its batch with claims of other tasks, still produce exactly one winner.
func TestBatchedRaceAcrossStores(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	stores := []*Store{mustMigrated(t, url), mustMigrated(t, url), mustMigrated(t, url), mustMigrated(t, url)}
	const contended = "race/contended"
	for round := range 3 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		results := make([]result, len(stores)*16)
		fillers := make([]error, len(stores)*16)
		for i := range results {
			st := stores[i%len(stores)]
			owner := fmt.Sprintf("store%d-racer%02d-round%d", i%len(stores), i/len(stores), round)
			wg.Go(func() {
				<-start
				l, err := st.Claim(t.Context(), leasecore.ClaimParams{Task: contended, Owner: owner, TTL: time.Minute})
				results[i] = result{owner, l, err}
			})
			wg.Go(func() {
				<-start
				_, fillers[i] = st.Claim(t.Context(), leasecore.ClaimParams{Task: fmt.Sprintf("race/filler/%d/%d", round, i), Owner: owner, TTL: time.Minute})
			})
		}
		close(start)
		wg.Wait()
		for i, err := range fillers {
			if err != nil {
				t.Errorf("round %d filler %d: %v", round, i, err)
			}
		}
		var win *result
		for i, r := range results {
			var held *leasecore.HeldError
			switch {
			case r.err == nil && win != nil:
				t.Fatalf("round %d: %s and %s both acquired %s", round, win.owner, r.owner, contended)
			case r.err == nil:
				win = &results[i]
			case !errors.As(r.err, &held):
				t.Errorf("round %d: %s: %v, want acquired or held", round, r.owner, r.err)
			}
		}
		if win == nil {
			t.Fatalf("round %d: nobody acquired %s", round, contended)
		}
		if win.lease.Token != int64(round+1) {
			t.Errorf("round %d: winner's token %d, want %d", round, win.lease.Token, round+1)
		}
		for _, r := range results {
			var held *leasecore.HeldError
			if errors.As(r.err, &held) && held.Holder.Owner != win.owner {
				t.Errorf("round %d: %s told %s holds it, but %s won", round, r.owner, held.Holder.Owner, win.owner)
			}
		}
		ok, err := stores[0].Release(t.Context(), leasecore.ReleaseParams{Task: contended, Owner: win.owner, Token: win.lease.Token})
		if !ok || err != nil {
			t.Fatalf("round %d: release the winner: %v %v", round, ok, err)
		}
	}
}

// errIsUnavailableOnly reports whether err is ErrUnavailable and no other
// outcome.
func errIsUnavailableOnly(err error) bool {
	return errors.Is(err, leasecore.ErrUnavailable) &&
		!errors.Is(err, leasecore.ErrHeld) && !errors.Is(err, leasecore.ErrLost) && !errors.Is(err, leasecore.ErrInvalid)
}

// RenewBatch sends up to maxRenewBatch renewals in one statement, and says
// so in WriteCounts: 2,100 renewals take two statements.
func TestRenewBatchStatements(t *testing.T) {
	t.Parallel()
	st := mustMigrated(t, pgtest.NewDatabase(t))
	svc := leasecore.New(st)
	const n = maxRenewBatch + 52
	ps := make([]leasecore.RenewParams, n)
	for i := range ps {
		l, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: fmt.Sprintf("t%04d", i), Owner: "a", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = leasecore.RenewParams{Task: l.Task, Owner: "a", Token: l.Token}
	}
	before := renewCount(st)
	for i, r := range svc.RenewBatch(t.Context(), ps) {
		if r.Err != nil || r.Lease.RenewCount != 1 {
			t.Fatalf("renewal %d: %v %+v", i, r.Err, r.Lease)
		}
	}
	after := renewCount(st)
	if got := after.Statements - before.Statements; got != 2 {
		t.Errorf("%d renewals took %d statements, want 2", n, got)
	}
	if got := after.Operations - before.Operations; got != n {
		t.Errorf("the statements carried %d renewals, want %d", got, n)
	}
}

func renewCount(st *Store) leasecore.WriteCount {
	for _, c := range st.WriteCounts() {
		if c.Op == "renew" {
			return c
		}
	}
	return leasecore.WriteCount{}
}

// Calls queued while every slot is taken are sent once a slot comes free,
// whichever way it does: a lone call's slot given back (free), or a
// flusher's batch answered (the flusher then takes the queue itself). The
// batcher signals a flusher only when one can send, so a lost hand-over
// would leave calls queued for good. send is the seam: no database.
func TestQueuedCallsSentAsSlotsFree(t *testing.T) {
	t.Parallel()
	gates := make(chan chan struct{}, 16) // one per statement, in the order they start
	var mu sync.Mutex
	var sent [][]string
	b := newBatcher("claim", func(r string) string { return r }, func(ctx context.Context, reqs []string) ([]bool, error) {
		gate := make(chan struct{})
		mu.Lock()
		sent = append(sent, slices.Sorted(slices.Values(reqs))) // the calls queue in any order
		mu.Unlock()
		gates <- gate
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return make([]bool, len(reqs)), nil
	})
	t.Cleanup(b.stop)
	ctx := t.Context()
	answered := make(chan string, 16)
	call := func(task string) {
		go func() {
			if _, err := b.do(ctx, task); err != nil {
				t.Errorf("%s: %v", task, err)
			}
			answered <- task
		}()
	}
	next := func(what string) chan struct{} {
		select {
		case g := <-gates:
			return g
		case <-time.After(10 * time.Second):
			t.Fatalf("no statement started: %s", what)
			return nil
		}
	}
	await := func(tasks ...string) {
		t.Helper()
		got := make([]string, 0, len(tasks))
		for range tasks {
			select {
			case task := <-answered:
				got = append(got, task)
			case <-time.After(10 * time.Second):
				t.Fatalf("answered %v, want %v", got, tasks)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tasks) {
			t.Fatalf("answered %v, want %v", got, tasks)
		}
	}

	// Two lone calls take both slots; two more queue behind them.
	call("a")
	lone1 := next("lone a")
	call("b")
	lone2 := next("lone b")
	call("c")
	call("d")
	poll(t, "2 calls queued", func() bool { return b.queuedCalls() == 2 })
	// A lone call's slot comes free: a flusher sends the queue as one batch.
	close(lone1)
	await("a")
	batch1 := next("batch c, d")
	// Both slots taken again (lone b, the batch): e and f queue.
	call("e")
	call("f")
	poll(t, "2 calls queued", func() bool { return b.queuedCalls() == 2 })
	// The batch is answered: its flusher sends what queued meanwhile.
	close(batch1)
	await("c", "d")
	batch2 := next("batch e, f")
	close(batch2)
	await("e", "f")
	close(lone2)
	await("b")

	mu.Lock()
	defer mu.Unlock()
	want := [][]string{{"a"}, {"b"}, {"c", "d"}, {"e", "f"}}
	if !slices.EqualFunc(sent, want, slices.Equal) {
		t.Errorf("statements %v, want %v", sent, want)
	}
}
