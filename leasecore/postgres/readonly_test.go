package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

// assertReadOnly checks that st, on a read-only server or session, is not
// ready and grants nothing: Ping and every write are unavailable with a
// detail that says read-only.
func assertReadOnly(t *testing.T, st *Store) {
	t.Helper()
	ctx := context.Background()
	errs := map[string]error{"ping": st.Ping(ctx)}
	_, errs["claim"] = st.Claim(ctx, leasecore.ClaimParams{Task: "ro", Owner: "o", TTL: time.Minute})
	_, errs["renew"] = st.Renew(ctx, leasecore.RenewParams{Task: "t", Owner: "o", Token: 1, TTL: time.Minute})
	_, errs["release"] = st.Release(ctx, leasecore.ReleaseParams{Task: "t", Owner: "o", Token: 1})
	for op, err := range errs {
		var u *leasecore.UnavailableError
		if !errors.As(err, &u) || u.Op != op {
			t.Errorf("%s on a read-only server: %v, want unavailable", op, err)
			continue
		}
		if !strings.Contains(err.Error(), "read-only") {
			t.Errorf("%s: %q does not say read-only", op, err)
		}
	}
}

// withParam adds a query parameter to url.
func withParam(url, param string) string {
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}

// TestReadOnlyDatabase turns default_transaction_read_only on for a
// database: a store that connects then is not ready and grants nothing, and
// once the setting is reset it works again at once, because the read-only
// connections were not kept in its pool.
func TestReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	ctx := context.Background()
	if _, err := st.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	admin := mustConn(t, url)
	var db string
	if err := admin.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	alter := func(set string) {
		t.Helper()
		if _, err := admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` `+set); err != nil {
			t.Fatal(err)
		}
	}
	alter(`SET default_transaction_read_only = on`)
	t.Cleanup(func() { alter(`RESET default_transaction_read_only`) })

	ro := mustOpen(t, url)
	assertReadOnly(t, ro)

	alter(`RESET default_transaction_read_only`)
	if err := ro.Ping(ctx); err != nil {
		t.Errorf("Ping once the database is writable again: %v", err)
	}
	if _, err := ro.Claim(ctx, leasecore.ClaimParams{Task: "after", Owner: "o", TTL: time.Minute}); err != nil {
		t.Errorf("claim once the database is writable again: %v", err)
	}
}

// TestReadOnlySession sets default_transaction_read_only in the store URL's
// options, as a session setting.
func TestReadOnlySession(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	mustMigrated(t, url)
	assertReadOnly(t, mustOpen(t, withParam(url, "options=-c%20default_transaction_read_only%3Don")))
}

// TestMultiHostSkipsTheHostThatIsDown lists a closed port before the
// server in a multi-host URL: the store connects to the one that answers.
func TestMultiHostSkipsTheHostThatIsDown(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	closed := pgtest.ClosedURL(t)
	closedHost, _, _ := strings.Cut(strings.TrimPrefix(closed, "postgres://leasehold@"), "/")
	// The hosts start after the userinfo, or after the scheme without one.
	at := strings.Index(url, "://") + len("://")
	if i := strings.Index(url[at:], "@"); i >= 0 {
		at += i + 1
	}
	multi := withParam(url[:at]+closedHost+","+url[at:], "target_session_attrs=read-write")
	st := mustMigrated(t, multi)
	if err := st.Ping(context.Background()); err != nil {
		t.Fatalf("Ping over %s: %v", multi, err)
	}
}

