package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/leasehold/leasehold/leasecore/migration"
)

const createMigrationsTableSQL = `
CREATE TABLE IF NOT EXISTS leasehold_schema_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
) STRICT`

// Migrate applies every embedded migration the file has not seen, in one
// IMMEDIATE transaction: it holds the file's write lock from BEGIN, so
// processes migrating the same file at once run one after another, and the
// later ones find nothing left to do. A failed migration leaves the schema
// as it was.
func (s *Store) Migrate(ctx context.Context) error {
	return s.inWriteTx(ctx, "migrate", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, createMigrationsTableSQL); err != nil {
			return err
		}
		var current int
		err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM leasehold_schema_migrations`).Scan(&current)
		if err != nil {
			return err
		}
		for _, m := range migration.Pending(s.migrations, current) {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO leasehold_schema_migrations (version, name, applied_at) VALUES (?, ?, `+nowMS+`)`, m.Version, m.Name)
			if err != nil {
				return fmt.Errorf("record migration %04d_%s: %w", m.Version, m.Name, err)
			}
		}
		return nil
	})
}
