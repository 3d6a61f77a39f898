package postgres

import "github.com/leasehold/leasehold/leasecore/migration"

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
