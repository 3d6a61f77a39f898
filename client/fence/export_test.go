package fence

import (
	"context"
	"database/sql"
	"strings"
)

// InstallWithoutGuard is a mutant Install for tests: the DDL of d without
// the guard (its trigger, and on PostgreSQL its function), so that a lower
// token overwrites a higher one. The tests that use it show they catch it.
func InstallWithoutGuard(ctx context.Context, db *sql.DB, d Dialect) error {
	var stmts []string
	for _, s := range statements(d) {
		if !strings.Contains(s, "leasehold_fence_guard") {
			stmts = append(stmts, s)
		}
	}
	return install(ctx, db, d, stmts)
}

// Statements is statements, for the test of how the DDL splits.
var Statements = statements
