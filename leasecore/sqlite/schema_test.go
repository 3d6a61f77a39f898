package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/migration"
)

// TestSchemaFloor runs the builds of a fleet mid-upgrade on one file: this
// build, then a future one with an expand migration (this build still
// serves the file), then a future one with a contract migration whose floor
// is above this build (this build refuses the file, writing nothing).
func TestSchemaFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	current := openMigrated(t, path)
	knows := len(current.migrations)
	status := func(t *testing.T, want migration.Verdict) migration.Status {
		t.Helper()
		st, err := current.SchemaStatus(ctx)
		if err != nil || st.Verdict != want || st.Knows != knows {
			t.Fatalf("SchemaStatus = %+v, %v; want verdict %s, knows %d", st, err, want, knows)
		}
		return st
	}
	status(t, migration.Current)

	// future opens the file as a later build would, with extra migrations.
	future := func(t *testing.T, extra ...migration.Migration) {
		t.Helper()
		s := openStore(t, path)
		s.migrations = append(slices.Clone(s.migrations), extra...)
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("the future build's Migrate: %v", err)
		}
	}
	expand := migration.Migration{Version: knows + 1, Name: "future_expand", SQL: "CREATE TABLE future_things (id INTEGER PRIMARY KEY)"}
	future(t, expand)
	if err := current.Migrate(ctx); err != nil {
		t.Fatalf("this build's Migrate of a file a later build expanded: %v", err)
	}
	if st := status(t, migration.Newer); st.Version != knows+1 || st.Floor != 0 {
		t.Fatalf("after an expand: %+v, want version %d floor 0", st, knows+1)
	}
	if _, err := current.Claim(ctx, leasecore.ClaimParams{Task: "still-served", Owner: "w", TTL: time.Minute}); err != nil {
		t.Fatalf("a claim on a file a later build expanded: %v", err)
	}

	contract := migration.Migration{Version: knows + 2, Name: "future_contract", SQL: "DROP TABLE future_things", Floor: knows + 2}
	future(t, expand, contract)
	before := countMigrations(t, current)
	err := current.Migrate(ctx)
	var tooNew *migration.TooNewError
	if !errors.As(err, &tooNew) || tooNew.Version != knows+2 || tooNew.Floor != knows+2 || tooNew.Knows != knows {
		t.Fatalf("this build's Migrate after a contract above it = %v; want a TooNewError for version %d, floor %d, knows %d", err, knows+2, knows+2, knows)
	}
	if st := status(t, migration.TooNew); st.Floor != knows+2 {
		t.Fatalf("after a contract: %+v, want floor %d", st, knows+2)
	}
	if after := countMigrations(t, current); after != before {
		t.Fatalf("the refused Migrate changed the migrations table: %d rows, then %d", before, after)
	}
}

func countMigrations(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.reader.QueryRowContext(context.Background(), `SELECT count(*) FROM leasehold_schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
