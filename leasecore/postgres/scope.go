package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/leasecore"
)

// Role scopes (leasecore.RoleScopeStore; migration 0005). The database
// enforces a role's scope with row-level security on every statement. The
// driver also keeps a copy of the scope of the role it runs as, and refuses
// an operation on a task outside it up front, with *leasecore.ForbiddenError,
// before the call can join a batch: a claim of a task out of scope fails its
// whole statement, and so would fail the other tasks' claims batched with
// it. The copy is at most Options.ScopeMaxAge old; within that bound after
// a scope shrinks, a call the copy still admits reaches the database, which
// refuses it (an error for a claim, nothing matched for the other
// statements). Such an error drops the copy at once, and a batch it failed
// is sent again without the calls the fresh copy refuses (batch.go), so it
// costs the other calls one more statement, not an answer.

// DefaultScopeMaxAge is how stale the copy of the role's scope may be: a
// scope written by the owner (Terraform) applies to the driver's own
// refusals within this long, as declarations do to claims.
const DefaultScopeMaxAge = leasecore.DefaultDeclarationsMaxAge

// scopeSQL reads the scope of the role the session runs as: the role, and
// its prefixes when it has a scope (the policy of leasehold_role_scopes
// shows a role its own row only).
const scopeSQL = `
SELECT current_user, s.role IS NOT NULL, coalesce(s.prefixes, '{}')
  FROM (SELECT) AS one
  LEFT JOIN leasehold_role_scopes AS s ON s.role = current_user`

// loadScope reads the scope of the role the session runs as, for the
// Store's copy (Store.scope, at most Options.ScopeMaxAge old).
func (s *Store) loadScope(ctx context.Context) (leasecore.Scope, error) {
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	var (
		scope    leasecore.Scope
		limited  bool
		prefixes []string
	)
	if err := s.pool.QueryRow(ctx, scopeSQL).Scan(&scope.Role, &limited, &prefixes); err != nil {
		return leasecore.Scope{}, fmt.Errorf("read the role's scope: %w", err)
	}
	if limited {
		scope.Prefixes = append([]string{}, prefixes...) // not nil, even when empty: limited to nothing
	}
	return scope, nil
}

// checkScope returns the *leasecore.ForbiddenError refusing right on task
// when the role's scope does not cover it, an unavailable error when the
// scope cannot be read, and nil otherwise. leasehold's own tasks are in
// every scope, and are admitted without reading it, but for the roles'
// prune leases (leasecore.Scope.Allows).
func (s *Store) checkScope(ctx context.Context, op, right, task string) error {
	if leasecore.IsReserved(task) && !strings.HasPrefix(task, leasecore.PruneTask+"/") {
		return nil
	}
	scope, err := s.scope.Get(ctx, s.loadScope)
	if err != nil {
		return interpretError(op, err)
	}
	return scope.Check(right, task)
}

// refusedByPolicy reports whether err is PostgreSQL refusing a statement
// for want of a privilege (insufficient_privilege, 42501), which is how
// row-level security refuses a row out of the role's scope ("new row
// violates row-level security policy"), and drops the copy of the scope
// when it is, so that the next call is judged by a fresh one.
func (s *Store) refusedByPolicy(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		s.scope.Invalidate(false)
		return true
	}
	return false
}

// watchScope is send, dropping the copy of the scope when the database
// refused the statement (refusedByPolicy).
func watchScope[Q, R any](s *Store, send func(context.Context, []Q) ([]R, error)) func(context.Context, []Q) ([]R, error) {
	return func(ctx context.Context, reqs []Q) ([]R, error) {
		res, err := send(ctx, reqs)
		if err != nil {
			s.refusedByPolicy(err)
		}
		return res, err
	}
}

// Scope returns the scope of the role the store runs as, from a copy at
// most Options.ScopeMaxAge old. It is leasecore.RoleScopeStore's.
func (s *Store) Scope(ctx context.Context) (leasecore.Scope, error) {
	const op = leasecore.OpScope
	if s.closed.Load() {
		return leasecore.Scope{}, interpretError(op, errClosed)
	}
	scope, err := s.scope.Get(ctx, s.loadScope)
	if err != nil {
		return leasecore.Scope{}, interpretError(op, err)
	}
	return scope, nil
}

// roleScopeColumns are the columns scanRoleScope reads.
const roleScopeColumns = `r.role, r.prefixes, r.created_at, r.updated_at`

// roleCheckSQL says whether role $1 exists and whether row-level security
// binds it: not a superuser, not BYPASSRLS, and without the privileges of
// the owner of leasehold's tables (a member of the owner role is treated
// as the owner, whom row-level security does not bind).
const roleCheckSQL = `
SELECT r.rolsuper OR r.rolbypassrls
       OR pg_has_role(r.oid, (SELECT c.relowner FROM pg_class AS c WHERE c.oid = 'leasehold_leases'::regclass), 'USAGE')
  FROM pg_roles AS r
 WHERE r.rolname = $1`

