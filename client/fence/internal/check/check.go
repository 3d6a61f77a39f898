// Package check holds what the fence's two helpers (fence, for
// database/sql, and fencepgx) share: the rule for their input, the
// statements they send, and how they read a PostgreSQL refusal. It knows no
// driver: a server's error is read through its SQLState method and its text.
package check

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// ErrInvalid is what every refusal of Validate wraps.
var ErrInvalid = errors.New("invalid fence input")

// InvalidError is input Validate refused: the field and the rule it breaks.
type InvalidError struct {
	Field, Rule string
}

func (e *InvalidError) Error() string { return "fence: " + e.Field + " " + e.Rule }

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Validate is the rule for a check's input, applied before any SQL: a task
// that is not empty, a token of at least 1.
func Validate(task string, token int64) error {
	if task == "" {
		return &InvalidError{Field: "task", Rule: "must not be empty"}
	}
	if token < 1 {
		return &InvalidError{Field: "token", Rule: "must be an integer of at least 1, not " + strconv.FormatInt(token, 10)}
	}
	return nil
}

// The PostgreSQL statements.
const (
	// PostgresCheck is the check, with the task and the token as $1, $2.
	PostgresCheck = "SELECT leasehold_fence($1, $2)"
	// PostgresInstallLock serialises concurrent installs for the rest of
	// the installing transaction: two sessions creating the table at once
	// fail on a duplicate key of pg_type, replacing a function at once with
	// "tuple concurrently updated".
	PostgresInstallLock = "SELECT pg_advisory_xact_lock(hashtext('leasehold_fence install'))"
)

// The SQLSTATEs a check reads.
const (
	// StaleState is the guard's refusal of a lower token.
	StaleState = "LH001"
	// undefinedFunction (42883) and undefinedTable (42P01): the fence is
	// not installed (or only half of it).
	undefinedFunction = "42883"
	undefinedTable    = "42P01"
)

// The SQLite statements and messages.
const (
	// SQLiteCheck is the check, with the task and the token as its two
	// parameters.
	SQLiteCheck = "INSERT INTO leasehold_fence (task, token) VALUES (?, ?) ON CONFLICT (task) DO UPDATE " +
		"SET token = excluded.token, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
	// SQLiteHighest reads the highest token seen for a task, after a
	// refusal (which undid only its own statement).
	SQLiteHighest = "SELECT token FROM leasehold_fence WHERE task = ?"
	// SQLiteStale is in the message of the guard's refusal.
	SQLiteStale = "leasehold_fence: stale token"
	// SQLiteMissing is in the message of a check on a database without
	// the fence's table.
	SQLiteMissing = "no such table: leasehold_fence"
)

// SQLState is the SQLSTATE of a PostgreSQL server's error in err's chain
// (pgx's *pgconn.PgError, lib/pq's *pq.Error), or "".
func SQLState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// NotInstalled reports whether a PostgreSQL error means the fence's
// function or table is missing.
func NotInstalled(state string) bool { return state == undefinedFunction || state == undefinedTable }

var highestRE = regexp.MustCompile(`highest seen is (\d+)`)

// Highest reads the highest token from the text of the guard's PostgreSQL
// refusal ("… highest seen is 5"), or 0 when the text does not hold it. The
// last match counts: the task, which comes before it, may hold the phrase.
func Highest(text string) int64 {
	all := highestRE.FindAllStringSubmatch(text, -1)
	if len(all) == 0 {
		return 0
	}
	n, err := strconv.ParseInt(all[len(all)-1][1], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// ErrNotInstalled is what Missing's error wraps.
var ErrNotInstalled = errors.New("the fence is not installed in this database")

// Missing is the error of a check on a database without the fence (or
// with only part of it), wrapping the driver's err.
func Missing(err error) error {
	return fmt.Errorf("fence: %w (the leasehold_fence table or function is missing: "+
		"apply `leasehold fence sql` or run `leasehold fence install`): %w", ErrNotInstalled, err)
}
