package sqlite

import (
	"context"
	"database/sql"
	"errors"
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
//
// A file whose schema is newer than this build knows is served when its
// floor allows (leasecore/migration, "Expand, then contract") and refused
// with a *migration.TooNewError otherwise, nothing written.
func (s *Store) Migrate(ctx context.Context) error {
	err := s.inWriteTx(ctx, "migrate", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, createMigrationsTableSQL); err != nil {
			return err
		}
		var current int
		err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM leasehold_schema_migrations`).Scan(&current)
		if err != nil {
			return err
		}
		if current > len(s.migrations) {
			floor, err := s.readFloor(ctx, tx, current)
			if err != nil {
				return err
			}
			if err := migration.StatusOf(s.migrations, current, floor).Err(); err != nil {
				return err
			}
		}
		for _, m := range migration.Pending(s.migrations, current) {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
			record, args := `INSERT INTO leasehold_schema_migrations (version, name, applied_at) VALUES (?, ?, `+nowMS+`)`, []any{m.Version, m.Name}
			if m.Floor > 0 {
				record, args = `INSERT INTO leasehold_schema_migrations (version, name, applied_at, floor_version) VALUES (?, ?, `+nowMS+`, ?)`, append(args, m.Floor)
			}
			if _, err := tx.ExecContext(ctx, record, args...); err != nil {
				return fmt.Errorf("record migration %04d_%s: %w", m.Version, m.Name, err)
			}
		}
		return nil
	})
	if tooNew := (*migration.TooNewError)(nil); errors.As(err, &tooNew) {
		return tooNew // a refusal, not an unavailable store: waiting does not heal it
	}
	return err
}

// rowQuerier is what readFloor reads with: the reader pool or a
// transaction.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readFloor returns the floor of a file at schema version: the highest floor
// its applied migrations declared, or 0 when it predates the column that
// records them (migration.FloorMigration), and so every binary may serve it.
func (s *Store) readFloor(ctx context.Context, q rowQuerier, version int) (int, error) {
	at := migration.FloorRecordedFrom(s.migrations)
	if at == 0 {
		panic("sqlite: no " + migration.FloorMigration + " migration is embedded")
	}
	if version < at {
		return 0, nil
	}
	var floor int
	err := q.QueryRowContext(ctx, `SELECT coalesce(max(floor_version), 0) FROM leasehold_schema_migrations`).Scan(&floor)
	return floor, err
}

// SchemaStatus reports where the file's schema stands against this build's
// migrations, reading only (`leasehold migrate --status`): a file without
// leasehold's tables is at version 0.
func (s *Store) SchemaStatus(ctx context.Context) (migration.Status, error) {
	const op = "schema status"
	if err := s.usable(op); err != nil {
		return migration.Status{}, err
	}
	var exists int
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'leasehold_schema_migrations'`).Scan(&exists); err != nil {
		return migration.Status{}, interpretError(op, err)
	}
	var version, floor int
	if exists > 0 {
		if err := s.reader.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM leasehold_schema_migrations`).Scan(&version); err != nil {
			return migration.Status{}, interpretError(op, err)
		}
		var err error
		if floor, err = s.readFloor(ctx, s.reader, version); err != nil {
			return migration.Status{}, interpretError(op, err)
		}
	}
	return migration.StatusOf(s.migrations, version, floor), nil
}
