package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/client/fence"
)

// The check's three answers, on both dialects: a higher token recorded, an
// equal one accepted, a lower one refused with the highest seen; tasks are
// fenced apart.
func TestCheck(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d fence.Dialect, db *sql.DB) {
		installed(t, d, db)
		for _, step := range []struct {
			token, highest int64 // highest: the record after the step
			stale          bool
		}{
			{token: 3, highest: 3},              // first: recorded
			{token: 3, highest: 3},              // equal: accepted
			{token: 5, highest: 5},              // higher: recorded
			{token: 4, highest: 5, stale: true}, // lower: refused
			{token: 1, highest: 5, stale: true},
			{token: 5, highest: 5},
			{token: 6, highest: 6},
		} {
			err := checkTx(t, db, d, "nightly", step.token)
			switch {
			case step.stale:
				var stale *fence.StaleTokenError
				if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStale) {
					t.Fatalf("token %d after 5: %v, want a *StaleTokenError", step.token, err)
				}
				if *stale != (fence.StaleTokenError{Task: "nightly", Token: step.token, Highest: 5, Err: stale.Err}) || stale.Err == nil {
					t.Errorf("token %d: %+v, want task nightly, token %d, highest 5 and the driver's error", step.token, *stale, step.token)
				}
				if want := `stale fencing token ` + strconv.FormatInt(step.token, 10) + ` for task "nightly": highest seen is 5`; err.Error() != want {
					t.Errorf("message %q, want %q", err.Error(), want)
				}
			case err != nil:
				t.Fatalf("token %d: %v", step.token, err)
			}
			if got := recorded(t, db, "nightly"); got != step.highest {
				t.Errorf("after token %d the record is %d, want %d", step.token, got, step.highest)
			}
		}
		// Another task has a fence of its own.
		if err := checkTx(t, db, d, "weekly", 1); err != nil {
			t.Errorf("weekly at token 1 beside nightly at 6: %v", err)
		}
	})
}

// Bad input is refused before any SQL, naming the field, and writes
// nothing: not even on a database with no fence.
func TestCheckBadInput(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d fence.Dialect, db *sql.DB) {
		installed(t, d, db)
		for _, c := range []struct {
			task  string
			token int64
			want  string
		}{
			{"", 1, "fence: task must not be empty"},
			{"nightly", 0, "fence: token must be an integer of at least 1, not 0"},
			{"nightly", -7, "fence: token must be an integer of at least 1, not -7"},
		} {
			err := checkTx(t, db, d, c.task, c.token)
			if !errors.Is(err, fence.ErrInvalid) || err.Error() != c.want {
				t.Errorf("Check(%q, %d): %v, want %q (ErrInvalid)", c.task, c.token, err, c.want)
			}
		}
		if n := rows(t, db); n != 0 {
			t.Errorf("bad input wrote %d fence rows", n)
		}
		// A dialect Check does not know is bad input too.
		if err := checkTx(t, db, "mysql", "nightly", 1); !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "dialect must be postgres or sqlite") {
			t.Errorf("Check with dialect mysql: %v", err)
		}
	})
}

// Install twice keeps the record; a database without the fence answers
// ErrNotInstalled, not a stale token and not a bare driver error.
func TestInstall(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d fence.Dialect, db *sql.DB) {
		if err := checkTx(t, db, d, "nightly", 1); !errors.Is(err, fence.ErrNotInstalled) || errors.Is(err, fence.ErrStale) {
			t.Errorf("Check before Install: %v, want ErrNotInstalled", err)
		}
		installed(t, d, db)
		if err := checkTx(t, db, d, "nightly", 7); err != nil {
			t.Fatal(err)
		}
		installed(t, d, db) // again: idempotent
		if got := recorded(t, db, "nightly"); got != 7 {
			t.Errorf("after a second Install the record is %d, want 7", got)
		}
		if err := checkTx(t, db, d, "nightly", 6); !errors.Is(err, fence.ErrStale) {
			t.Errorf("token 6 after a second Install: %v, want stale (the guard is still there)", err)
		}
		if err := fence.Install(t.Context(), db, "mysql"); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Install with dialect mysql: %v", err)
		}
	})
}

// Installs that run at once on PostgreSQL wait for each other rather than
// fail (without the install's lock, on a duplicate key in pg_type).
func TestInstallConcurrently(t *testing.T) {
	t.Parallel()
	db := openPostgres(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = fence.Install(t.Context(), db, fence.Postgres) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("install %d: %v", i, err)
		}
	}
}

