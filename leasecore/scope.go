package leasecore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Role scopes: a store whose database has roles (PostgreSQL) may limit a
// role to the tasks whose names start with one of its prefixes, enforced by
// the database itself (row-level security), so that a sidecar running as
// that role cannot act on another team's tasks even with SQL of its own.
// docs/store-roles.md is the operator's reference; docs/design.md ("The
// store as the boundary") argues the design.
//
// A role with no scope is unrestricted: scopes are opt-in. leasehold's own
// tasks (ReservedPrefix) are in every role's scope, so that every sidecar
// can take a prune lease, but for the other scoped roles' prune leases.

// RoleScope limits one database role to the tasks whose names start with
// one of Prefixes (and leasehold's own).
type RoleScope struct {
	// Role is the database role's name, by the rule of ValidateRoleName.
	Role string
	// Prefixes are the task name prefixes the role may act on: 1 to
	// MaxScopePrefixes distinct prefixes by the rule of ValidateScopePrefix.
	// Validate sorts them (bytewise), so a scope reads back in one order.
	Prefixes []string
	// CreatedAt and UpdatedAt are set by the store.
	CreatedAt, UpdatedAt time.Time
}

// Bounds of a role scope.
const (
	// MaxRoleNameLen is PostgreSQL's identifier limit (NAMEDATALEN - 1).
	MaxRoleNameLen = 63
	// MaxScopePrefixes bounds the prefixes of one role: the database
	// tests a task against each of them.
	MaxScopePrefixes = 64
)

// roleRule is the role name rule as ValidateRoleName states it.
var roleRule = fmt.Sprintf("must be 1 to %d characters of A-Z a-z 0-9 _, not starting with a digit (a PostgreSQL role name that needs no quoting, in its stored case)", MaxRoleNameLen)

// ValidateRoleName checks a database role's name: 1 to MaxRoleNameLen
// characters of A–Z a–z 0–9 _, not starting with a digit. PostgreSQL allows
// more in quoted names; leasehold keeps to names that read the same in SQL,
// in a log line and in a task name (a scoped role's prune lease is named
// after it, see PruneTaskFor).
func ValidateRoleName(role string) error {
	if role == "" || len(role) > MaxRoleNameLen || ('0' <= role[0] && role[0] <= '9') {
		return &ValidationError{Field: "Role", Rule: roleRule}
	}
	for i := 0; i < len(role); i++ {
		c := role[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return &ValidationError{Field: "Role", Rule: fmt.Sprintf("%s; %q at position %d is not", roleRule, rune(c), i+1)}
		}
	}
	return nil
}

// scopePrefixRule is the prefix rule as ValidateScopePrefix states it.
var scopePrefixRule = fmt.Sprintf("must be 1 to %d characters of %s, not starting %q (leasehold's own tasks are in every scope)", MaxTaskLen, taskCharsetMsg, ReservedPrefix)

// ValidateScopePrefix checks one prefix of a role scope: 1 to MaxTaskLen
// characters of the task charset, and not under ReservedPrefix, which every
// role may act on anyway. A prefix is matched byte by byte: "team-a" also
// covers "team-ab/x", so end a team's prefix with a separator ("team-a/").
func ValidateScopePrefix(prefix string) error {
	if prefix == "" || len(prefix) > MaxTaskLen || IsReserved(prefix) || strings.HasPrefix(ReservedPrefix, prefix) {
		return &ValidationError{Field: "Prefixes", Rule: scopePrefixRule}
	}
	for i := 0; i < len(prefix); i++ {
		if !isTaskChar(prefix[i]) {
			return &ValidationError{Field: "Prefixes", Rule: fmt.Sprintf("%s; %q at position %d of %q is not", scopePrefixRule, rune(prefix[i]), i+1, prefix)}
		}
	}
	return nil
}

// Validate checks a role scope and sorts its prefixes.
func (r *RoleScope) Validate() error {
	if err := ValidateRoleName(r.Role); err != nil {
		return err
	}
	if len(r.Prefixes) == 0 || len(r.Prefixes) > MaxScopePrefixes {
		return &ValidationError{Field: "Prefixes", Rule: fmt.Sprintf("must hold 1 to %d prefixes; to lift a role's limit, delete its scope", MaxScopePrefixes)}
	}
	for _, p := range r.Prefixes {
		if err := ValidateScopePrefix(p); err != nil {
			return err
		}
	}
	r.Prefixes = slices.Clone(r.Prefixes)
	slices.Sort(r.Prefixes)
	for i := 1; i < len(r.Prefixes); i++ {
		if r.Prefixes[i] == r.Prefixes[i-1] {
			return &ValidationError{Field: "Prefixes", Rule: fmt.Sprintf("must be distinct; %q is given twice", r.Prefixes[i])}
		}
	}
	return nil
}

