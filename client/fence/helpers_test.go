package fence_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"
	_ "modernc.org/sqlite"             // database/sql's "sqlite"

	"github.com/leasehold/leasehold/client/fence"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// dialects are the two resource databases every test of the database/sql
// helper runs on: SQLite always, PostgreSQL when LEASEHOLD_TEST_POSTGRES_URL
// names a server (a failure under CI when it does not).
var dialects = []struct {
	dialect fence.Dialect
	open    func(t *testing.T) *sql.DB
}{
	{fence.SQLite, openSQLite},
	{fence.Postgres, openPostgres},
}

// eachDialect runs f on a fresh database of each dialect, as parallel
// subtests.
func eachDialect(t *testing.T, f func(t *testing.T, d fence.Dialect, db *sql.DB)) {
	t.Helper()
	for _, dd := range dialects {
		t.Run(string(dd.dialect), func(t *testing.T) {
			t.Parallel()
			f(t, dd.dialect, dd.open(t))
		})
	}
}

// openSQLite opens a fresh SQLite file with modernc.org/sqlite, as a
// program would (a busy timeout, so that writers wait for each other).
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// openPostgres opens a fresh PostgreSQL database with pgx's database/sql
// driver.
func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// installed is db with the fence installed.
func installed(t *testing.T, d fence.Dialect, db *sql.DB) *sql.DB {
	t.Helper()
	if err := fence.Install(t.Context(), db, d); err != nil {
		t.Fatal(err)
	}
	return db
}

// checkTx runs Check in a transaction of its own, committed when the check
// passes, rolled back when it does not.
func checkTx(t *testing.T, db *sql.DB, d fence.Dialect, task string, token int64) error {
	t.Helper()
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Check(ctx, tx, d, task, token); err != nil {
		if rerr := tx.Rollback(); rerr != nil {
			t.Fatalf("rollback after %v: %v", err, rerr)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return nil
}

// recorded is the token db's fence holds for task, or 0 for none.
func recorded(t *testing.T, db *sql.DB, task string) int64 {
	t.Helper()
	var n int64
	err := db.QueryRowContext(context.Background(), "SELECT coalesce(max(token), 0) FROM leasehold_fence WHERE task = '"+task+"'").Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// rows counts db's fence rows.
func rows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), "SELECT count(*) FROM leasehold_fence").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
