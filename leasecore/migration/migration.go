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
package migration

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

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
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration versions must run 1, 2, 3… without gaps or repeats; found %d at position %d", m.Version, i+1)
		}
	}
	return out, nil
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
