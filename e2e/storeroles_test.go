package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// The store as the boundary (docs/store-roles.md): sidecars run as a
// PostgreSQL runtime role that may read and write leasehold's rows and
// nothing else, and, optionally, as a team's role limited to its task
// prefixes by row-level security.

// sqlConn opens a plain connection to url for the test.
func sqlConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// mustExec runs sql on conn, failing the test on an error.
func mustExec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// refusedSQL checks that each statement fails on conn for want of a
// privilege (SQLSTATE 42501: permission denied, must be owner, or a
// row-level security policy), with an error saying want.
func refusedSQL(t *testing.T, conn *pgx.Conn, want string, stmts ...string) {
	t.Helper()
	for _, sql := range stmts {
		_, err := conn.Exec(t.Context(), sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, want) {
			t.Errorf("%s: %v, want refused for want of a privilege (%s)", sql, err, want)
		}
	}
}

// leaseholdExit runs the leasehold binary and returns its exit code and
// output.
func leaseholdExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, err := runLeasehold(args...)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out
	case errors.As(err, &exit):
		return exit.ExitCode(), out
	default:
		t.Fatalf("leasehold %s: %v", strings.Join(args, " "), err)
		return -1, ""
	}
}

// pollFor polls cond every 50 ms until it holds, failing the test after
// d.
func pollFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A sidecar running as a runtime role (granted by `leasehold migrate
// --grant-runtime` run as the owner) serves the whole API: claims,
// renewals, releases, keepalive streams, the watch with its LISTEN session,
// history, the expiry sweep, the pruner and the declarations; so do
// `leasehold run --store`, the operator commands and `leasehold prune`. The
// same role, with SQL of its own, can neither change the schema (CREATE,
// ALTER, DROP), nor TRUNCATE or delete leasehold's leases, nor forge an
// event, nor write a declaration, nor reach another schema. A sidecar that
// finds the schema behind says to run leasehold migrate as the owner, and
// serves once the owner has.
func TestRuntimeRoleLeastPrivilege(t *testing.T) {
	t.Parallel()
	adminURL, owner, ownerURL := pgtest.NewOwnedDatabase(t)
	runtime, runtimeURL := pgtest.NewRole(t, adminURL, "lh_runtime")
	if code, out := leaseholdExit(t, "migrate", "--store", ownerURL, "--grant-runtime", runtime); code != 0 {
		t.Fatalf("leasehold migrate --grant-runtime as the owner: exit %d\n%s", code, out)
	}
	// The owner's part: a declaration, and a default policy that keeps two
	// events per task, for the pruner to enforce.
	ownerSQL := sqlConn(t, ownerURL)
	mustExec(t, ownerSQL, `INSERT INTO leasehold_tasks (name, ttl_ms) VALUES ('declared/job', 45000)`)
	mustExec(t, ownerSQL, `UPDATE leasehold_retention_policies SET keep_last = 2 WHERE name = 'default'`)

	s := startSidecar(t, runtimeURL, "--prune-interval", "1s")
	s.waitReady()

	// Claim (the declared ttl applies), renew, release.
	r := s.call("POST", "/v1/leases/declared%2Fjob/claim", map[string]any{"owner": "w1"})
	if r.Status != http.StatusOK || r.lease(t)["ttl_ms"] != float64(45000) {
		t.Fatalf("claim as the runtime role: %d %s, want 200 with the declared ttl", r.Status, r.Raw)
	}
	if r := s.call("POST", "/v1/leases/declared%2Fjob/renew", map[string]any{"owner": "w1", "token": r.token(t)}); r.Status != http.StatusOK {
		t.Fatalf("renew: %d %s", r.Status, r.Raw)
	}
	if r := s.call("POST", "/v1/leases/declared%2Fjob/release", map[string]any{"owner": "w1"}); r.Status != http.StatusOK || r.Body["released"] != true {
		t.Fatalf("release: %d %s", r.Status, r.Raw)
	}
	if r := s.call("GET", "/v1/tasks/declared%2Fjob", nil); r.Status != http.StatusOK || r.Body["ttl_ms"] != float64(45000) {
		t.Fatalf("declaration: %d %s", r.Status, r.Raw)
	}

	// The watch, and the expiry the sweep records for a lease nobody claims again.
	w := s.openWatch("/v1/watch?prefix=short", "")
	w.ready()
	if r := s.call("POST", "/v1/leases/short/claim", map[string]any{"owner": "brief", "ttl_ms": 300}); r.Status != http.StatusOK {
		t.Fatalf("claim short: %d %s", r.Status, r.Raw)
	}
	got := w.changes(2)
	if got[0].Event.Kind != "acquired" || got[1].Event.Kind != "expired" {
		t.Fatalf("watch of short: %s, %s; want acquired then expired (recorded by the sweep)", got[0].Raw, got[1].Raw)
	}
	admin := sqlConn(t, adminURL)
	// The watch's poll for other processes' commits (postgres.ChangesPoll),
	// as the runtime role: it sees the newest event.
	var newest int64
	if err := sqlConn(t, runtimeURL).QueryRow(t.Context(), `SELECT coalesce(max(id), 0) FROM leasehold_history`).Scan(&newest); err != nil || newest < got[1].Event.ID {
		t.Errorf("the watch's poll as the runtime role: newest %d (%v), want at least %d", newest, err, got[1].Event.ID)
	}

	// A keepalive stream: acquired, renewed, released on hang-up.
	k := s.openKeepalive("/v1/leases/kept/keepalive?owner=k1&ttl_ms=300")
	if ev := k.next(); ev.Name != "acquired" {
		t.Fatalf("keepalive: first event %s %v", ev.Name, ev.Data)
	}
	if ev := k.next(); ev.Name != "renewed" {
		t.Fatalf("keepalive: second event %s %v, want renewed", ev.Name, ev.Data)
	}
	k.close()
	s.waitFree("kept")

	// History, and the pruner keeping it to the default policy's two.
	for range 3 {
		r := s.call("POST", "/v1/leases/churn/claim", map[string]any{"owner": "c"})
		if r.Status != http.StatusOK {
			t.Fatalf("claim churn: %d %s", r.Status, r.Raw)
		}
		s.call("POST", "/v1/leases/churn/release", map[string]any{"owner": "c"})
	}
	pollFor(t, "the pruner (as the runtime role) to prune churn's history to 2 events", 30*time.Second, func() bool {
		r := s.call("GET", "/v1/leases/churn/history", nil)
		events, _ := r.Body["events"].([]any)
		return r.Status == http.StatusOK && len(events) == 2
	})

	// The CLI as the runtime role.
	if code, out := leaseholdExit(t, "run", "--store", runtimeURL, "--task", "cli-job", "--ttl", "5s", "--", "true"); code != 0 {
		t.Errorf("leasehold run --store as the runtime role: exit %d\n%s", code, out)
	}
	if code, out := leaseholdExit(t, "list", "--store", runtimeURL); code != 0 {
		t.Errorf("leasehold list --store as the runtime role: exit %d\n%s", code, out)
	}
	if code, out := leaseholdExit(t, "prune", "--store", runtimeURL); code != 0 {
		t.Errorf("leasehold prune --store as the runtime role: exit %d\n%s", code, out)
	}

	// The runtime role with SQL of its own.
	mustExec(t, admin, `CREATE SCHEMA other; CREATE TABLE other.secrets (s text); INSERT INTO other.secrets VALUES ('x')`)
	rt := sqlConn(t, runtimeURL)
	refusedSQL(t, rt, "",
		`CREATE TABLE leasehold_evil (a int)`,
		`CREATE INDEX leasehold_evil ON leasehold_leases (owner)`,
		`ALTER TABLE leasehold_leases ADD COLUMN evil int`,
		`ALTER TABLE leasehold_history DISABLE ROW LEVEL SECURITY`,
		`DROP TABLE leasehold_history`,
		`DROP POLICY leasehold_in_scope ON leasehold_leases`,
		`TRUNCATE leasehold_leases`,
		`TRUNCATE leasehold_history`,
		`DELETE FROM leasehold_leases`,
		`INSERT INTO leasehold_tasks (name, ttl_ms) VALUES ('evil', 1000)`,
		`UPDATE leasehold_retention_policies SET keep_last = 1`,
		`INSERT INTO leasehold_role_scopes (role, prefixes) VALUES ('x', '{}')`,
		`INSERT INTO leasehold_schema_migrations (version, name) VALUES (999, 'evil')`,
		`SELECT * FROM other.secrets`,
		`CREATE SCHEMA evil`,
	)
	refusedSQL(t, rt, "row-level security", `UPDATE leasehold_history SET detail = 'forged'`)

	// The schema behind this build: as if a newer owner's migration had not
	// run yet. A sidecar as the runtime role cannot migrate it, says what to
	// do, and serves once the owner has migrated.
	var version int
	var name string
	if err := admin.QueryRow(t.Context(), `DELETE FROM leasehold_schema_migrations WHERE version = (SELECT max(version) FROM leasehold_schema_migrations) RETURNING version, name`).Scan(&version, &name); err != nil {
		t.Fatal(err)
	}
	late := startSidecar(t, runtimeURL, "--prune-interval", "0")
	want := "run `leasehold migrate --store URL` as the role that owns leasehold's tables"
	pollFor(t, "the sidecar's log to say what to do", 30*time.Second, func() bool { return strings.Contains(late.logs.String(), want) })
	if logs := late.logs.String(); !strings.Contains(logs, owner) || !strings.Contains(logs, runtime+`\" may not change it`) {
		t.Errorf("the log does not name the owner %s and the runtime role %s:\n%s", owner, runtime, logs)
	}
	if r := late.call("GET", "/readyz", nil); r.Status != http.StatusServiceUnavailable {
		t.Errorf("readyz with the schema behind: %d %s, want 503", r.Status, r.Raw)
	}
	mustExec(t, admin, `INSERT INTO leasehold_schema_migrations (version, name) VALUES ($1, $2)`, version, name) // the owner's migration
	late.waitReady()
	if r := late.call("POST", "/v1/leases/late/claim", map[string]any{"owner": "l"}); r.Status != http.StatusOK {
		t.Errorf("claim after the owner migrated: %d %s", r.Status, r.Raw)
	}
}

