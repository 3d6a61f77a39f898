package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Roles are cluster-wide in PostgreSQL, unlike databases: every test that
// makes one on the shared server gives it a name of its own (a prefix and
// random digits) and drops it when the test ends.

// NewRole creates a login role on the test server, named prefix and random
// hex digits, and returns its name and dbURL (a URL of NewDatabase) with the
// role as its user. The server authenticates by trust, so the URL carries
// no password. When the test ends, what the role owns in dbURL's database is
// dropped and what it was granted there revoked (DROP OWNED BY), and the
// role is dropped. Create roles after their database, so that this cleanup
// runs while it still exists.
func NewRole(t testing.TB, dbURL, prefix string) (name, roleURL string) {
	t.Helper()
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name = prefix + "_" + hex.EncodeToString(b[:])
	ident := pgx.Identifier{name}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := admin(ctx, ServerURL(t), "CREATE ROLE "+ident+" LOGIN"); err != nil {
		t.Fatalf("create role %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		if err := admin(ctx, dbURL, "DROP OWNED BY "+ident+" CASCADE"); err != nil {
			t.Errorf("drop what role %s owns: %v", name, err)
		}
		if err := admin(ctx, ServerURL(t), "DROP ROLE IF EXISTS "+ident); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvURL, err)
	}
	u.User = url.User(name)
	return name, u.String()
}

// NewOwnedDatabase is NewDatabase with an owner of its own: a new login role
// (NewRole, prefix lh_owner) to which the database is given, so that it may
// create tables in its public schema, as the role that migrates
// leasehold's schema would. It returns the database's URL as the server's
// user (a superuser: the test's admin) and as the owner.
func NewOwnedDatabase(t testing.TB) (adminURL, owner, ownerURL string) {
	t.Helper()
	adminURL = NewDatabase(t)
	owner, ownerURL = NewRole(t, adminURL, "lh_owner")
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	db := pgx.Identifier{u.Path[1:]}.Sanitize()
	if err := admin(ctx, adminURL, "ALTER DATABASE "+db+" OWNER TO "+pgx.Identifier{owner}.Sanitize()); err != nil {
		t.Fatalf("give the test database to %s: %v", owner, err)
	}
	// Before the role is dropped (cleanups run last first): DROP OWNED BY
	// drops what the role owns in the database, not the database itself.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		if err := admin(ctx, adminURL, "ALTER DATABASE "+db+" OWNER TO CURRENT_USER"); err != nil {
			t.Errorf("take the test database back from %s: %v", owner, err)
		}
	})
	return adminURL, owner, ownerURL
}
