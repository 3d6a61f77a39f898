package fence

import (
	"context"
	"database/sql"
	_ "embed" // the DDL
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/client/fence/internal/check"
)

// Dialect names the SQL of a resource database: Postgres or SQLite.
type Dialect string

// The dialects.
const (
	// Postgres is PostgreSQL 14 or later (CREATE OR REPLACE TRIGGER).
	Postgres Dialect = "postgres"
	// SQLite is SQLite 3.24 or later (upsert), as modernc.org/sqlite or
	// any driver that binds ? parameters.
	SQLite Dialect = "sqlite"
)

// ParseDialect reads "postgres" or "sqlite".
func ParseDialect(s string) (Dialect, error) {
	switch d := Dialect(s); d {
	case Postgres, SQLite:
		return d, nil
	}
	return "", fmt.Errorf("fence: dialect must be postgres or sqlite, not %q: %w", s, ErrInvalid)
}

// String is the dialect's name.
func (d Dialect) String() string { return string(d) }

var (
	//go:embed postgres.sql
	postgresSQL string
	//go:embed sqlite.sql
	sqliteSQL string
)

// SQL returns the fence's DDL for d, as `leasehold fence sql` prints it,
// for a migration tool of your own: the table leasehold_fence (the highest
// token seen per task) and its guard trigger, and on PostgreSQL the
// function leasehold_fence(task text, token bigint). Every statement is
// idempotent. It panics for a Dialect other than Postgres and SQLite.
func SQL(d Dialect) string {
	switch d {
	case Postgres:
		return postgresSQL
	case SQLite:
		return sqliteSQL
	}
	panic(fmt.Sprintf("fence.SQL: unknown dialect %q (fence.Postgres or fence.SQLite)", string(d)))
}

// statements splits d's DDL at its blank lines into statements, leaving
// out the parts that are only comments. The files keep one statement per
// paragraph, and no blank line inside one, for this.
func statements(d Dialect) []string {
	var out []string
	for _, part := range strings.Split(SQL(d), "\n\n") {
		for _, line := range strings.Split(strings.TrimSpace(part), "\n") {
			if line != "" && !strings.HasPrefix(line, "--") {
				out = append(out, strings.TrimSpace(part))
				break
			}
		}
	}
	return out
}

// Install applies SQL(d) to db in one transaction, idempotently: a fence
// already there keeps its rows, and its guard and function are brought up
// to date. On PostgreSQL concurrent installs wait for each other. The
// objects go where an unqualified CREATE puts them (the first schema of the
// search_path); the role that writes needs SELECT, INSERT and UPDATE on
// leasehold_fence.
func Install(ctx context.Context, db *sql.DB, d Dialect) error {
	if _, err := ParseDialect(string(d)); err != nil {
		return err
	}
	return install(ctx, db, d, statements(d))
}

func install(ctx context.Context, db *sql.DB, d Dialect, stmts []string) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fence: install (%s): %w", d, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if d == Postgres {
		stmts = append([]string{check.PostgresInstallLock}, stmts...)
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("fence: install (%s): %w", d, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fence: install (%s): commit: %w", d, err)
	}
	return nil
}

// Execer is what Check sends its statements on: a *sql.Tx (the writing
// transaction, the one to pass), a *sql.Conn or a *sql.DB.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Check fences task at token on tx, the transaction that writes the
// resource, before (or among) its writes: a token lower than the highest
// one seen for the task is refused with a *StaleTokenError (errors.Is
// ErrStale); an equal one is accepted; a higher one is recorded, and
// commits with tx. The row it writes stays locked until tx ends, so of two
// holders' transactions the older one either commits before the newer one
// fences, and the newer one's writes come after its, or it is refused.
//
// A task that is empty or a token below 1 is refused before any SQL, with
// an error naming the field (errors.Is ErrInvalid). A database without
// the fence gives an error wrapping ErrNotInstalled; any other failure is
// the driver's error, wrapped.
//
// On PostgreSQL a refusal aborts tx, as any error does: roll it back. On
// SQLite it undoes only the check's own statement, and tx remains usable.
// At REPEATABLE READ or SERIALIZABLE, PostgreSQL answers a fence raced by a
// newer holder with a serialization failure (SQLSTATE 40001) rather than
// LH001: retry the transaction, and the retry is refused as stale.
func Check(ctx context.Context, tx Execer, d Dialect, task string, token int64) error {
	if err := check.Validate(task, token); err != nil {
		return err
	}
	switch d {
	case Postgres:
		var recorded int64
		err := tx.QueryRowContext(ctx, check.PostgresCheck, task, token).Scan(&recorded)
		if err == nil {
			return nil
		}
		switch state := check.SQLState(err); {
		case state == check.StaleState:
			return &StaleTokenError{Task: task, Token: token, Highest: check.Highest(err.Error()), Err: err}
		case check.NotInstalled(state):
			return check.Missing(err)
		}
		return fmt.Errorf("fence: check %q at token %d: %w", task, token, err)
	case SQLite:
		_, err := tx.ExecContext(ctx, check.SQLiteCheck, task, token)
		switch {
		case err == nil:
			return nil
		case strings.Contains(err.Error(), check.SQLiteStale):
			stale := &StaleTokenError{Task: task, Token: token, Err: err}
			if rerr := tx.QueryRowContext(ctx, check.SQLiteHighest, task).Scan(&stale.Highest); rerr != nil {
				return fmt.Errorf("%w (reading the highest token seen: %v)", stale, rerr)
			}
			return stale
		case strings.Contains(err.Error(), check.SQLiteMissing):
			return check.Missing(err)
		}
		return fmt.Errorf("fence: check %q at token %d: %w", task, token, err)
	}
	_, err := ParseDialect(string(d))
	return err
}

// ErrStale is what every *StaleTokenError is (errors.Is).
var ErrStale = errors.New("stale fencing token")

// ErrInvalid is what a refusal of Check's input wraps (errors.Is): an empty
// task, a token below 1, a dialect this package does not know.
var ErrInvalid = check.ErrInvalid

// ErrNotInstalled is what a check on a database without the fence wraps.
var ErrNotInstalled = check.ErrNotInstalled

// StaleTokenError is a check refused: Token is lower than Highest, the
// highest token the resource has seen for Task. Its holder has been
// superseded (its lease expired or was released, and the task granted
// again): it must stop writing. Highest is 0 when it could not be read.
type StaleTokenError struct {
	Task           string
	Token, Highest int64
	// Err is the driver's error that said it (a *pgconn.PgError with Code
	// "LH001", say), or nil.
	Err error
}

func (e *StaleTokenError) Error() string {
	msg := "stale fencing token " + strconv.FormatInt(e.Token, 10) + " for task " + strconv.Quote(e.Task)
	if e.Highest > 0 {
		msg += ": highest seen is " + strconv.FormatInt(e.Highest, 10)
	}
	return msg
}

// Is makes errors.Is(err, ErrStale) hold.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStale }

// Unwrap is Err.
func (e *StaleTokenError) Unwrap() error { return e.Err }