// TestFailoverReconnects runs a store on a multi-host URL over a primary
// and its synchronous standby. A store on the standby alone is not ready
// and grants nothing; after the primary dies and the standby is promoted,
// the multi-host store works again on the new primary, where the lease it
// was granted before is still held with its token.
func TestFailoverReconnects(t *testing.T) {
	t.Parallel()
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(true)
	st := mustMigrated(t, pgtest.MultiHostURL(primary, standby))
	ctx := context.Background()
	lease, err := st.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	onStandby := mustOpen(t, standby.URL())
	assertReadOnly(t, onStandby)

	primary.Kill()
	standby.Promote()
	poll(t, "the multi-host store ready on the promoted standby", func() bool { return st.Ping(ctx) == nil })
	_, err = st.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o2", TTL: time.Minute})
	if !errors.Is(err, leasecore.ErrHeld) {
		t.Errorf("claim of the task granted before the failover: %v, want held", err)
	}
	renewed, err := st.Renew(ctx, leasecore.RenewParams{Task: "t", Owner: "o", Token: lease.Token, TTL: time.Minute})
	if err != nil || renewed.Token != lease.Token {
		t.Errorf("renew after the failover: %+v %v, want token %d", renewed, err, lease.Token)
	}
	// The store that was on the standby did not keep its read-only
	// connections: it is ready now that the standby is primary.
	if err := onStandby.Ping(ctx); err != nil {
		t.Errorf("Ping on the promoted standby: %v", err)
	}
}

// TestStandbyWithoutSchemaIsReadOnly: a standby that has no leasehold schema
// (none was ever migrated, or it has not replayed it yet) is reported as
// read-only, the reason it can never grant, rather than as a missing schema,
// which `leasehold migrate` could not fix there.
func TestStandbyWithoutSchemaIsReadOnly(t *testing.T) {
	t.Parallel()
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(false)
	err := mustOpen(t, standby.URL()).Ping(context.Background())
	if !errors.Is(err, leasecore.ErrUnavailable) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("Ping on a standby with no schema: %v, want unavailable saying read-only", err)
	}
}

// TestReadOnlyStormIsBounded sends 200 claims, in waves of 10 concurrent
// ones, to a read-only server: every one is unavailable saying read-only,
// and the pool makes a few connections in all, not one (a backend fork) per
// wave, since for the backoff after the first read-only answer writes do not
// reach the server. Once the backoff is over, the next write asks again.
func TestReadOnlyStormIsBounded(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	mustMigrated(t, url)
	st := mustOpen(t, withParam(url, "options=-c%20default_transaction_read_only%3Don"))
	// The whole storm falls within one backoff, however slow the machine.
	st.readOnlyBackoff = time.Hour
	ctx := context.Background()
	claim := func(task string) error {
		_, err := st.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "o", TTL: time.Minute})
		return err
	}
	assertReadOnlyErr := func(what string, err error) {
		t.Helper()
		var u *leasecore.UnavailableError
		if !errors.As(err, &u) || u.Op != "claim" || !strings.Contains(err.Error(), "read-only") {
			t.Errorf("%s on a read-only server: %v, want unavailable saying read-only", what, err)
		}
	}
	const waves, perWave = 20, 10
	for w := range waves {
		var wg sync.WaitGroup
		errs := make([]error, perWave)
		for i := range perWave {
			wg.Go(func() { errs[i] = claim(fmt.Sprintf("storm-%d-%d", w, i)) })
		}
		wg.Wait()
		for i, err := range errs {
			assertReadOnlyErr(fmt.Sprintf("claim %d of wave %d", i, w), err)
		}
	}
	conns := st.pool.Stat().NewConnsCount()
	t.Logf("%d claims against a read-only server opened %d connections", waves*perWave, conns)
	if conns > DefaultMaxConns {
		t.Errorf("%d claims against a read-only server opened %d connections, want at most %d", waves*perWave, conns, DefaultMaxConns)
	}

	// The backoff is over: the next claim asks the server (a new
	// connection, since the read-only ones were not kept), and is refused.
	n := st.readOnly.Load()
	st.readOnly.Store(&readOnlyNote{at: n.at.Add(-2 * st.readOnlyBackoff), err: n.err})
	assertReadOnlyErr("the claim after the backoff", claim("after"))
	if got := st.pool.Stat().NewConnsCount(); got != conns+1 {
		t.Errorf("the claim after the backoff opened %d connections, want 1", got-conns)
	}
}