// Scope is what a store's connection may act on: the scope of the database
// role it runs as, as the store last read it.
type Scope struct {
	// Role is the database role the store's connection runs as; empty for
	// a store without roles.
	Role string
	// Prefixes, when not nil, are the prefixes the role is limited to (and
	// leasehold's own tasks); nil means unrestricted.
	Prefixes []string
}

// Restricted reports whether the scope limits the tasks the store may act on.
func (s Scope) Restricted() bool { return s.Prefixes != nil }

// Allows reports whether the scope covers task: a restricted scope covers
// the tasks that start with one of its prefixes, and leasehold's own but
// the prune leases of other roles (PruneTaskFor), so that no team can hold
// another's and stop its pruning.
func (s Scope) Allows(task string) bool {
	if s.Prefixes == nil {
		return true
	}
	if IsReserved(task) {
		role, ok := strings.CutPrefix(task, PruneTask+"/")
		return !ok || role == s.Role
	}
	for _, p := range s.Prefixes {
		if strings.HasPrefix(task, p) {
			return true
		}
	}
	return false
}

// Principal names the scope's role for a *ForbiddenError: `database role "team_a"`.
func (s Scope) Principal() string { return fmt.Sprintf("database role %q", s.Role) }

// Check returns the *ForbiddenError refusing right ("read" or "hold") on
// task when the scope does not cover it, and nil when it does.
func (s Scope) Check(right, task string) error {
	if s.Allows(task) {
		return nil
	}
	quoted := make([]string, len(s.Prefixes))
	for i, p := range s.Prefixes {
		quoted[i] = fmt.Sprintf("%q", p)
	}
	return &ForbiddenError{
		Principal: s.Principal(),
		Right:     right,
		Task:      task,
		Scope:     fmt.Sprintf("its tasks start with %s (its leasehold_role_scope), or %q", strings.Join(quoted, ", "), ReservedPrefix),
	}
}

// The rights a Scope check names (ForbiddenError.Right).
const (
	RightRead = "read"
	RightHold = "hold"
)

// PruneTaskFor is the prune lease of the pruners whose store is limited to
// scope. An unrestricted store's pruners share PruneTask and prune every
// task's history; a restricted one sees (and prunes) only its own tasks'
// history, so the pruners of each scoped role take a lease of their own,
// leasehold:prune/ROLE: one pruner per role prunes at a time, and one
// team's pruner never makes another team's skip its pass.
func PruneTaskFor(scope Scope) string {
	if !scope.Restricted() || ValidateRoleName(scope.Role) != nil {
		return PruneTask
	}
	return PruneTask + "/" + scope.Role
}

// ErrNoRoles: a role scope was asked of a store whose database has no
// roles (SQLite). The matching *NoRolesError says so.
var ErrNoRoles = errors.New("the store has no database roles")

// NoRolesError refuses a role scope operation on a store without database
// roles.
type NoRolesError struct{}

func (e *NoRolesError) Error() string {
	return "this store has no database roles: role scopes are PostgreSQL row-level security, and need a postgres:// store"
}

// Unwrap makes errors.Is(err, ErrNoRoles) true.
func (e *NoRolesError) Unwrap() error { return ErrNoRoles }

// RoleScopeStore is implemented by a Store whose database has roles that
// row-level security can limit to task prefixes (the PostgreSQL driver).
// Such a store refuses, before anything reaches the database, an operation
// on a task outside the scope of the role it runs as (*ForbiddenError),
// from a copy of its scope at most a few seconds old; the database's
// policies enforce the scope whatever that copy says.
//
// Only the role that owns leasehold's tables (the one that migrates) may
// write scopes; a runtime role reads its own at most.
type RoleScopeStore interface {
	// CreateRoleScope stores a new scope: *ExistsError when the role has
	// one, *NotFoundError (Kind "database role") when no such role
	// exists, and a *ValidationError naming Role when the role bypasses
	// row-level security (a superuser, BYPASSRLS, or the owner of
	// leasehold's tables), which a scope would not bind.
	CreateRoleScope(ctx context.Context, r RoleScope) (*RoleScope, error)
	// UpdateRoleScope replaces a role's prefixes (CreatedAt kept):
	// *NotFoundError when it has no scope; otherwise as CreateRoleScope.
	UpdateRoleScope(ctx context.Context, r RoleScope) (*RoleScope, error)
	// GetRoleScope returns a role's scope, or nil when it has none.
	GetRoleScope(ctx context.Context, role string) (*RoleScope, error)
	// DeleteRoleScope removes a role's scope, which lifts its limit, and
	// reports whether there was one.
	DeleteRoleScope(ctx context.Context, role string) (bool, error)
	// Scope returns the scope of the role the store's connection runs as,
	// from a copy at most a few seconds old.
	Scope(ctx context.Context) (Scope, error)
}

