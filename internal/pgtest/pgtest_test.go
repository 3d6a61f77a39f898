package pgtest_test

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/pgtest"
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
