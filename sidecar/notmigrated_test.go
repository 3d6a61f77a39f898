package sidecar

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// failingMigrateStore fails every migration with err.
type failingMigrateStore struct {
	leasecore.Store
	err error
}

func (s failingMigrateStore) Migrate(context.Context) error { return s.err }

// Until a migration succeeds, what the sidecar answers says why the last
// attempt failed (here, in the words the PostgreSQL driver uses behind
// PgBouncer without default_query_exec_mode=exec), not only that the schema
// is not migrated; once one succeeds, it serves.
func TestNotMigratedSaysWhy(t *testing.T) {
	t.Parallel()
	const cause = "a prepared statement clashed or went missing (prepared statement \"stmtcache_1\" already exists): " +
		"behind PgBouncer in transaction mode, add default_query_exec_mode=exec to the store URL"
	store := openSQLite(t, true)
	ts := startServer(t, withStore(failingMigrateStore{Store: store, err: leasecore.Unavailable("migrate", errors.New(cause))}))

	// Before any attempt has failed, nothing more is known.
	r := ts.post("/v1/leases/job/claim", body{"owner": "w1"})
	expect(t, r, http.StatusServiceUnavailable)
	if got := decode[api.ClaimUnavailable](t, r); !strings.Contains(got.Detail, "not migrated yet") {
		t.Fatalf("claim before any migration: %+v", got)
	}

	if err := ts.srv.Migrate(t.Context()); err == nil {
		t.Fatal("the migration did not fail as arranged")
	}
	r = ts.post("/v1/leases/job/claim", body{"owner": "w1"})
	expect(t, r, http.StatusServiceUnavailable)
	got := decode[api.ClaimUnavailable](t, r)
	if !strings.Contains(got.Detail, cause) || strings.Contains(got.Detail, "not migrated yet") || strings.Contains(got.Detail, "migrate: lease store unavailable") {
		t.Errorf("claim after a failed migration: detail %q, want the migration's cause once, not \"not migrated yet\"", got.Detail)
	}
	for _, path := range []string{"/readyz", "/v1/leases/job"} {
		p := expectProblem(t, ts.get(path), http.StatusServiceUnavailable, problemUnavailable)
		if !strings.Contains(p.Detail, cause) || strings.Contains(p.Detail, "not migrated yet") {
			t.Errorf("%s after a failed migration: detail %q, want the migration's cause", path, p.Detail)
		}
	}

	// The gate still refuses the store: the lease was never written.
	if l, err := leasecore.New(store).Get(t.Context(), "job"); err != nil || l != nil {
		t.Fatalf("the store behind the gate: %v, %v; want no lease", l, err)
	}
	ts.srv.migrated.Store(true) // as if a later attempt succeeded
	expect(t, ts.post("/v1/leases/job/claim", body{"owner": "w1"}), http.StatusOK)
}
