package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/migration"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// loadMigrations reads the embedded migrations once.
var loadMigrations = sync.OnceValues(func() ([]migration.Migration, error) {
	return migration.Load(migrationFiles, "migrations")
})

// migrationLockKey is the pg_advisory_xact_lock key that serialises
// migrators of one database: the bytes of "leasehol".
const migrationLockKey int64 = 0x6c65617365686f6c

const createMigrationsTableSQL = `
CREATE TABLE leasehold_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// schemaVersionSQL reads the schema's version; it needs SELECT on
// leasehold_schema_migrations and nothing else.
const schemaVersionSQL = `SELECT coalesce(max(version), 0) FROM leasehold_schema_migrations`

// Migrate applies the pending embedded migrations in one transaction. Several
// processes may migrate one database at once: each waits for a transaction
// advisory lock, so they run one after the other and the later ones find
// nothing pending. A failed migration rolls back entirely.
//
// A schema that is current needs nothing but SELECT on
// leasehold_schema_migrations, so a runtime role that may only read and
// write leasehold's rows (docs/store-roles.md) migrates a current schema
// as a no-op, even when it finds it behind and then waits for the owner's
// migration to commit. When the schema is behind and the role may not
// change it, the error names the role and says to run `leasehold migrate`
// as the owner.
func (s *Store) Migrate(ctx context.Context) error {
	return s.MigrateGranting(ctx, nil)
}

// MigrateGranting is Migrate, then, in the same transaction, gives each of
// runtimeRoles exactly the privileges a runtime role needs on leasehold's
// tables (RuntimeGrants): the privileges it had on them are revoked first,
// so a role granted more by hand ends with these. It is what
// `leasehold migrate --grant-runtime ROLE` runs, as the owner, at every
// upgrade: a migration that adds a table grants it in the transaction that
// creates it, so a runtime role never meets a schema it may not use.
func (s *Store) MigrateGranting(ctx context.Context, runtimeRoles []string) error {
	const op = "migrate"
	if s.closed.Load() {
		return interpretError(op, errClosed)
	}
	for _, r := range runtimeRoles {
		if err := leasecore.ValidateRoleName(r); err != nil {
			return err
		}
	}
	all, err := loadMigrations()
	if err != nil {
		return interpretError(op, err)
	}
	// A schema that is up to date is found without writing or locking, so
	// that Migrate succeeds on a read-only server (a standby) that has it,
	// and Ping, not a failed migration, says why it cannot grant leases.
	// Anything else (a missing table, a failure) is left to the
	// transaction below, which meets it again.
	var current int
	if len(runtimeRoles) == 0 {
		if err := s.pool.QueryRow(ctx, schemaVersionSQL).Scan(&current); err == nil && current >= len(all) {
			if current == len(all) {
				return nil
			}
			// A store newer than this build is served only within its
			// floor (leasecore/migration, "Expand, then contract").
			floor, err := readFloor(ctx, s.pool, all, current)
			if err != nil {
				return interpretError(op, err)
			}
			return migration.StatusOf(all, current, floor).Err()
		}
	}
	// READ COMMITTED whatever the server's default: every statement takes a
	// new snapshot, so the version read after the lock is granted includes
	// what the previous lock holder committed. (At REPEATABLE READ the
	// snapshot would date from the lock request and migrations would be
	// applied twice.)
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
			return err
		}
		// The table is created only when it is missing: CREATE TABLE IF NOT
		// EXISTS checks the CREATE privilege on the schema before it looks
		// for the table, and a runtime role has none.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('leasehold_schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, createMigrationsTableSQL); err != nil {
				return &behindError{current: 0, want: len(all), err: err}
			}
		}
		if err := tx.QueryRow(ctx, schemaVersionSQL).Scan(&current); err != nil {
			return err
		}
		if current > len(all) {
			floor, err := readFloor(ctx, tx, all, current)
			if err != nil {
				return err
			}
			if err := migration.StatusOf(all, current, floor).Err(); err != nil {
				return err
			}
		}
		for _, m := range migration.Pending(all, current) {
			// No arguments: pgx sends it with the simple protocol, so a file
			// may hold several statements.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return &behindError{current: current, want: len(all), err: &stepError{step: fmt.Sprintf("migration %04d_%s", m.Version, m.Name), err: err}}
			}
			record, args := `INSERT INTO leasehold_schema_migrations (version, name) VALUES ($1, $2)`, []any{m.Version, m.Name}
			if m.Floor > 0 {
				record, args = `INSERT INTO leasehold_schema_migrations (version, name, floor_version) VALUES ($1, $2, $3)`, append(args, m.Floor)
			}
			if _, err := tx.Exec(ctx, record, args...); err != nil {
				return &behindError{current: current, want: len(all), err: &stepError{step: fmt.Sprintf("recording migration %04d_%s", m.Version, m.Name), err: err}}
			}
		}
		for _, role := range runtimeRoles {
			if err := grantRuntime(ctx, tx, role); err != nil {
				return err
			}
		}
		return nil
	})
	if tooNew := (*migration.TooNewError)(nil); errors.As(err, &tooNew) {
		return tooNew // a refusal, not an unavailable store: waiting does not heal it
	}
	if err != nil {
		s.noteReadOnly(err)
		return interpretError(op, s.explainCannotMigrate(ctx, err))
	}
	return nil
}

// rowQuerier is what readFloor and SchemaStatus read with: the pool or a
// transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readFloor returns the floor of a store at schema version: the highest
// floor its applied migrations declared, or 0 when it predates the column
// that records them (FloorMigration), and so every binary may serve it.
func readFloor(ctx context.Context, q rowQuerier, all []migration.Migration, version int) (int, error) {
	at := migration.FloorRecordedFrom(all)
	if at == 0 {
		panic("postgres: no " + migration.FloorMigration + " migration is embedded")
	}
	if version < at {
		return 0, nil
	}
	var floor int
	err := q.QueryRow(ctx, `SELECT coalesce(max(floor_version), 0) FROM leasehold_schema_migrations`).Scan(&floor)
	return floor, err
}

// SchemaStatus reports where the database's schema stands against this
// build's migrations, reading only (`leasehold migrate --status`): a
// database without leasehold's tables is at version 0.
func (s *Store) SchemaStatus(ctx context.Context) (migration.Status, error) {
	const op = "schema status"
	all, err := loadMigrations()
	if err != nil {
		return migration.Status{}, interpretError(op, err)
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('leasehold_schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return migration.Status{}, interpretError(op, err)
	}
	var version, floor int
	if exists {
		if err := s.pool.QueryRow(ctx, schemaVersionSQL).Scan(&version); err != nil {
			return migration.Status{}, interpretError(op, err)
		}
		if floor, err = readFloor(ctx, s.pool, all, version); err != nil {
			return migration.Status{}, interpretError(op, err)
		}
	}
	return migration.StatusOf(all, version, floor), nil
}

// behindError is a failure to bring the schema from version current to
// want: explainCannotMigrate words it when the role lacked the privilege.
type behindError struct {
	current, want int
	err           error
}

func (e *behindError) Error() string { return e.err.Error() }
func (e *behindError) Unwrap() error { return e.err }

// explainCannotMigrate turns a migration refused for want of a privilege
// (insufficient_privilege, 42501) into cannotMigrateError, which names the
// role that ran it and the one that owns leasehold's tables; other errors
// are returned as they are.
func (s *Store) explainCannotMigrate(ctx context.Context, err error) error {
	var (
		be    *behindError
		pgErr *pgconn.PgError
	)
	if !errors.As(err, &be) || !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return err
	}
	ce := &cannotMigrateError{current: be.current, want: be.want, err: err}
	// Best effort: the error is worth having without the names.
	_ = s.pool.QueryRow(ctx, `
