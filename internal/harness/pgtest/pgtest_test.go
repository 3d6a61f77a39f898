package pgtest_test

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

func TestNewDatabaseIsFreshAndDropped(t *testing.T) {
	t.Parallel()
	parent := t
	var dbURL string
	t.Run("use", func(t *testing.T) {
		dbURL = pgtest.NewDatabase(t)
		ctx := t.Context()
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatalf("connect to the new database: %v", err)
		}
		// Closed only after the database was dropped: the drop must not
		// wait for (or fail on) a connection still open to it.
		parent.Cleanup(func() { conn.Close(context.Background()) })
		var tables int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if tables != 0 {
			t.Errorf("a new database has %d tables, want 0", tables)
		}
	})
	if t.Failed() || dbURL == "" {
		return
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	conn, err := pgx.Connect(t.Context(), pgtest.ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var exists bool
	if err := conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

func TestNewDatabaseNamesAreUnique(t *testing.T) {
	t.Parallel()
	a, b := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	if a == b {
		t.Fatalf("two calls returned the same database %s", a)
	}
}

func TestClosedURLRefusesConnections(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.ClosedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() != "127.0.0.1" {
		t.Fatalf("host %q, want 127.0.0.1", u.Hostname())
	}
	var d net.Dialer
	conn, err := d.DialContext(t.Context(), "tcp", u.Host)
	if err == nil {
		conn.Close()
		t.Fatalf("something listens at %s", u.Host)
	}
}

// NewOwnedDatabase's owner may create tables in the database, connecting as
// itself; a role made by NewRole may not; both roles are gone once the
// test ends, even though the owner owns tables there.
func TestRolesOwnAndAreDropped(t *testing.T) {
	t.Parallel()
	var owner, other string
	t.Run("use", func(t *testing.T) {
		adminURL, o, ownerURL := pgtest.NewOwnedDatabase(t)
		r, otherURL := pgtest.NewRole(t, adminURL, "lh_other")
		owner, other = o, r
		ctx := t.Context()
		oc, err := pgx.Connect(ctx, ownerURL)
		if err != nil {
			t.Fatalf("connect as the owner: %v", err)
		}
		defer oc.Close(context.Background())
		var user string
		if err := oc.QueryRow(ctx, `SELECT current_user`).Scan(&user); err != nil || user != owner {
			t.Fatalf("owner's session runs as %q (%v), want %q", user, err, owner)
		}
		if _, err := oc.Exec(ctx, `CREATE TABLE owned (a int)`); err != nil {
			t.Fatalf("the owner cannot create a table: %v", err)
		}
		rc, err := pgx.Connect(ctx, otherURL)
		if err != nil {
			t.Fatalf("connect as the other role: %v", err)
		}
		defer rc.Close(context.Background())
		if _, err := rc.Exec(ctx, `CREATE TABLE not_mine (a int)`); err == nil {
			t.Error("a role that owns nothing created a table in the public schema")
		}
	})
	if t.Failed() || owner == "" {
		return
	}
	conn, err := pgx.Connect(t.Context(), pgtest.ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var left int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_roles WHERE rolname IN ($1, $2)`, owner, other).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d of roles %s, %s still exist after their test ended", left, owner, other)
	}
}
