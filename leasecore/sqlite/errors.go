package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/leasecore"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// interpretError is the one place that reads driver errors: it turns err
// into a *leasecore.UnavailableError for op whose text tells an operator
// what went wrong. The driver's error stays reachable with errors.As.
func interpretError(op string, err error) error {
	return leasecore.Unavailable(op, explain(err))
}

// explain prefixes err with what it means for leasehold, when that is known.
func explain(err error) error {
	var se *msqlite.Error
	switch {
	case errors.Is(err, errClosed):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("timed out: %w", err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("cancelled: %w", err)
	case errors.As(err, &se):
		// Extended result codes are on; the low byte is the primary code.
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_ERROR:
			if strings.Contains(se.Error(), "no such table") {
				return fmt.Errorf("%w: %w", leasecore.ErrSchemaMissing, err)
			}
		case sqlite3.SQLITE_BUSY:
			return fmt.Errorf("database is locked by another connection (waited up to %s): %w", BusyTimeout, err)
		case sqlite3.SQLITE_CANTOPEN:
			return fmt.Errorf("cannot open the database file (does its directory exist, and may this process write there?): %w", err)
		case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH:
			return fmt.Errorf("database file is not writable: %w", err)
		case sqlite3.SQLITE_FULL:
			return fmt.Errorf("disk full: %w", err)
		case sqlite3.SQLITE_IOERR:
			return fmt.Errorf("disk I/O error: %w", err)
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return fmt.Errorf("database file is damaged or not a database: %w", err)
		case sqlite3.SQLITE_INTERRUPT:
			return fmt.Errorf("interrupted (the operation's context ended): %w", err)
		}
	}
	return err
}

// isBusy reports whether err is SQLite's "database is locked": another
// connection holds the lock this one needs.
func isBusy(err error) bool {
	var se *msqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}
