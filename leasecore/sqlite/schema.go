package sqlite

import (
	"sync"

	"github.com/leasehold/leasehold/leasecore/migration"
)

// loadMigrations reads the embedded migrations once.
var loadMigrations = sync.OnceValues(func() ([]migration.Migration, error) {
	return migration.Load(migrationFiles, "migrations")
})

// SchemaVersions returns the schema versions of this build: the oldest a
// store must have for this build's queries (needs), and the newest its
// migrations reach (knows). serve and migrate bring a store up to knows.
func SchemaVersions() (needs, knows int, err error) {
	all, err := loadMigrations()
	if err != nil {
		return 0, 0, err
	}
	needs, knows = migration.Versions(all)
	return needs, knows, nil
}