// The operations of a RoleScopeStore, as Interceptors are told of them.
const (
	OpCreateRoleScope = "create_role_scope"
	OpUpdateRoleScope = "update_role_scope"
	OpGetRoleScope    = "get_role_scope"
	OpDeleteRoleScope = "delete_role_scope"
	OpScope           = "scope"
)

// roleScopes returns the store as a RoleScopeStore, or a *NoRolesError.
func (s *Service) roleScopes() (RoleScopeStore, error) {
	rs, ok := s.store.(RoleScopeStore)
	if !ok {
		return nil, &NoRolesError{}
	}
	return rs, nil
}

// CreateRoleScope limits a database role to task prefixes; see
// RoleScopeStore.CreateRoleScope. A store without roles answers
// *NoRolesError.
func (s *Service) CreateRoleScope(ctx context.Context, r RoleScope) (*RoleScope, error) {
	return s.putRoleScope(ctx, OpCreateRoleScope, r, func(rs RoleScopeStore) func(context.Context, RoleScope) (*RoleScope, error) {
		return rs.CreateRoleScope
	})
}

// UpdateRoleScope replaces a role's prefixes; see RoleScopeStore.UpdateRoleScope.
func (s *Service) UpdateRoleScope(ctx context.Context, r RoleScope) (*RoleScope, error) {
	return s.putRoleScope(ctx, OpUpdateRoleScope, r, func(rs RoleScopeStore) func(context.Context, RoleScope) (*RoleScope, error) {
		return rs.UpdateRoleScope
	})
}

func (s *Service) putRoleScope(ctx context.Context, op string, r RoleScope, put func(RoleScopeStore) func(context.Context, RoleScope) (*RoleScope, error)) (*RoleScope, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	rs, err := s.roleScopes()
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out *RoleScope
	err = s.call(ctx, op, func(ctx context.Context) (err error) {
		out, err = put(rs)(ctx, r)
		return err
	})
	if err != nil {
		return nil, outcome(op, err, ErrNotFound, ErrExists, ErrInvalid)
	}
	if out == nil {
		return nil, Unavailable(op, errors.New("driver returned neither a role scope nor an error"))
	}
	return out, nil
}

// GetRoleScope returns a role's scope, or nil when it has none.
func (s *Service) GetRoleScope(ctx context.Context, role string) (*RoleScope, error) {
	if err := ValidateRoleName(role); err != nil {
		return nil, err
	}
	rs, err := s.roleScopes()
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out *RoleScope
	err = s.call(ctx, OpGetRoleScope, func(ctx context.Context) (err error) {
		out, err = rs.GetRoleScope(ctx, role)
		return err
	})
	if err != nil {
		return nil, outcome(OpGetRoleScope, err)
	}
	return out, nil
}

// DeleteRoleScope removes a role's scope, lifting its limit, and reports
// whether there was one.
func (s *Service) DeleteRoleScope(ctx context.Context, role string) (bool, error) {
	if err := ValidateRoleName(role); err != nil {
		return false, err
	}
	rs, err := s.roleScopes()
	if err != nil {
		return false, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var ok bool
	err = s.call(ctx, OpDeleteRoleScope, func(ctx context.Context) (err error) {
		ok, err = rs.DeleteRoleScope(ctx, role)
		return err
	})
	if err != nil {
		return false, outcome(OpDeleteRoleScope, err)
	}
	return ok, nil
}

// Scope returns what the store's connection may act on: the scope of its
// database role, or an unrestricted Scope for a store without roles.
func (s *Service) Scope(ctx context.Context) (Scope, error) {
	rs, ok := s.store.(RoleScopeStore)
	if !ok {
		return Scope{}, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out Scope
	err := s.call(ctx, OpScope, func(ctx context.Context) (err error) {
		out, err = rs.Scope(ctx)
		return err
	})
	if err != nil {
		return Scope{}, outcome(OpScope, err)
	}
	return out, nil
}