SELECT current_user, coalesce((SELECT pg_get_userbyid(c.relowner) FROM pg_class AS c
                                WHERE c.oid = to_regclass('leasehold_leases')), '')`).Scan(&ce.role, &ce.owner)
	return ce
}

// cannotMigrateError: the schema is missing or behind, and the role the
// store runs as may not create or change it (a runtime role). Its text
// says what to do.
type cannotMigrateError struct {
	role, owner   string
	current, want int
	err           error
}

func (e *cannotMigrateError) Error() string {
	state := fmt.Sprintf("the leasehold schema is at version %d and this build needs %d", e.current, e.want)
	if e.current == 0 {
		state = fmt.Sprintf("the leasehold schema is missing (this build needs version %d)", e.want)
	}
	who := "the store's role"
	if e.role != "" {
		who = fmt.Sprintf("role %q", e.role)
	}
	owner := "the role that owns leasehold's tables"
	if e.owner != "" {
		owner = fmt.Sprintf("the role that owns leasehold's tables (%q)", e.owner)
	}
	var pgErr *pgconn.PgError
	errors.As(e.err, &pgErr)
	return fmt.Sprintf("%s, and %s may not change it (%s): run `leasehold migrate --store URL` as %s, "+
		"then this process carries on (docs/store-roles.md)", state, who, pgErr.Message, owner)
}

// Unwrap keeps the server's error reachable. It does not match
// leasecore.ErrSchemaBehind: the text already says how to migrate, and
// Ping reports the schema's state on its own.
func (e *cannotMigrateError) Unwrap() error { return e.err }
