package postgres

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/leasecore/migration"
)

// TestSchemaFloor plays a later build's migrations into the database (their
// rows, which is all this build reads of them) and runs this build's
// Migrate on every path: the owner's quick check, a runtime role's, and
// the owner's transaction (--grant-runtime). After an expand migration this
// build serves the database; after a contract migration whose floor is
// above it, every path refuses it and writes nothing.
func TestSchemaFloor(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newRoleDB(t)
	owner := mustOpen(t, db.ownerU)
	runtime := mustOpen(t, db.aURL)
	admin := mustConn(t, db.admin)
	all, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	knows := len(all)
	migrateAll := func(t *testing.T) []error {
		t.Helper()
		return []error{owner.Migrate(ctx), runtime.Migrate(ctx), owner.MigrateGranting(ctx, []string{db.a})}
	}
	status := func(t *testing.T, want migration.Verdict) migration.Status {
		t.Helper()
		st, err := runtime.SchemaStatus(ctx)
		if err != nil || st.Verdict != want || st.Knows != knows {
			t.Fatalf("SchemaStatus = %+v, %v; want verdict %s, knows %d", st, err, want, knows)
		}
		return st
	}
	status(t, migration.Current)

	if _, err := admin.Exec(ctx, `INSERT INTO leasehold_schema_migrations (version, name) VALUES ($1, 'future_expand')`, knows+1); err != nil {
		t.Fatal(err)
	}
	for i, err := range migrateAll(t) {
		if err != nil {
			t.Fatalf("Migrate path %d on a database a later build expanded: %v", i, err)
		}
	}
	if st := status(t, migration.Newer); st.Version != knows+1 || st.Floor != 0 {
		t.Fatalf("after an expand: %+v", st)
	}

	if _, err := admin.Exec(ctx, `INSERT INTO leasehold_schema_migrations (version, name, floor_version) VALUES ($1, 'future_contract', $1)`, knows+2); err != nil {
		t.Fatal(err)
	}
	var before, after int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM leasehold_schema_migrations`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	for i, err := range migrateAll(t) {
		var tooNew *migration.TooNewError
		if !errors.As(err, &tooNew) || tooNew.Version != knows+2 || tooNew.Floor != knows+2 || tooNew.Knows != knows {
			t.Errorf("Migrate path %d after a contract above this build = %v; want a TooNewError for version %d, floor %d, knows %d", i, err, knows+2, knows+2, knows)
		}
	}
	status(t, migration.TooNew)
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM leasehold_schema_migrations`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the refused migrations changed the migrations table: %d rows, then %d", before, after)
	}
}
