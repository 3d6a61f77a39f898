package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

// roleDB is a database owned by a role of its own, migrated by that owner,
// with two runtime roles granted what `leasehold migrate --grant-runtime`
// grants: a and b.
type roleDB struct {
	admin         string // the test server's superuser, on the database
	owner, ownerU string
	a, aURL       string
	b, bURL       string
}

func newRoleDB(t testing.TB) roleDB {
	t.Helper()
	var db roleDB
	db.admin, db.owner, db.ownerU = pgtest.NewOwnedDatabase(t)
	db.a, db.aURL = pgtest.NewRole(t, db.admin, "lh_team_a")
	db.b, db.bURL = pgtest.NewRole(t, db.admin, "lh_team_b")
	if err := mustOpen(t, db.ownerU).MigrateGranting(t.Context(), []string{db.a, db.b}); err != nil {
		t.Fatalf("migrate as the owner, granting the runtime roles: %v", err)
	}
	return db
}

// scope writes role's scope as the owner.
func (db roleDB) scope(t testing.TB, role string, prefixes ...string) {
	t.Helper()
	svc := leasecore.New(mustOpen(t, db.ownerU))
	r := leasecore.RoleScope{Role: role, Prefixes: prefixes}
	got, err := svc.UpdateRoleScope(t.Context(), r)
	if errors.Is(err, leasecore.ErrNotFound) {
		got, err = svc.CreateRoleScope(t.Context(), r)
	}
	if err != nil || got.Role != role {
		t.Fatalf("scope of %s: %+v, %v", role, got, err)
	}
}