// CreateRoleScope stores a new scope; see leasecore.RoleScopeStore.
func (s *Store) CreateRoleScope(ctx context.Context, r leasecore.RoleScope) (*leasecore.RoleScope, error) {
	return s.putRoleScope(ctx, leasecore.OpCreateRoleScope, `
INSERT INTO leasehold_role_scopes AS r (role, prefixes, created_at, updated_at)
VALUES ($1, $2::text[], now(), now())
RETURNING `+roleScopeColumns, r)
}

// UpdateRoleScope replaces a role's prefixes; see leasecore.RoleScopeStore.
func (s *Store) UpdateRoleScope(ctx context.Context, r leasecore.RoleScope) (*leasecore.RoleScope, error) {
	return s.putRoleScope(ctx, leasecore.OpUpdateRoleScope, `
UPDATE leasehold_role_scopes AS r
   SET prefixes = $2::text[], updated_at = GREATEST(now(), r.updated_at)
 WHERE r.role = $1
RETURNING `+roleScopeColumns, r)
}

// putRoleScope checks that the role exists and that row-level security
// binds it, then runs sql ($1 role, $2 prefixes).
func (s *Store) putRoleScope(ctx context.Context, op, sql string, r leasecore.RoleScope) (*leasecore.RoleScope, error) {
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	var bypasses bool
	err := s.pool.QueryRow(ctx, roleCheckSQL, r.Role).Scan(&bypasses)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, &leasecore.NotFoundError{Kind: "database role", Name: r.Role}
	case err != nil:
		return nil, interpretError(op, err)
	case bypasses:
		return nil, &leasecore.ValidationError{Field: "Role", Rule: fmt.Sprintf(
			"must be a role that row-level security binds: %q is a superuser, has BYPASSRLS, or has the privileges of the owner of leasehold's tables, so a scope would not limit it", r.Role)}
	}
	out, err := scanRoleScope(s.pool.QueryRow(ctx, sql, r.Role, r.Prefixes))
	if errors.Is(err, pgx.ErrNoRows) { // only an update answers no row
		return nil, &leasecore.NotFoundError{Kind: "role scope", Name: r.Role}
	}
	if err != nil {
		return nil, interpretConstraintError(op, err, &leasecore.ExistsError{Kind: "role scope", Name: r.Role}, nil)
	}
	if out.Role == s.currentRole() {
		s.scope.Invalidate(false)
	}
	return out, nil
}

// currentRole is the role of the copy of the scope, or "" when none is loaded.
func (s *Store) currentRole() string {
	scope, _ := s.scope.Latest()
	return scope.Role
}

// GetRoleScope returns a role's scope, or nil when it has none.
func (s *Store) GetRoleScope(ctx context.Context, role string) (*leasecore.RoleScope, error) {
	const op = leasecore.OpGetRoleScope
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	out, err := scanRoleScope(s.pool.QueryRow(ctx, `SELECT `+roleScopeColumns+` FROM leasehold_role_scopes AS r WHERE r.role = $1`, role))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, interpretError(op, err)
	}
	return out, nil
}

// DeleteRoleScope removes a role's scope and reports whether there was one.
func (s *Store) DeleteRoleScope(ctx context.Context, role string) (bool, error) {
	const op = leasecore.OpDeleteRoleScope
	if s.closed.Load() {
		return false, interpretError(op, errClosed)
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM leasehold_role_scopes WHERE role = $1`, role)
	if err != nil {
		return false, interpretError(op, err)
	}
	if role == s.currentRole() {
		s.scope.Invalidate(false)
	}
	return tag.RowsAffected() == 1, nil
}

// scanRoleScope reads roleScopeColumns.
func scanRoleScope(row pgx.Row) (*leasecore.RoleScope, error) {
	var r leasecore.RoleScope
	if err := row.Scan(&r.Role, &r.Prefixes, &r.CreatedAt, &r.UpdatedAt); err != nil {
		return nil, err
	}
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return &r, nil
}

// describeRLS words an error of row-level security.
func describeRLS(e *pgconn.PgError) string {
	return fmt.Sprintf("PostgreSQL refused a row outside the role's scope (%s): the role's leasehold_role_scope changed "+
		"since this process last read it, a few seconds ago at most; it reads it again for the next call", e.Message)
}

// isRLSMessage reports whether a 42501 error is row-level security's
// rather than a missing privilege.
func isRLSMessage(e *pgconn.PgError) bool { return strings.Contains(e.Message, "row-level security") }
