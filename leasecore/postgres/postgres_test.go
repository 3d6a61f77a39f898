package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

// mustOpen opens a store on url and closes it when t ends.
func mustOpen(t testing.TB, url string) *Store {
	t.Helper()
	st, err := Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// mustMigrated opens a migrated store on url and closes it when t ends.
func mustMigrated(t testing.TB, url string) *Store {
	t.Helper()
	st := mustOpen(t, url)
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return st
}

// mustConn opens a plain connection on url and closes it when t ends.
func mustConn(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// poll calls cond until it is true, failing t after a deadline.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		<-tick.C
	}
}

// Several processes migrating one empty database at once all succeed, and
// each migration is applied and recorded once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	const migrators = 8
	stores := make([]*Store, migrators)
	for i := range stores {
		stores[i] = mustOpen(t, url)
	}
	errs := make([]error, migrators)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Go(func() {
			<-start
			errs[i] = st.Migrate(t.Context())
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrator %d: %v", i, err)
		}
	}

	want, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := mustConn(t, url).Query(t.Context(), `SELECT version, count(*) OVER () FROM leasehold_schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	var versions []int
	for rows.Next() {
		var v, n int
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var wantVersions []int
	for _, m := range want {
		wantVersions = append(wantVersions, m.Version)
	}
	if !slices.Equal(versions, wantVersions) {
		t.Errorf("recorded versions %v, want %v, once each", versions, wantVersions)
	}
	if err := stores[0].Ping(t.Context()); err != nil {
		t.Errorf("ping after migrating: %v", err)
	}
}

// raceClaim has every store of pools claim task from perPool goroutines at
// once, each as its own owner, and fails t unless exactly one acquires and
// every other is told the winner holds it. It returns the winning lease.
func raceClaim(t *testing.T, pools []*Store, perPool int, task string) *leasecore.Lease {
	t.Helper()
	type result struct {
		owner string
		lease *leasecore.Lease
		err   error
	}
	results := make([]result, len(pools)*perPool)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		svc := leasecore.New(pools[i%len(pools)])
		owner := fmt.Sprintf("pool%d-racer%02d", i%len(pools), i/len(pools))
		wg.Go(func() {
			<-start
			l, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Minute})
			results[i] = result{owner, l, err}
		})
	}
	close(start)
	wg.Wait()

	var winners []result
	for _, r := range results {
		if r.err == nil {
			winners = append(winners, r)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d of %d contenders acquired %s, want exactly 1: %v", len(winners), len(results), task, winners)
	}
	win := winners[0]
	for _, r := range results {
		if r.err == nil {
			continue
		}
		var held *leasecore.HeldError
		if !errors.As(r.err, &held) {
			t.Errorf("loser %s: %v, want held", r.owner, r.err)
			continue
		}
		if held.Holder.Owner != win.owner || held.Holder.TTLRemaining <= 0 {
			t.Errorf("loser %s told %+v, want the winner %s with time remaining", r.owner, held.Holder, win.owner)
		}
	}
	return win.lease
}

// Many contenders over many pools (4 pools × 16 goroutines, as four sidecars
// of a fleet would be) produce exactly one winner, on a new row (the INSERT
// path), a released row and an expired row (the DO UPDATE path), and the
// token rises by exactly one per grant.
func TestClaimRaceManyPools(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	pools := []*Store{mustMigrated(t, url), mustMigrated(t, url), mustMigrated(t, url), mustMigrated(t, url)}
	svc := leasecore.New(pools[0])
	task := "race/many-pools"

	first := raceClaim(t, pools, 16, task)
	if first.Token != 1 {
		t.Errorf("first grant: token %d, want 1", first.Token)
	}

	if ok, err := svc.Release(t.Context(), leasecore.ReleaseParams{Task: task, Owner: first.Owner, Token: first.Token}); !ok || err != nil {
		t.Fatalf("release the first winner: %v %v", ok, err)
	}
	second := raceClaim(t, pools, 16, task)
	if second.Token != 2 {
		t.Errorf("grant after release: token %d, want 2", second.Token)
	}

	// Let the second grant expire: refresh it with the shortest TTL, then
	// wait until the store no longer sees it.
	if _, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: second.Owner, TTL: leasecore.MinTTL}); err != nil {
		t.Fatalf("shorten the second grant: %v", err)
	}
	poll(t, "the second grant to expire", func() bool {
		l, err := svc.Get(t.Context(), task)
		return err == nil && l == nil
	})
	third := raceClaim(t, pools, 16, task)
	if third.Token != 3 {
		t.Errorf("grant after expiry: token %d, want 3", third.Token)
	}
}

// Under churn (contenders that release as soon as they acquire, so the lease
// is often freed between a refused claim and the read of its holder) every
// grant gets a token of its own and the counter ends at the number of grants.
func TestTokensUniqueUnderChurn(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	pools := []*Store{mustMigrated(t, url), mustMigrated(t, url)}
	const (
		task    = "churn"
		workers = 12
		rounds  = 40
	)
	var (
		mu     sync.Mutex
		tokens = map[int64]string{}
		errs   []error
	)
	var wg sync.WaitGroup
	for w := range workers {
		svc := leasecore.New(pools[w%len(pools)])
		owner := fmt.Sprintf("worker-%d", w)
		wg.Go(func() {
			for range rounds {
				l, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Minute})
				if errors.Is(err, leasecore.ErrHeld) {
					continue
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				mu.Lock()
				if prev, dup := tokens[l.Token]; dup {
					errs = append(errs, fmt.Errorf("token %d granted to %s and to %s", l.Token, prev, owner))
				}
				tokens[l.Token] = owner
				if l.RenewCount != 0 {
					errs = append(errs, fmt.Errorf("%s got a refreshed lease %+v while it held none", owner, l))
				}
				mu.Unlock()
				if ok, err := svc.Release(t.Context(), leasecore.ReleaseParams{Task: task, Owner: owner, Token: l.Token}); !ok || err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s release token %d: %v %v", owner, l.Token, ok, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	var counter int64
	if err := mustConn(t, url).QueryRow(t.Context(), `SELECT token FROM leasehold_leases WHERE task = $1`, task).Scan(&counter); err != nil {
		t.Fatal(err)
	}
	if counter != int64(len(tokens)) {
		t.Errorf("counter at %d after %d grants", counter, len(tokens))
	}
	for tok := int64(1); tok <= counter; tok++ {
		if _, ok := tokens[tok]; !ok {
			t.Errorf("token %d was never handed out (counter %d, %d grants)", tok, counter, len(tokens))
		}
	}
}

// A claim refused by a live holder whose lease has expired by the time the
// claimant reads it claims again and acquires; it is never told "held" by a
// lease that is gone. The interleaving is forced: a transaction holds the
// row, the claim waits on it, and the row is committed with an expiry just
// after the waiting claim's now() (so the claim's WHERE finds it live) but
// before the commit (so the next statement finds it expired).
func TestClaimRetriesWhenRefusedByAnExpiredLease(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	holder := mustConn(t, url)
	observer := mustConn(t, url)
	const task = "retry/expired-holder"
	ctx := t.Context()

	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, claimSQL, task, "holder", int64(time.Minute/time.Millisecond), []byte{}, "", int64(0)); err != nil {
		t.Fatalf("holder's claim: %v", err)
	}

	type result struct {
		lease *leasecore.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		l, err := st.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "claimant", TTL: time.Minute})
		done <- result{l, err}
	}()

	// The claim's transaction start is its now(): wait until it is blocked
	// on the holder's row, and read it.
	var claimStart time.Time
	poll(t, "the claim to wait on the holder's row", func() bool {
		err := observer.QueryRow(ctx, `
			SELECT xact_start FROM pg_stat_activity
			 WHERE datname = current_database() AND wait_event_type = 'Lock'
			   AND query LIKE '%INSERT INTO leasehold_leases%'`).Scan(&claimStart)
		return err == nil
	})

	// Live at the claim's now(), expired before the claim can read again.
	var expiresAt time.Time
	if err := tx.QueryRow(ctx, `
		UPDATE leasehold_leases SET expires_at = $2::timestamptz + interval '1 millisecond'
		 WHERE task = $1 RETURNING expires_at`, task, claimStart).Scan(&expiresAt); err != nil {
		t.Fatal(err)
	}
	poll(t, "the store's clock to pass the holder's expiry", func() bool {
		var past bool
		err := observer.QueryRow(ctx, `SELECT clock_timestamp() > $1`, expiresAt).Scan(&past)
		return err == nil && past
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	r := <-done
	if r.err != nil {
		t.Fatalf("claim refused by a lease that expired meanwhile: %v, want acquired", r.err)
	}
	if r.lease.Owner != "claimant" || r.lease.Token != 2 || r.lease.RenewCount != 0 {
		t.Errorf("claim after the holder expired: %+v, want claimant's new grant under token 2", r.lease)
	}
}

// Every failure names its cause in words an operator can act on.
func TestUnavailableDetails(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	claim := leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Minute}

	unmigrated := mustOpen(t, pgtest.NewDatabase(t))
	_, errUnmigrated := unmigrated.Claim(ctx, claim)

	behind := mustMigrated(t, pgtest.NewDatabase(t))
	if _, err := behind.pool.Exec(ctx, `DELETE FROM leasehold_schema_migrations`); err != nil {
		t.Fatal(err)
	}
	errBehind := behind.Ping(ctx)

	unreachable := mustOpen(t, pgtest.ClosedURL(t))
	_, errUnreachable := unreachable.Claim(ctx, claim)

	closed := mustOpen(t, pgtest.ClosedURL(t))
	_ = closed.Close()
	_, errClosedStore := closed.Claim(ctx, claim)

	for _, c := range []struct {
		name, op, want string
		err            error
	}{
		{"unmigrated", "claim", "the leasehold schema is missing (", errUnmigrated},
		{"schema behind", "ping", "the leasehold schema is older than this build (version", errBehind},
		{"unreachable", "claim", "connection refused", errUnreachable},
		{"closed", "claim", "closed", errClosedStore},
	} {
		var ue *leasecore.UnavailableError
		if !errors.As(c.err, &ue) || ue.Op != c.op {
			t.Errorf("%s: %v, want an *UnavailableError for %s", c.name, c.err, c.op)
			continue
		}
		if !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %q does not say %q", c.name, c.err.Error(), c.want)
		}
	}
	if !errors.Is(errUnmigrated, leasecore.ErrSchemaMissing) {
		t.Errorf("unmigrated: %v, want ErrSchemaMissing", errUnmigrated)
	}
	if !errors.Is(errBehind, leasecore.ErrSchemaBehind) {
		t.Errorf("schema behind: %v, want ErrSchemaBehind", errBehind)
	}
}

// Behind PgBouncer in transaction mode pgx's default exec mode meets named
// statements another client prepared, or misses its own: the error says
// which URL parameter fixes it.
func TestPreparedStatementErrorsNameTheExecMode(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"42P05", "26000"} {
		err := interpretError("claim", &pgconn.PgError{Code: code, Message: `prepared statement "stmtcache_1" already exists`})
		var ue *leasecore.UnavailableError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "default_query_exec_mode=exec") {
			t.Errorf("SQLSTATE %s: %v, want unavailable, naming default_query_exec_mode=exec", code, err)
		}
	}
}

// Open builds the pool without connecting, honours pool_max_conns and
// connect_timeout, defaults them otherwise, and never echoes a password.
func TestOpenConfig(t *testing.T) {
	t.Parallel()
	closed := pgtest.ClosedURL(t)
	for _, c := range []struct {
		name        string
		url         string
		maxConns    int32
		connTimeout time.Duration
	}{
		{"defaults", "postgres://u@127.0.0.1:1/db", DefaultMaxConns, DefaultConnectTimeout},
		{"from the URL", "postgres://u@127.0.0.1:1/db?pool_max_conns=3&connect_timeout=2", 3, 2 * time.Second},
		{"nothing listens", closed, DefaultMaxConns, DefaultConnectTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := mustOpen(t, c.url)
			cfg := st.pool.Config()
			if cfg.MaxConns != c.maxConns {
				t.Errorf("MaxConns %d, want %d", cfg.MaxConns, c.maxConns)
			}
			if cfg.ConnConfig.ConnectTimeout != c.connTimeout {
				t.Errorf("ConnectTimeout %v, want %v", cfg.ConnConfig.ConnectTimeout, c.connTimeout)
			}
		})
	}

	_, err := Open(context.Background(), "postgres://u:s3cret@127.0.0.1:notaport/db")
	if err == nil {
		t.Fatal("a URL with a bad port was accepted")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %v", err)
	}
}