// openAs opens a store at url (a runtime role's) with opts.
func openAs(t testing.TB, url string, opts Options) *Store {
	t.Helper()
	st, err := OpenWith(t.Context(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// forbidden checks that err is a *ForbiddenError of right on task for role.
func forbidden(t *testing.T, what string, err error, role, right, task string) {
	t.Helper()
	var fe *leasecore.ForbiddenError
	if !errors.As(err, &fe) || errors.Is(err, leasecore.ErrUnavailable) {
		t.Errorf("%s: %v, want a refusal (ForbiddenError)", what, err)
		return
	}
	if fe.Principal != fmt.Sprintf("database role %q", role) || fe.Right != right || fe.Task != task {
		t.Errorf("%s: %+v, want database role %q refused %s on %q", what, fe, role, right, task)
	}
}

// A runtime role migrates a current schema as a no-op and pings it. When
// the schema is behind, its migration fails with an error that names it
// and the owner and says to run leasehold migrate as the owner; and when
// it finds the schema behind while the owner's migration is in flight, it
// waits for it and succeeds, needing no privilege to find nothing pending.
func TestMigrateAsRuntimeRole(t *testing.T) {
	t.Parallel()
	db := newRoleDB(t)
	ctx := t.Context()
	st := mustOpen(t, db.aURL)
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("a runtime role migrating a current schema: %v", err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Fatalf("a runtime role pinging a current schema: %v", err)
	}

	// The schema behind: as if the owner's newer build had not run yet.
	admin := mustConn(t, db.admin)
	all, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	last := all[len(all)-1]
	if _, err := admin.Exec(ctx, `DELETE FROM leasehold_schema_migrations WHERE version = $1`, last.Version); err != nil {
		t.Fatal(err)
	}
	err = st.Migrate(ctx)
	if !errors.Is(err, leasecore.ErrUnavailable) {
		t.Fatalf("a runtime role migrating a schema behind: %v, want unavailable", err)
	}
	for _, want := range []string{
		fmt.Sprintf("at version %d and this build needs %d", last.Version-1, last.Version),
		fmt.Sprintf("role %q may not change it", db.a),
		"run `leasehold migrate --store URL` as the role that owns leasehold's tables",
		fmt.Sprintf("%q", db.owner),
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// The owner's migration in flight: it holds the migration lock and has
	// recorded the version, not committed yet.
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO leasehold_schema_migrations (version, name) VALUES ($1, $2)`, last.Version, last.Name); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- st.Migrate(context.Background()) }()
	observer := mustConn(t, db.admin)
	poll(t, "the runtime role's migration to wait for the lock", func() bool {
		var waiting bool
		err := observer.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		                                               AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting)
		return err == nil && waiting
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("a runtime role that waited for the owner's migration: %v, want nil (nothing pending)", err)
	}
}

// Every table of the schema has its runtime privileges, and a role granted
// them has exactly those: no TRUNCATE, REFERENCES or TRIGGER, no DELETE of
// a lease row, no write to declarations, policies or scopes, and no
// CREATE on the schema.
func TestRuntimePrivilegesCoverTheSchema(t *testing.T) {
	t.Parallel()
	db := newRoleDB(t)
	admin := mustConn(t, db.admin)
	rows, err := admin.Query(t.Context(), `SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'leasehold\_%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var granted []string
	want := map[string][]string{}
	for _, p := range runtimePrivileges {
		granted = append(granted, p.table)
		want[p.table] = strings.Split(p.privileges, ", ")
	}
	slices.Sort(granted)
	if !slices.Equal(tables, granted) {
		t.Fatalf("leasehold's tables %v, runtimePrivileges names %v: give every table its runtime privileges", tables, granted)
	}
	for _, table := range tables {
		for _, priv := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"} {
			var has bool
			if err := admin.QueryRow(t.Context(), `SELECT has_table_privilege($1, $2, $3)`, db.a, table, priv).Scan(&has); err != nil {
				t.Fatal(err)
			}
			if has != slices.Contains(want[table], priv) {
				t.Errorf("runtime role has %s on %s: %v, want %v", priv, table, has, !has)
			}
		}
	}
	var create bool
	if err := admin.QueryRow(t.Context(), `SELECT has_schema_privilege($1, 'public', 'CREATE')`, db.a).Scan(&create); err != nil || create {
		t.Errorf("runtime role may create in the schema: %v %v", create, err)
	}
}

// The SQL in docs/store-roles.md is what runtimeGrantsSQL generates, so
// that an operator who grants by hand grants what the command would.
func TestStoreRolesDocGrants(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/store-roles.md")
	if err != nil {
		t.Fatal(err)
	}
	want := "```sql\n" + runtimeGrantsSQL("public", "leasehold_runtime") + "```"
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/store-roles.md does not hold the runtime grants as runtimeGrantsSQL writes them; paste:\n%s", want)
	}
}

// A scoped role's store refuses, before the database is asked, every
// operation on a task outside its scope: claims, renewals, releases and
// their batches, and reads of one task; its lists and history show its
// own tasks only. leasehold's own tasks are in every scope. A role without
// a scope is unrestricted.
func TestScopeRefusesUpFront(t *testing.T) {
	t.Parallel()
	db := newRoleDB(t)
	db.scope(t, db.a, "a/")
	ctx := t.Context()
	a := leasecore.New(openAs(t, db.aURL, Options{}))
	b := leasecore.New(openAs(t, db.bURL, Options{})) // unrestricted: no scope
	mine, err := a.Claim(ctx, leasecore.ClaimParams{Task: "a/1", Owner: "a1", TTL: time.Minute})
	if err != nil {
		t.Fatalf("claim of its own task: %v", err)
	}
	theirs, err := b.Claim(ctx, leasecore.ClaimParams{Task: "b/1", Owner: "b1", TTL: time.Minute})
	if err != nil {
		t.Fatalf("an unrestricted role's claim: %v", err)
	}
	if _, err := b.Claim(ctx, leasecore.ClaimParams{Task: "a/2", Owner: "b1", TTL: time.Minute}); err != nil {
		t.Fatalf("an unrestricted role's claim of another team's prefix: %v", err)
	}
	if _, err := a.Claim(ctx, leasecore.ClaimParams{Task: "leasehold:prune/" + db.a, Owner: "a1", TTL: time.Minute}); err != nil {
		t.Errorf("a scoped role's claim of its own prune lease: %v", err)
	}
	if _, err := a.Claim(ctx, leasecore.ClaimParams{Task: "leasehold:other", Owner: "a1", TTL: time.Minute}); err != nil {
		t.Errorf("a scoped role's claim of one of leasehold's own tasks: %v", err)
	}
	_, err = a.Claim(ctx, leasecore.ClaimParams{Task: "leasehold:prune/" + db.b, Owner: "a1", TTL: time.Minute})
	forbidden(t, "claim of another role's prune lease", err, db.a, "hold", "leasehold:prune/"+db.b)

	_, err = a.Claim(ctx, leasecore.ClaimParams{Task: "b/1", Owner: "a1", TTL: time.Minute})
	forbidden(t, "claim", err, db.a, "hold", "b/1")
	_, err = a.Renew(ctx, leasecore.RenewParams{Task: "b/1", Owner: "b1", Token: theirs.Token})
	forbidden(t, "renew", err, db.a, "hold", "b/1")
	_, err = a.Release(ctx, leasecore.ReleaseParams{Task: "b/1", Owner: "b1"})
	forbidden(t, "release", err, db.a, "hold", "b/1")
	_, err = a.Get(ctx, "b/1")
	forbidden(t, "get", err, db.a, "read", "b/1")
	_, err = a.History(ctx, "b/1", 10)
	forbidden(t, "history", err, db.a, "read", "b/1")
	rs := a.RenewBatch(ctx, []leasecore.RenewParams{{Task: "a/1", Owner: "a1"}, {Task: "b/1", Owner: "b1"}})
	if rs[0].Err != nil || rs[0].Lease == nil || rs[0].Lease.Token != mine.Token {
		t.Errorf("batch renewal of its own task: %+v", rs[0])
	}
	forbidden(t, "batch renewal", rs[1].Err, db.a, "hold", "b/1")
	if l, err := b.Get(ctx, "b/1"); err != nil || l == nil || l.Owner != "b1" {
		t.Errorf("b/1 after team a's attempts: %+v, %v; want b1's lease untouched", l, err)
	}

	leases, _, err := a.List(ctx, leasecore.ListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var tasks []string
	for _, l := range leases {
		tasks = append(tasks, l.Task)
	}
	if want := []string{"a/1", "a/2", "leasehold:other", "leasehold:prune/" + db.a}; !slices.Equal(tasks, want) {
		t.Errorf("a scoped role lists %v, want its own and leasehold's %v", tasks, want)
	}
	if got := a.RenewBatch(ctx, []leasecore.RenewParams{{Task: "a/2", Owner: "a1"}}); !errors.Is(got[0].Err, leasecore.ErrLost) {
		t.Errorf("renewal of its own task held by another owner: %v, want lost", got[0].Err)
	}
	scope, err := a.Scope(ctx)
	if err != nil || scope.Role != db.a || !slices.Equal(scope.Prefixes, []string{"a/"}) {
		t.Errorf("scope of a: %+v, %v", scope, err)
	}
	if scope, err := b.Scope(ctx); err != nil || scope.Role != db.b || scope.Restricted() {
		t.Errorf("scope of b, which has none: %+v, %v; want unrestricted", scope, err)
	}
}

// A scope that shrinks while a store's copy still admits a task: a batch
// of claims carrying that task is refused by the database as a whole, and
// the other claims in it are sent again and acquire; the refused task's
// claim is refused (ForbiddenError), as every later one is. A claim of it
// that goes out alone is answered unavailable (never held), and the next
// is refused up front.
func TestScopeShrinksUnderABatch(t *testing.T) {
	t.Parallel()
	db := newRoleDB(t)
	db.scope(t, db.a, "a/", "gate/", "x/")
	ctx := t.Context()
	// A copy that never goes stale by itself in this test.
	st := openAs(t, db.aURL, Options{ScopeMaxAge: time.Hour})
	if _, err := st.Claim(ctx, leasecore.ClaimParams{Task: "a/warm", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	db.scope(t, db.a, "a/", "gate/")

	batches := recordBatches(st.claims)
	unblock := blockClaims(t, db.admin, st)
	results := []<-chan result{
		claimAsync(ctx, st, "a/1", "o1"),
		claimAsync(ctx, st, "x/1", "o2"),
		claimAsync(ctx, st, "a/2", "o3"),
	}
	waitQueued(t, st.claims, len(results))
	unblock()
	for i, done := range results {
		r := <-done
		if i == 1 {
			forbidden(t, "claim of x/1 in a batch", r.err, db.a, "hold", "x/1")
			continue
		}
		if r.err != nil || r.lease == nil || r.lease.Owner != r.owner {
			t.Errorf("claim by %s batched with a task out of scope: %+v, %v; want acquired", r.owner, r.lease, r.err)
		}
	}
	if b := batches(); len(b) == 0 || !slices.Contains(b[0], "x/1") || len(b[0]) != 3 {
		t.Errorf("batches %v: the three claims were not sent together first", b)
	}

	// Alone, with the copy stale again.
	db.scope(t, db.a, "a/", "gate/", "x/")
	st.scope.Invalidate(false)
	if _, err := st.Claim(ctx, leasecore.ClaimParams{Task: "a/warm", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	db.scope(t, db.a, "a/", "gate/")
	_, err := st.Claim(ctx, leasecore.ClaimParams{Task: "x/2", Owner: "o", TTL: time.Minute})
	if !errors.Is(err, leasecore.ErrUnavailable) || errors.Is(err, leasecore.ErrHeld) || !strings.Contains(err.Error(), "row-level security") {
		t.Errorf("lone claim refused by the database: %v, want unavailable saying row-level security refused it", err)
	}
	_, err = st.Claim(ctx, leasecore.ClaimParams{Task: "x/2", Owner: "o", TTL: time.Minute})
	forbidden(t, "the next claim of x/2", err, db.a, "hold", "x/2")
}

// A lease held when its task leaves the holder's scope: the next renewal
// (the copy of the scope still admitting the task) matches no row the
// role may see, and is refused as forbidden, not reported as a task never
// claimed.
func TestScopeShrinksUnderALease(t *testing.T) {
	t.Parallel()
	db := newRoleDB(t)
	db.scope(t, db.a, "a/", "x/")
	ctx := t.Context()
	st := openAs(t, db.aURL, Options{ScopeMaxAge: time.Hour})
	l, err := st.Claim(ctx, leasecore.ClaimParams{Task: "x/1", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := st.Claim(ctx, leasecore.ClaimParams{Task: "x/2", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	db.scope(t, db.a, "a/")
	_, err = st.Renew(ctx, leasecore.RenewParams{Task: "x/1", Owner: "o", Token: l.Token})
	forbidden(t, "renewal after the scope shrank", err, db.a, "hold", "x/1")

	// The same in a batch (how keepalive streams renew), the copy stale
	// again.
	db.scope(t, db.a, "a/", "x/")
	st.scope.Invalidate(false)
	if _, err := st.Claim(ctx, leasecore.ClaimParams{Task: "a/warm", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	db.scope(t, db.a, "a/")
	rs, err := st.RenewBatch(ctx, []leasecore.RenewParams{{Task: "x/2", Owner: "o", Token: l2.Token}, {Task: "a/warm", Owner: "o"}})
	if err != nil {
		t.Fatal(err)
	}
	forbidden(t, "batch renewal after the scope shrank", rs[0].Err, db.a, "hold", "x/2")
	if rs[1].Err != nil {
		t.Errorf("batch renewal of a task still in scope: %v", rs[1].Err)
	}
}

// Only the owner writes scopes. A scope names an existing role that
// row-level security binds; a runtime role reads its own scope and no
// other, and cannot write any.
func TestRoleScopeCatalog(t *testing.T) {
	t.Parallel()
	db := newRoleDB(t)
	ctx := t.Context()
	svc := leasecore.New(mustOpen(t, db.ownerU))
	scope := func(role string) leasecore.RoleScope {
		return leasecore.RoleScope{Role: role, Prefixes: []string{"p/"}}
	}
	if _, err := svc.CreateRoleScope(ctx, scope("lh_nobody_here")); !errors.Is(err, leasecore.ErrNotFound) || !strings.Contains(err.Error(), `database role "lh_nobody_here"`) {
		t.Errorf("scope of a role that does not exist: %v, want not found naming it", err)
	}
	for _, role := range []string{db.owner, "postgres"} {
		var ve *leasecore.ValidationError
		if _, err := svc.CreateRoleScope(ctx, scope(role)); !errors.As(err, &ve) || ve.Field != "Role" || !strings.Contains(ve.Rule, "row-level security") {
			t.Errorf("scope of %s, which bypasses row-level security: %v, want refused naming Role", role, err)
		}
	}
	if _, err := svc.UpdateRoleScope(ctx, scope(db.a)); !errors.Is(err, leasecore.ErrNotFound) {
		t.Errorf("update of a scope that does not exist: %v, want not found", err)
	}
	created, err := svc.CreateRoleScope(ctx, leasecore.RoleScope{Role: db.a, Prefixes: []string{"z/", "a/"}})
	if err != nil || !slices.Equal(created.Prefixes, []string{"a/", "z/"}) || created.CreatedAt.IsZero() {
		t.Fatalf("create: %+v, %v", created, err)
	}
	if _, err := svc.CreateRoleScope(ctx, scope(db.a)); !errors.Is(err, leasecore.ErrExists) {
		t.Errorf("second create: %v, want exists", err)
	}
	if _, err := svc.CreateRoleScope(ctx, scope(db.b)); err != nil {
		t.Fatal(err)
	}
	if got, err := svc.GetRoleScope(ctx, db.a); err != nil || got == nil || !slices.Equal(got.Prefixes, []string{"a/", "z/"}) {
		t.Errorf("get: %+v, %v", got, err)
	}

	// As runtime role a, with SQL of its own.
	conn := mustConn(t, db.aURL)
	rows, err := conn.Query(ctx, `SELECT role FROM leasehold_role_scopes`)
	if err != nil {
		t.Fatal(err)
	}
	seen, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(seen, []string{db.a}) {
		t.Errorf("role a sees the scopes of %v (%v), want its own only", seen, err)
	}
	for _, sql := range []string{
		`UPDATE leasehold_role_scopes SET prefixes = '{""}'`,
		`DELETE FROM leasehold_role_scopes`,
		fmt.Sprintf(`INSERT INTO leasehold_role_scopes (role, prefixes) VALUES ('%s_x', '{""}')`, db.a),
	} {
		if _, err := conn.Exec(ctx, sql); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("role a ran %q: %v, want permission denied", sql, err)
		}
	}

	if ok, err := svc.DeleteRoleScope(ctx, db.a); err != nil || !ok {
		t.Errorf("delete: %v, %v", ok, err)
	}
	if ok, err := svc.DeleteRoleScope(ctx, db.a); err != nil || ok {
		t.Errorf("second delete: %v, %v; want false", ok, err)
	}
}

// A scoped role's cursor reads its own events only: the ids of the other
// roles' events, which it cannot see, are gaps that settle once the
// transactions that could hold them have ended, and its own events after
// them are delivered in order.
func TestScopedFeedSkipsInvisibleEvents(t *testing.T) {
	t.Parallel()
	db := newRoleDB(t)
	db.scope(t, db.a, "a/")
	db.scope(t, db.b, "b/")
	ctx := t.Context()
	a := openAs(t, db.aURL, Options{})
	b := openAs(t, db.bURL, Options{})
	cur, err := a.FollowHistory(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	for i := range 3 {
		mustClaim(t, b, fmt.Sprintf("b/%d", i), "b", time.Minute)
		mustClaim(t, a, fmt.Sprintf("a/%d", i), "a", time.Minute)
	}
	var got []leasecore.Event
	poll(t, "team a's three events", func() bool {
		evs, err := cur.Next(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, evs...)
		return len(got) >= 3
	})
	for i, e := range got {
		if e.Task != fmt.Sprintf("a/%d", i) || e.Kind != leasecore.EventAcquired {
			t.Errorf("event %d: %+v, want a/%d acquired", i, e, i)
		}
	}
	if len(got) != 3 {
		t.Errorf("team a read %d events, want its 3", len(got))
	}
}

// Each scoped role's pruner takes a prune lease of its own, so one team's
// pass never makes another's skip, and prunes its own tasks' history
// only; an unrestricted store's pruner takes the fleet's lease and prunes
// everything.
func TestScopedPruners(t *testing.T) {
	t.Parallel()
	db := newRoleDB(t)
	db.scope(t, db.a, "a/")
	db.scope(t, db.b, "b/")
	ctx := t.Context()
	owner := leasecore.New(mustOpen(t, db.ownerU))
	if _, err := owner.UpdatePolicy(ctx, leasecore.RetentionPolicy{Name: leasecore.DefaultPolicy, KeepLast: 1}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	a := leasecore.New(openAs(t, db.aURL, Options{}))
	b := leasecore.New(openAs(t, db.bURL, Options{}))
	for _, task := range []string{"a/1", "b/1"} {
		svc := a
		if task[0] == 'b' {
			svc = b
		}
		for range 3 { // acquired and released, three times: six events
			l, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "o", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "o", Token: l.Token}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Team b's pruner is mid-pass, holding its lease.
	bScope, err := b.Scope(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := leasecore.PruneTaskFor(bScope); got != leasecore.PruneTask+"/"+db.b {
		t.Fatalf("team b's prune lease %q", got)
	}
	if _, err := b.Claim(ctx, leasecore.ClaimParams{Task: leasecore.PruneTaskFor(bScope), Owner: "b-pruner", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	result, n, err := leasecore.NewPruner(a, time.Minute, "a-pruner", nil).Once(ctx)
	if err != nil || result != leasecore.Pruned || n != 5 {
		t.Errorf("team a's pass while team b's pruner holds its lease: %s, %d deleted, %v; want pruned, 5 (a/1's)", result, n, err)
	}
	if evs, err := owner.History(ctx, "b/1", 10); err != nil || len(evs) != 6 {
		t.Errorf("b/1 after team a's pass: %d events, %v; want all 6", len(evs), err)
	}
	result, _, err = leasecore.NewPruner(b, time.Minute, "b-other", nil).Once(ctx)
	if err != nil || result != leasecore.PruneSkipped {
		t.Errorf("team b's second pruner: %s, %v; want skipped (its team's lease is held)", result, err)
	}
	// The owner, whom row-level security does not bind, prunes what is
	// left: b/1's five, and the older event of team a's prune lease.
	result, n, err = leasecore.NewPruner(owner, time.Minute, "owner", nil).Once(ctx)
	if err != nil || result != leasecore.Pruned || n != 6 {
		t.Errorf("the owner's pass: %s, %d, %v; want pruned, 6", result, n, err)
	}
	if evs, err := owner.History(ctx, "b/1", 10); err != nil || len(evs) != 1 {
		t.Errorf("b/1 after the owner's pass: %d events, %v; want 1", len(evs), err)
	}
}

// A batch renewal on a store that cannot read its role's scope (the server
// is down) fails as a whole, as its statement would have, so that callers
// (and the sidecar's metrics) see the store fail rather than a batch of
// answers.
func TestRenewBatchWithoutTheScope(t *testing.T) {
	t.Parallel()
	st := mustOpen(t, pgtest.ClosedURL(t))
	rs, err := st.RenewBatch(t.Context(), []leasecore.RenewParams{{Task: "a/1", Owner: "o", TTL: time.Second}})
	if !errors.Is(err, leasecore.ErrUnavailable) || rs != nil {
		t.Errorf("batch renewal with the server down: %v, %v; want the batch unavailable", rs, err)
	}
}