// The DDL splits into its statements, comments left out, as Install runs
// them.
func TestStatements(t *testing.T) {
	t.Parallel()
	for d, want := range map[fence.Dialect][]string{
		fence.Postgres: {"CREATE TABLE IF NOT EXISTS leasehold_fence", "-- The guard", "CREATE OR REPLACE TRIGGER", "-- The check"},
		fence.SQLite:   {"CREATE TABLE IF NOT EXISTS leasehold_fence", "-- The guard"},
	} {
		got := fence.Statements(d)
		if len(got) != len(want) {
			t.Fatalf("%s: %d statements, want %d:\n%s", d, len(got), len(want), strings.Join(got, "\n----\n"))
		}
		for i, s := range got {
			if !strings.HasPrefix(s, want[i]) {
				t.Errorf("%s statement %d starts %.40q, want %q", d, i, s, want[i])
			}
		}
	}
}

// PostgreSQL's refusal is SQLSTATE LH001 exactly, whoever calls the
// function (psql, another client), with the message of the contract; the
// helper's error wraps it.
func TestPostgresSQLState(t *testing.T) {
	t.Parallel()
	db := installed(t, fence.Postgres, openPostgres(t))
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "SELECT leasehold_fence('it''s', 2)"); err != nil {
		t.Fatal(err)
	}
	_, err := db.ExecContext(ctx, "SELECT leasehold_fence('it''s', 1)")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "LH001" {
		t.Fatalf("the function with a lower token: %v, want SQLSTATE LH001", err)
	}
	if want := "leasehold_fence: stale token 1 for task 'it''s': highest seen is 2"; pgErr.Message != want {
		t.Errorf("message %q, want %q", pgErr.Message, want)
	}
	// The guard holds for a plain UPDATE too.
	_, err = db.ExecContext(ctx, "UPDATE leasehold_fence SET token = 1")
	if !errors.As(err, &pgErr) || pgErr.Code != "LH001" {
		t.Errorf("an UPDATE lowering the token: %v, want SQLSTATE LH001", err)
	}
	// Through the helper: the same code under the *StaleTokenError.
	err = checkTx(t, db, fence.Postgres, "it's", 1)
	if !errors.As(err, &pgErr) || pgErr.Code != "LH001" {
		t.Errorf("Check: %v, want it to wrap SQLSTATE LH001", err)
	}
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Highest != 2 || stale.Task != "it's" {
		t.Errorf("Check: %+v, want task it's, highest 2", stale)
	}
	// The function returns the token recorded.
	var got int64
	if err := db.QueryRowContext(ctx, "SELECT leasehold_fence('it''s', 9)").Scan(&got); err != nil || got != 9 {
		t.Errorf("leasehold_fence('it''s', 9) = %d, %v; want 9", got, err)
	}
}

// On SQLite a refusal undoes only the check's statement: the transaction
// goes on, and what it wrote before and after commits.
func TestSQLiteTransactionUsableAfterRefusal(t *testing.T) {
	t.Parallel()
	db := installed(t, fence.SQLite, openSQLite(t))
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE TABLE audit (line TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := checkTx(t, db, fence.SQLite, "nightly", 5); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO audit VALUES ('before')"); err != nil {
		t.Fatal(err)
	}
	if err := fence.Check(ctx, tx, fence.SQLite, "nightly", 4); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("token 4 after 5: %v, want stale", err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO audit VALUES ('after')"); err != nil {
		t.Fatalf("the transaction after a refusal: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var lines string
	if err := db.QueryRowContext(ctx, "SELECT group_concat(line, ',') FROM audit").Scan(&lines); err != nil || lines != "before,after" {
		t.Errorf("audit holds %q (%v), want before,after", lines, err)
	}
	if got := recorded(t, db, "nightly"); got != 5 {
		t.Errorf("the record is %d after the refusal, want 5", got)
	}
}

// A check takes context: a cancelled one fails the check, and is neither
// stale nor invalid.
func TestCheckCancelled(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d fence.Dialect, db *sql.DB) {
		installed(t, d, db)
		tx, err := db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err = fence.Check(ctx, tx, d, "nightly", 1)
		if err == nil || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Check with a cancelled context: %v", err)
		}
	})
}
