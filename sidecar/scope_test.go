package sidecar

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/postgres"
	"github.com/leasehold/leasehold/sidecar/api"
)

// A sidecar whose store runs as a PostgreSQL role limited to "a/" answers
// every operation on another team's task 403 forbidden, naming the role
// and the task (and never 503, which a client would retry, nor "held" or
// "not held"); its own tasks work; its list shows only its own. Every
// answer conforms to openapi.yaml.
func TestScopedRoleAnswers(t *testing.T) {
	t.Parallel()
	adminURL, _, ownerURL := pgtest.NewOwnedDatabase(t)
	role, roleURL := pgtest.NewRole(t, adminURL, "lh_team_a")
	owner, err := postgres.Open(t.Context(), ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Close() })
	if err := owner.MigrateGranting(t.Context(), []string{role}); err != nil {
		t.Fatal(err)
	}
	ownerSvc := leasecore.New(owner)
	if _, err := ownerSvc.CreateRoleScope(t.Context(), leasecore.RoleScope{Role: role, Prefixes: []string{"a/"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ownerSvc.Claim(t.Context(), leasecore.ClaimParams{Task: "b/1", Owner: "b1", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	store, err := postgres.Open(context.Background(), roleURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ts := newTestServer(t, withStore(store))

	expect(t, ts.post("/v1/leases/a%2F1/claim", map[string]any{"owner": "a1", "ttl_ms": 60000}), http.StatusOK)
	refused := func(what string, r response, right string) {
		t.Helper()
		p := expectProblem(t, r, http.StatusForbidden, problemForbidden)
		if !strings.Contains(p.Detail, `database role "`+role+`" may not `+right+` task "b/1"`) || !strings.Contains(p.Detail, `"a/"`) {
			t.Errorf("%s: detail %q does not name the role, the right, the task and the scope", what, p.Detail)
		}
	}
	refused("claim", ts.post("/v1/leases/b%2F1/claim", map[string]any{"owner": "a1"}), "hold")
	refused("renew", ts.post("/v1/leases/b%2F1/renew", map[string]any{"owner": "b1"}), "hold")
	refused("release", ts.post("/v1/leases/b%2F1/release", map[string]any{"owner": "b1"}), "hold")
	refused("keepalive", ts.get("/v1/leases/b%2F1/keepalive?owner=a1&ttl_ms=1000"), "hold")
	refused("get", ts.get("/v1/leases/b%2F1"), "read")
	refused("history", ts.get("/v1/leases/b%2F1/history"), "read")

	leases := decode[api.LeaseList](t, ts.get("/v1/leases")).Leases
	if len(leases) != 1 || leases[0].Task != "a/1" {
		t.Errorf("list: %+v, want a/1 only", leases)
	}
	if l, err := ownerSvc.Get(t.Context(), "b/1"); err != nil || l == nil || l.Owner != "b1" || l.RenewCount != 0 {
		t.Errorf("b/1 after the refused calls: %+v, %v; want b1's lease untouched", l, err)
	}
	metrics := string(ts.get("/metrics").body)
	if !strings.Contains(metrics, `leasehold_claims_total{result="forbidden"} 2`) {
		t.Errorf("the refused claim and keepalive are not counted as forbidden:\n%s", grepLines([]byte(metrics), "leasehold_claims_total"))
	}
}

// A keepalive stream whose task leaves the scope of the store's role while
// it holds the lease ends with lost, reason forbidden, once the driver's
// copy of the scope is fresh: the renewal is refused, not retried until
// the lease runs out.
func TestScopeShrinksUnderAStream(t *testing.T) {
	t.Parallel()
	adminURL, _, ownerURL := pgtest.NewOwnedDatabase(t)
	role, roleURL := pgtest.NewRole(t, adminURL, "lh_team_a")
	owner, err := postgres.Open(t.Context(), ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Close() })
	if err := owner.MigrateGranting(t.Context(), []string{role}); err != nil {
		t.Fatal(err)
	}
	ownerSvc := leasecore.New(owner)
	if _, err := ownerSvc.CreateRoleScope(t.Context(), leasecore.RoleScope{Role: role, Prefixes: []string{"a/", "x/"}}); err != nil {
		t.Fatal(err)
	}
	store, err := postgres.OpenWith(context.Background(), roleURL, postgres.Options{ScopeMaxAge: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ts := newTestServer(t, withStore(store))

	s, r := ts.openStream("/v1/leases/x%2F1/keepalive?owner=k&ttl_ms=2000")
	expect(t, r, http.StatusOK)
	if ev := s.next(); ev.name != "acquired" {
		t.Fatalf("first event %s", ev.name)
	}
	if _, err := ownerSvc.UpdateRoleScope(t.Context(), leasecore.RoleScope{Role: role, Prefixes: []string{"a/"}}); err != nil {
		t.Fatal(err)
	}
	for {
		ev := s.next()
		if ev.name == "renewed" {
			continue // renewed before the copy of the scope went stale
		}
		if ev.name != "lost" || !strings.Contains(ev.data, `"reason":"forbidden"`) || !strings.Contains(ev.data, role) {
			t.Fatalf("event %s %s, want lost with reason forbidden naming the role", ev.name, ev.data)
		}
		break
	}
}
