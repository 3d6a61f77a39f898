// Package migration loads a driver's embedded schema migrations.
//
// leasehold runs its own small versioned runner rather than a migration
// library. Both stores need the same thing: every pending migration applied
// in one transaction that is serialised across processes (several sidecars
// start at once on one SQLite file or one PostgreSQL database). PostgreSQL
// gets that from pg_advisory_xact_lock and SQLite from BEGIN IMMEDIATE, and
// both run DDL transactionally, so a runner is a loop inside one transaction
// per driver. The libraries we looked at (goose) lock across processes on
// PostgreSQL only and would add a dependency tree for a few dozen lines.
//
// Files are named NNNN_description.sql; versions start at 1 and have no gaps.
//
// # Expand, then contract
//
// A store is migrated while sidecars of the previous release still serve it
// (docs/compatibility.md), so a migration is one of two kinds:
//
//   - expand: it only adds (a table, a column with a default, an index). A
//     binary that does not know it still serves the store. Every migration
//     so far is one.
//
//   - contract: it drops or changes what older binaries use, and it comes
//     one minor release after the binaries stopped using it. Its file says
//     which binaries may still serve a store after it, with a line among its
//     leading comments:
//
//     -- floor: 12
//
//     meaning "a binary that knows schema 12 or newer can serve this store".
//     The floor is at most the migration's own version.
//
// The store records each applied migration's floor (the schema_floor
// migration adds the column), and its floor is the highest of them. A binary
// serves a store whose schema is newer than it knows when the store's floor
// is within what it knows, and refuses it otherwise (TooNewError).
package migration

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Migration is one schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// Floor is what a contract migration declares (its "-- floor: N"
	// line): the oldest schema version whose binaries can serve a store
	// after it. Zero for an expand migration.
	Floor int
}

// FloorMigration is the name of the migration that adds the column a store
// keeps each applied migration's floor in; a floor may be declared only
// after it.
const FloorMigration = "schema_floor"

// floorLine is a contract migration's declaration, among its leading
// comment lines.
var floorLine = regexp.MustCompile(`^--\s*floor:\s*([0-9]+)\s*$`)

// Load reads every *.sql file in dir of fsys, ordered by version.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration %q: name must be NNNN_description.sql", e.Name())
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", e.Name(), err)
		}
		floor, err := declaredFloor(string(body))
		if err != nil {
			return nil, fmt.Errorf("migration %q: %w", e.Name(), err)
		}
		if floor > v {
			return nil, fmt.Errorf("migration %q: floor %d is above its own version %d", e.Name(), floor, v)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body), Floor: floor})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration versions must run 1, 2, 3… without gaps or repeats; found %d at position %d", m.Version, i+1)
		}
	}
	floorAt := FloorRecordedFrom(out)
	for _, m := range out {
		if m.Floor > 0 && (floorAt == 0 || m.Version <= floorAt) {
			return nil, fmt.Errorf("migration %04d_%s declares a floor before %s records floors", m.Version, m.Name, FloorMigration)
		}
	}
	return out, nil
}

// declaredFloor reads the "-- floor: N" line among a migration's leading
// comments; 0 when there is none.
func declaredFloor(sql string) (int, error) {
	for _, line := range strings.Split(sql, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "--") {
			return 0, nil
		}
		if m := floorLine.FindStringSubmatch(line); m != nil {
			n, err := strconv.Atoi(m[1])
			if err != nil || n < 1 {
				return 0, fmt.Errorf("floor %q must be a schema version from 1", m[1])
			}
			return n, nil
		}
	}
	return 0, nil
}

// Pending returns the migrations after version current.
func Pending(all []Migration, current int) []Migration {
	for i, m := range all {
		if m.Version > current {
			return all[i:]
		}
	}
	return nil
}