// Two teams on one store, each sidecar running as its team's role, the
// roles limited to their prefixes by Terraform (leasehold_role_scope,
// applied with the real terraform binary as the owner). Through its
// sidecar, team a claims, renews, releases and reads its own tasks, gets
// 403 for team b's (claim, renew, release, keepalive, lease, history), and
// its list and watch show its own tasks only; `leasehold claim --store` as
// team a's role exits 77. With plain SQL as team a's role, team b's rows
// are invisible, cannot be changed, deleted, inserted or claimed, and a
// temporary table cannot stand in for the scopes table.
func TestRoleScopesTwoTeams(t *testing.T) {
	t.Parallel()
	adminURL, _, ownerURL := pgtest.NewOwnedDatabase(t)
	teamA, aURL := pgtest.NewRole(t, adminURL, "lh_team_a")
	teamB, bURL := pgtest.NewRole(t, adminURL, "lh_team_b")
	if code, out := leaseholdExit(t, "migrate", "--store", ownerURL, "--grant-runtime", teamA+","+teamB); code != 0 {
		t.Fatalf("leasehold migrate --grant-runtime: exit %d\n%s", code, out)
	}

	ws := newWorkspace(t, ownerURL)
	cfg := fmt.Sprintf(`terraform {
  required_providers {
    leasehold = { source = "leasehold/leasehold" }
  }
}

provider "leasehold" {}

resource "leasehold_role_scope" "a" {
  role     = %q
  prefixes = ["a/"]
}

resource "leasehold_role_scope" "b" {
  role     = %q
  prefixes = ["b/"]
}
`, teamA, teamB)
	if err := os.WriteFile(filepath.Join(ws.dir, "main.tf"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ws.run([]int{0}, "init", "-input=false")
	ws.run([]int{0}, "apply", "-auto-approve", "-input=false")

	sa := startSidecar(t, aURL)
	sb := startSidecar(t, bURL)
	sa.waitReady()
	sb.waitReady()
	wa := sa.openWatch("/v1/watch", "")
	wa.ready()

	mine := sa.call("POST", "/v1/leases/a%2F1/claim", map[string]any{"owner": "a1", "ttl_ms": 60000})
	theirs := sb.call("POST", "/v1/leases/b%2F1/claim", map[string]any{"owner": "b1", "ttl_ms": 60000})
	if mine.Status != http.StatusOK || theirs.Status != http.StatusOK {
		t.Fatalf("each team's claim of its own task: %d %s; %d %s", mine.Status, mine.Raw, theirs.Status, theirs.Raw)
	}
	if r := sa.call("POST", "/v1/leases/a%2F1/renew", map[string]any{"owner": "a1", "token": mine.token(t)}); r.Status != http.StatusOK {
		t.Errorf("team a renews its own: %d %s", r.Status, r.Raw)
	}
	forbidden := func(what string, r response) {
		t.Helper()
		if r.Status != http.StatusForbidden || r.Body["type"] != "urn:leasehold:problem:forbidden" ||
			!strings.Contains(r.Raw, teamA) || !strings.Contains(r.Raw, `b/1`) {
			t.Errorf("%s of team b's task through team a's sidecar: %d %s, want 403 forbidden naming the role and the task", what, r.Status, r.Raw)
		}
	}
	forbidden("claim", sa.call("POST", "/v1/leases/b%2F1/claim", map[string]any{"owner": "a1"}))
	forbidden("renew", sa.call("POST", "/v1/leases/b%2F1/renew", map[string]any{"owner": "b1", "token": theirs.token(t)}))
	forbidden("release", sa.call("POST", "/v1/leases/b%2F1/release", map[string]any{"owner": "b1"}))
	forbidden("keepalive", sa.call("GET", "/v1/leases/b%2F1/keepalive?owner=a1", nil))
	forbidden("get", sa.call("GET", "/v1/leases/b%2F1", nil))
	forbidden("history", sa.call("GET", "/v1/leases/b%2F1/history", nil))
	if code, out := leaseholdExit(t, "claim", "b/1", "--store", aURL, "--owner", "a1"); code != 77 || !strings.Contains(out, teamA) {
		t.Errorf("leasehold claim --store as team a's role: exit %d\n%s\nwant 77 naming the role", code, out)
	}
	list := sa.call("GET", "/v1/leases", nil)
	if leases, _ := list.Body["leases"].([]any); len(leases) != 1 || leases[0].(map[string]any)["task"] != "a/1" {
		t.Errorf("team a's list: %s, want a/1 only", list.Raw)
	}
	if r := sa.call("POST", "/v1/leases/a%2F1/release", map[string]any{"owner": "a1"}); r.Status != http.StatusOK || r.Body["released"] != true {
		t.Errorf("team a releases its own: %d %s", r.Status, r.Raw)
	}

	// Team b's churn interleaved with team a's: team a's watch sees its own
	// three events (acquired, released above; then a/2), none of b's.
	for i := range 3 {
		sb.call("POST", fmt.Sprintf("/v1/leases/b%%2Fchurn%d/claim", i), map[string]any{"owner": "b1"})
	}
	sa.call("POST", "/v1/leases/a%2F2/claim", map[string]any{"owner": "a1"})
	var own []watchEvent
	for len(own) < 3 {
		ev := wa.changes(1)[0]
		switch {
		case strings.HasPrefix(ev.Event.Task, "leasehold:prune/"+teamA), ev.Event.Task == "leasehold:prune":
			// leasehold's own, which every role sees: team a's pruner's lease.
		case strings.HasPrefix(ev.Event.Task, "a/"):
			own = append(own, ev)
		default:
			t.Fatalf("team a's watch delivered %s", ev.Raw)
		}
	}

	// Plain SQL as team a's role.
	conn := sqlConn(t, aURL)
	ctx := t.Context()
	var visible int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM leasehold_leases WHERE task NOT LIKE 'a/%' AND task NOT LIKE 'leasehold:%')
	                                   + (SELECT count(*) FROM leasehold_history WHERE task NOT LIKE 'a/%' AND task NOT LIKE 'leasehold:%')`).Scan(&visible); err != nil || visible != 0 {
		t.Errorf("team a sees %d of team b's rows (%v), want none", visible, err)
	}
	for _, sql := range []string{
		`UPDATE leasehold_leases SET owner = 'a1', expires_at = now() WHERE task = 'b/1'`,
		`DELETE FROM leasehold_history WHERE task LIKE 'b/%'`,
	} {
		if tag, err := conn.Exec(ctx, sql); err != nil || tag.RowsAffected() != 0 {
			t.Errorf("%s as team a: %v rows, %v; want nothing done", sql, tag.RowsAffected(), err)
		}
	}
	refusedSQL(t, conn, "row-level security",
		`INSERT INTO leasehold_leases (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms) VALUES ('b/2', 'a1', 1, now(), now(), now() + interval '1 hour', 3600000)`,
		`INSERT INTO leasehold_leases (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms) VALUES ('b/1', 'a1', 99, now(), now(), now() + interval '1 hour', 3600000)
		   ON CONFLICT (task) DO UPDATE SET owner = excluded.owner`,
		`INSERT INTO leasehold_history (task, kind, owner, token, at) VALUES ('b/1', 'released', 'b1', 1, now())`,
		`UPDATE leasehold_leases SET task = 'b/3' WHERE task = 'a/1'`,
		// Team b's prune lease: holding it would stop team b's pruning.
		fmt.Sprintf(`INSERT INTO leasehold_leases (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms) VALUES ('leasehold:prune/%s', 'a1', 1, now(), now(), now() + interval '1 day', 86400000)
		   ON CONFLICT (task) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at`, teamB),
	)
	refusedSQL(t, conn, "permission denied",
		fmt.Sprintf(`UPDATE leasehold_role_scopes SET prefixes = '{""}' WHERE role = '%s'`, teamA),
		fmt.Sprintf(`SET ROLE %s`, teamB),
	)
	// A temporary table named like the scopes table comes first on the
	// session's search_path; the policies read the real one.
	mustExec(t, conn, `CREATE TEMP TABLE leasehold_role_scopes (role text, prefixes text[])`)
	mustExec(t, conn, `INSERT INTO leasehold_role_scopes VALUES (current_user, '{""}')`)
	refusedSQL(t, conn, "row-level security",
		`INSERT INTO leasehold_leases (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms) VALUES ('b/4', 'a1', 1, now(), now(), now() + interval '1 hour', 3600000)`)

	if r := sb.call("GET", "/v1/leases/b%2F1", nil); r.Status != http.StatusOK || r.Body["held"] != true || r.lease(t)["owner"] != "b1" || r.lease(t)["token"] != float64(theirs.token(t)) {
		t.Errorf("b/1 after team a's attempts: %d %s, want b1's lease as granted", r.Status, r.Raw)
	}
	if r := sb.call("GET", "/v1/leases/b%2F1/history", nil); r.Status != http.StatusOK || len(r.Body["events"].([]any)) != 1 {
		t.Errorf("b/1's history after team a's attempts: %s, want its one acquired event", r.Raw)
	}
	ws.run([]int{0}, "destroy", "-auto-approve", "-input=false")
}
