package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/internal/redact"
)

// interpretError turns any failure of operation op into a
// *leasecore.UnavailableError whose text says what went wrong in words an
// operator can act on. It is the only place in the driver that inspects pgx
// and pgconn errors. The original error stays reachable with errors.Is/As;
// the text holds no credential, even where pgx quotes the connection string
// (see redact), since it reaches logs and HTTP answers.
func interpretError(op string, err error) error {
	return leasecore.Unavailable(op, redact.Error(describe(err)))
}

// interpretConstraintError is interpretError for a catalog write, whose
// caller knows what a broken constraint means: a unique violation (the name
// is taken) answers exists, a foreign-key violation (a task naming a policy
// that does not exist, or a policy still named by a task) answers missing.
// A nil outcome leaves that violation unavailable, like any other failure.
func interpretConstraintError(op string, err, exists, missing error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23505" && exists != nil: // unique_violation
			return exists
		case pgErr.Code == "23503" && missing != nil: // foreign_key_violation
			return missing
		}
	}
	return interpretError(op, err)
}

// describe picks the readable detail for err.
func describe(err error) error {
	var (
		cannot  *cannotMigrateError
		step    *stepError
		pgErr   *pgconn.PgError
		connErr *pgconn.ConnectError
		netErr  net.Error
	)
	switch {
	case errors.As(err, &cannot):
		return err // its text says what to do
	case errors.As(err, &step):
		return detail(err, "%s: %v", step.step, describe(step.err))
	case errors.Is(err, errClosed), errors.Is(err, errUndecided), errors.Is(err, leasecore.ErrSchemaBehind),
		errors.Is(err, errUsersChanging), errors.Is(err, errManagerFlips), errors.Is(err, errReadOnly):
		return err
	case errors.Is(err, context.Canceled):
		return detail(err, "cancelled before PostgreSQL answered")
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return detail(err, "PostgreSQL did not answer in time")
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return detail(fmt.Errorf("%w: %w", leasecore.ErrSchemaMissing, err), "%s (%s)", leasecore.ErrSchemaMissing, pgErr.Message)
	case errors.As(err, &pgErr):
		return detail(err, "%s", describePgError(pgErr))
	case errors.Is(err, syscall.ECONNREFUSED):
		return detail(err, "cannot connect to PostgreSQL at %s: connection refused (is the server running?)", address(err))
	case errors.As(err, &connErr):
		return detail(err, "cannot connect to PostgreSQL: %v", connErr)
	case errors.As(err, &netErr):
		return detail(err, "lost the connection to PostgreSQL: %v", netErr)
	default:
		return detail(err, "PostgreSQL: %v", err)
	}
}

// describePgError words an error the server reported, by SQLSTATE.
func describePgError(e *pgconn.PgError) string {
	switch e.Code {
	case "42501": // insufficient_privilege
		if isRLSMessage(e) {
			return describeRLS(e)
		}
		return fmt.Sprintf("permission denied (%s): a runtime role needs the privileges `leasehold migrate --store URL --grant-runtime ROLE` gives it, "+
			"run as the role that owns leasehold's tables, which alone may migrate (docs/store-roles.md)", e.Message)
	case "28000", "28P01": // invalid_authorization_specification, invalid_password
		return fmt.Sprintf("PostgreSQL refused the login: %s", e.Message)
	case "3D000": // invalid_catalog_name
		return fmt.Sprintf("the database does not exist: %s", e.Message)
	case "53300": // too_many_connections
		return fmt.Sprintf("PostgreSQL has no connection slot left (%s): lower pool_max_conns in the store URL or raise max_connections", e.Message)
	case "42P05", "26000": // duplicate_prepared_statement, invalid_sql_statement_name
		// pgx's default mode prepares named statements on a connection, which
		// a pooler in transaction mode hands to other clients.
		return fmt.Sprintf("a prepared statement clashed or went missing (%s): behind PgBouncer in transaction mode, add default_query_exec_mode=exec to the store URL", e.Message)
	case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
		return fmt.Sprintf("PostgreSQL is shutting down or starting up: %s", e.Message)
	case "25006": // read_only_sql_transaction
		return fmt.Sprintf("PostgreSQL is read-only (a standby, or default_transaction_read_only is on): it cannot grant leases: %s", e.Message)
	case "57014": // query_canceled, including statement_timeout
		return fmt.Sprintf("PostgreSQL cancelled the statement: %s", e.Message)
	case "40P01": // deadlock_detected
		return fmt.Sprintf("PostgreSQL aborted the statement to break a deadlock: %s", e.Message)
	case "23505", "23503", "23514": // unique_violation, foreign_key_violation, check_violation
		return fmt.Sprintf("PostgreSQL refused the write: %s", e.Message)
	default:
		return fmt.Sprintf("PostgreSQL error %s: %s", e.Code, e.Message)
	}
}

// address is the host:port of the failed connection, when err names one.
func address(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Addr != nil {
		return opErr.Addr.String()
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) && connErr.Config != nil {
		return fmt.Sprintf("%s:%d", connErr.Config.Host, connErr.Config.Port)
	}
	return "the configured address"
}

// detailError is a readable message in front of the error it explains.
type detailError struct {
	msg string
	err error
}

func detail(err error, format string, args ...any) error {
	return &detailError{msg: fmt.Sprintf(format, args...), err: err}
}

func (e *detailError) Error() string { return e.msg }
func (e *detailError) Unwrap() error { return e.err }

// stepError names the step of a multi-statement operation (a migration) that
// failed, so that the detail says which one.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }
