package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Least privilege (docs/store-roles.md). The role that migrates owns
// leasehold's tables; sidecars, `leasehold run --store` and the operator
// commands run as a runtime role that may read and write leasehold's rows
// and nothing else: no DDL, no TRUNCATE, no other table.

// runtimePrivileges is what a runtime role needs on each of leasehold's
// tables, and no more. A migration that adds a table adds it here
// (TestRuntimePrivilegesCoverTheSchema fails until it does).
var runtimePrivileges = []struct {
	table, privileges, why string
}{
	{"leasehold_schema_migrations", "SELECT", "Migrate and Ping read the schema's version"},
	{"leasehold_leases", "SELECT, INSERT, UPDATE", "the lease statements; no statement deletes a lease row (its token counter lives there)"},
	{"leasehold_history", "SELECT, INSERT, UPDATE, DELETE", "the lease statements insert events, the pruner deletes them; UPDATE only so the pruner may lock them (SELECT … FOR UPDATE), and a policy (0005) refuses any change to an event"},
	{"leasehold_tasks", "SELECT", "claims apply the declarations; Terraform writes them as the owner"},
	{"leasehold_retention_policies", "SELECT", "the pruner applies them; Terraform writes them as the owner"},
	{"leasehold_role_scopes", "SELECT", "the role reads its own scope (a policy shows it no other); only the owner writes scopes"},
}

// runtimeSequencePrivileges is what a runtime role needs on leasehold's
// sequences. Inserting through an identity column needs nothing on its
// sequence; reading where it stands does.
var runtimeSequencePrivileges = []struct {
	sequence, privileges, why string
}{
	{"leasehold_history_id_seq", "SELECT", "the watch compares positions with the history's id high-water mark (pg_sequence_last_value), so that a restored history is told, not followed in silence"},
}

// RuntimeGrants returns the statements that give role exactly what a
// runtime role needs on leasehold's tables in schema: USAGE on the schema,
// then, per table, REVOKE ALL and the GRANT of runtimePrivileges. Run as
// the owner of the tables; MigrateGranting runs them in its transaction.
func RuntimeGrants(schema, role string) []string {
	s, r := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	out := []string{fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s", s, r)}
	for _, p := range runtimePrivileges {
		t := s + "." + pgx.Identifier{p.table}.Sanitize()
		out = append(out,
			fmt.Sprintf("REVOKE ALL ON %s FROM %s", t, r),
			fmt.Sprintf("GRANT %s ON %s TO %s", p.privileges, t, r))
	}
	for _, p := range runtimeSequencePrivileges {
		q := s + "." + pgx.Identifier{p.sequence}.Sanitize()
		out = append(out,
			fmt.Sprintf("REVOKE ALL ON SEQUENCE %s FROM %s", q, r),
			fmt.Sprintf("GRANT %s ON SEQUENCE %s TO %s", p.privileges, q, r))
	}
	return out
}

// runtimeGrantsSQL is RuntimeGrants as a script, one statement a line,
// with a comment per table saying why: what `leasehold migrate
// --grant-runtime ROLE` runs, for an operator who grants by hand.
func runtimeGrantsSQL(schema, role string) string {
	stmts := RuntimeGrants(schema, role)
	var b strings.Builder
	b.WriteString(stmts[0] + ";\n")
	for i, p := range runtimePrivileges {
		fmt.Fprintf(&b, "-- %s: %s\n%s;\n%s;\n", p.table, p.why, stmts[1+2*i], stmts[2+2*i])
	}
	for i, p := range runtimeSequencePrivileges {
		j := 1 + 2*len(runtimePrivileges) + 2*i
		fmt.Fprintf(&b, "-- %s: %s\n%s;\n%s;\n", p.sequence, p.why, stmts[j], stmts[j+1])
	}
	return b.String()
}

// grantRuntime runs RuntimeGrants for role in tx, on the schema that holds
// leasehold's tables.
func grantRuntime(ctx context.Context, tx pgx.Tx, role string) error {
	var schema string
	if err := tx.QueryRow(ctx, `SELECT n.nspname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
                             WHERE c.oid = 'leasehold_leases'::regclass`).Scan(&schema); err != nil {
		return &stepError{step: "finding the schema of leasehold's tables", err: err}
	}
	for _, stmt := range RuntimeGrants(schema, role) {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return &stepError{step: fmt.Sprintf("granting role %q the runtime privileges (%s)", role, stmt), err: err}
		}
	}
	return nil
}
