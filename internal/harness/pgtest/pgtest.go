// Package pgtest gives tests a PostgreSQL database of their own.
//
// The server comes from LEASEHOLD_TEST_POSTGRES_URL, a postgres:// URL of a
// role that may create databases; scripts/with-postgres.sh starts a
// throwaway server and sets it (`make test` runs the tests that way). Each
// call of NewDatabase creates a fresh database on that server and drops it
// when the test ends, so tests run in parallel without seeing each other's
// rows.
//
// Without the variable, a test that needs PostgreSQL is skipped, unless the
// CI variable is set: in CI a missing server is a failure, never a skip.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the environment variable that points the tests at a server.
const EnvURL = "LEASEHOLD_TEST_POSTGRES_URL"

// adminTimeout bounds creating or dropping one database.
const adminTimeout = 30 * time.Second

// ServerURL returns the URL in LEASEHOLD_TEST_POSTGRES_URL. When it is empty
// the test is skipped with instructions, or fails if CI is set.
func ServerURL(t testing.TB) string {
	t.Helper()
	raw := os.Getenv(EnvURL)
	if raw != "" {
		return raw
	}
	const msg = "PostgreSQL not available: install postgresql-15 and run `make test`, or set " + EnvURL
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set, so this is a failure, not a skip)")
	}
	t.Skip(msg)
	return ""
}

// NewDatabase creates an empty database on the test server, registers its
// removal (with any connections still open to it) for the end of the test,
// and returns its URL: the server URL with the database name replaced, so
// user, host and parameters carry over. It skips or fails as ServerURL does
// when there is no server.
func NewDatabase(t testing.TB) string {
	t.Helper()
	server := ServerURL(t)
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL", EnvURL)
	}
	name := databaseName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := admin(ctx, server, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create test database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		if err := admin(ctx, server, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// ClosedURL returns a postgres:// URL of 127.0.0.1 at a port where nothing
// listens: it was free a moment ago, and is very unlikely to be taken by the
// time the test connects.
func ClosedURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatalf("free port %d: %v", port, err)
	}
	return fmt.Sprintf("postgres://leasehold@127.0.0.1:%d/leasehold?sslmode=disable", port)
}

// admin runs one statement on the server's own database over a connection
// of its own (CREATE and DROP DATABASE cannot run in a transaction).
func admin(ctx context.Context, server, sql string) error {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

var notIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// databaseName makes a unique database name that says which test made it:
// lh_<test name, shortened>_<random>, within PostgreSQL's 63 bytes.
func databaseName(test string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	slug := strings.Trim(notIdent.ReplaceAllString(strings.ToLower(test), "_"), "_")
	if len(slug) > 40 {
		slug = slug[len(slug)-40:]
	}
	return "lh_" + slug + "_" + hex.EncodeToString(b[:])
}
