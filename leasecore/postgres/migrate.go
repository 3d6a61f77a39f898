package postgres

import (
	"context"
	"embed"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/leasecore/migration"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// loadMigrations reads the embedded migrations once.
var loadMigrations = sync.OnceValues(func() ([]migration.Migration, error) {
	return migration.Load(migrationFiles, "migrations", reservedVersions...)
})

// reservedVersions are migration numbers taken by work that is not merged
// on this line yet (0005, the role scopes), which later migrations skip
// over (0006_credential). Drop a number when its migration arrives:
// migration.Load refuses the reservation then.
var reservedVersions = []int{5}

// migrationLockKey is the pg_advisory_xact_lock key that serialises
// migrators of one database: the bytes of "leasehol".
const migrationLockKey int64 = 0x6c65617365686f6c

const createMigrationsTableSQL = `
CREATE TABLE IF NOT EXISTS leasehold_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// Migrate applies the pending embedded migrations in one transaction. Several
// processes may migrate one database at once: each waits for a transaction
// advisory lock, so they run one after the other and the later ones find
// nothing pending. A failed migration rolls back entirely.
func (s *Store) Migrate(ctx context.Context) error {
	const op = "migrate"
	if s.closed.Load() {
		return interpretError(op, errClosed)
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
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM leasehold_schema_migrations`).Scan(&current); err == nil && current >= len(all) {
		return nil
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
		if _, err := tx.Exec(ctx, createMigrationsTableSQL); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM leasehold_schema_migrations`).Scan(&current); err != nil {
			return err
		}
		for _, m := range migration.Pending(all, current) {
			// No arguments: pgx sends it with the simple protocol, so a file
			// may hold several statements.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return &stepError{step: fmt.Sprintf("migration %04d_%s", m.Version, m.Name), err: err}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO leasehold_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return &stepError{step: fmt.Sprintf("recording migration %04d_%s", m.Version, m.Name), err: err}
			}
		}
		return nil
	})
	if err != nil {
		s.noteReadOnly(err)
		return interpretError(op, err)
	}
	return nil
}
