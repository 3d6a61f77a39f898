package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/leasecore"
)

// The catalog: task declarations, retention policies and lease history
// (leasecore.CatalogStore). Declarations and policies are plain rows, each
// operation one autocommit statement; the database's constraints decide the
// races (a name created twice, a task naming a policy being deleted), and
// interpretConstraintError turns what they refuse into the catalog's
// outcomes. History is written by the lease statements themselves (sql.go);
// here it is read and pruned.

// maxDeletePolicyAttempts bounds how often DeletePolicy deletes again when
// its delete was refused by a task naming the policy that no longer names
// it when the names are read.
const maxDeletePolicyAttempts = 8

// maxManagerAttempts bounds how often a write that the manager check
// refused is tried again because the manager, read afterwards, no longer
// refuses it (it changed meanwhile).
const maxManagerAttempts = 8

// CreateTask stores a new declaration, managed by w:
// *leasecore.ExistsError when the name is taken, *leasecore.NotFoundError
// when its policy does not exist. Its times are the store's.
func (s *Store) CreateTask(ctx context.Context, d leasecore.TaskDecl, w leasecore.Writer) (*leasecore.TaskDecl, error) {
	const op = "create_task"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	out, err := scanTask(s.pool.QueryRow(ctx, createTaskSQL, taskArgs(d, w)[:10]...))
	if err != nil {
		return nil, s.taskConstraintError(op, err, d)
	}
	return out, nil
}

// UpdateTask replaces a declaration, keeping its CreatedAt, managed by w
// from then on: *leasecore.NotFoundError when the task or its policy does
// not exist, *leasecore.ManagedError when w may not change it. The manager
// is checked by the update itself (updateTaskSQL); only when it changes no
// row is the manager read, to tell a missing task from a refusal.
func (s *Store) UpdateTask(ctx context.Context, d leasecore.TaskDecl, w leasecore.Writer) (*leasecore.TaskDecl, error) {
	const op = "update_task"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	for range maxManagerAttempts {
		out, err := scanTask(s.pool.QueryRow(ctx, updateTaskSQL, taskArgs(d, w)...))
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, s.taskConstraintError(op, err, d)
		}
		found, err := s.refusal(ctx, op, taskManagerSQL, "task", d.Name, w)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, &leasecore.NotFoundError{Kind: "task", Name: d.Name}
		}
	}
	return nil, interpretError(op, fmt.Errorf("%w: task %q", errManagerFlips, d.Name))
}

func (s *Store) taskConstraintError(op string, err error, d leasecore.TaskDecl) error {
	return interpretConstraintError(op, err,
		&leasecore.ExistsError{Kind: "task", Name: d.Name},
		&leasecore.NotFoundError{Kind: "retention policy", Name: d.RetentionPolicy})
}

// refusal says why a write of the declaration or policy name (kind),
// conditional on w.May, changed no row: found false when there is none,
// *leasecore.ManagedError when w may not write it, and neither when its
// manager changed since, so that the write should be tried again. query
// reads the manager.
func (s *Store) refusal(ctx context.Context, op, query, kind, name string, w leasecore.Writer) (found bool, err error) {
	var m string
	err = s.pool.QueryRow(ctx, query, name).Scan(&m)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, interpretError(op, err)
	}
	if !w.May(leasecore.Manager(m)) {
		return true, &leasecore.ManagedError{Kind: kind, Name: name, By: leasecore.Manager(m)}
	}
	return true, nil
}

func taskArgs(d leasecore.TaskDecl, w leasecore.Writer) []any {
	return []any{d.Name, d.TTL.Milliseconds(), d.MaxTTL.Milliseconds(), d.Description, d.RetentionPolicy,
		d.TTLSpelling, d.MaxTTLSpelling, string(w.Manager()), d.MinHold.Milliseconds(), d.MinHoldSpelling,
		w.May(leasecore.ManagedByTerraform)}
}

// GetTask returns a declaration, or nil when there is none.
func (s *Store) GetTask(ctx context.Context, name string) (*leasecore.TaskDecl, error) {
	const op = "get_task"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	d, err := scanTask(s.pool.QueryRow(ctx, getTaskSQL, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, interpretError(op, err)
	}
	return d, nil
}

// ListTasks returns a page of the declarations, ordered by name bytewise.
func (s *Store) ListTasks(ctx context.Context, p leasecore.ListParams) ([]leasecore.TaskDecl, error) {
	const op = "list_tasks"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	rows, err := s.pool.Query(ctx, listTasksSQL, p.After, pgLimit(p.Limit), p.Prefix, leasecore.PrefixEnd(p.Prefix))
	if err != nil {
		return nil, interpretError(op, err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (leasecore.TaskDecl, error) {
		d, err := scanTask(row)
		if err != nil {
			return leasecore.TaskDecl{}, err
		}
		return *d, nil
	})
	if err != nil {
		return nil, interpretError(op, err)
	}
	return ds, nil
}

// DeleteTask removes a declaration and reports whether there was one:
// *leasecore.ManagedError when w may not. The task's lease and history
// stay.
func (s *Store) DeleteTask(ctx context.Context, name string, w leasecore.Writer) (bool, error) {
	const op = "delete_task"
	if s.closed.Load() {
		return false, interpretError(op, errClosed)
	}
	for range maxManagerAttempts {
		tag, err := s.pool.Exec(ctx, deleteTaskSQL, name, w.May(leasecore.ManagedByTerraform))
		if err != nil {
			return false, interpretError(op, err)
		}
		if tag.RowsAffected() == 1 {
			return true, nil
		}
		found, err := s.refusal(ctx, op, taskManagerSQL, "task", name, w)
		if err != nil || !found {
			return false, err
		}
	}
	return false, interpretError(op, fmt.Errorf("%w: task %q", errManagerFlips, name))
}

// CreatePolicy stores a new retention policy, managed by w:
// *leasecore.ExistsError when the name is taken.
func (s *Store) CreatePolicy(ctx context.Context, p leasecore.RetentionPolicy, w leasecore.Writer) (*leasecore.RetentionPolicy, error) {
	const op = "create_policy"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	out, err := scanPolicy(s.pool.QueryRow(ctx, createPolicySQL, policyArgs(p, w)[:5]...))
	if err != nil {
		return nil, interpretConstraintError(op, err, &leasecore.ExistsError{Kind: "retention policy", Name: p.Name}, nil)
	}
	return out, nil
}

// UpdatePolicy replaces a retention policy, keeping its CreatedAt, managed
// by w from then on: *leasecore.NotFoundError when it does not exist,
// *leasecore.ManagedError when w may not change it (checked as UpdateTask
// checks it).
func (s *Store) UpdatePolicy(ctx context.Context, p leasecore.RetentionPolicy, w leasecore.Writer) (*leasecore.RetentionPolicy, error) {
	const op = "update_policy"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	for range maxManagerAttempts {
		out, err := scanPolicy(s.pool.QueryRow(ctx, updatePolicySQL, policyArgs(p, w)...))
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, interpretConstraintError(op, err, nil, nil)
		}
		found, err := s.refusal(ctx, op, policyManagerSQL, "retention policy", p.Name, w)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, &leasecore.NotFoundError{Kind: "retention policy", Name: p.Name}
		}
	}
	return nil, interpretError(op, fmt.Errorf("%w: retention policy %q", errManagerFlips, p.Name))
}

func policyArgs(p leasecore.RetentionPolicy, w leasecore.Writer) []any {
	return []any{p.Name, p.KeepFor.Milliseconds(), p.KeepLast, p.KeepForSpelling,
		string(w.Manager()), w.May(leasecore.ManagedByTerraform)}
}

// GetPolicy returns a retention policy, or nil when there is none.
func (s *Store) GetPolicy(ctx context.Context, name string) (*leasecore.RetentionPolicy, error) {
	const op = "get_policy"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	p, err := scanPolicy(s.pool.QueryRow(ctx, getPolicySQL, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, interpretError(op, err)
	}
	return p, nil
}

// ListPolicies returns every retention policy, ordered by name bytewise.
func (s *Store) ListPolicies(ctx context.Context) ([]leasecore.RetentionPolicy, error) {
	const op = "list_policies"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	rows, err := s.pool.Query(ctx, listPoliciesSQL)
	if err != nil {
		return nil, interpretError(op, err)
	}
	ps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (leasecore.RetentionPolicy, error) {
		p, err := scanPolicy(row)
		if err != nil {
			return leasecore.RetentionPolicy{}, err
		}
		return *p, nil
	})
	if err != nil {
		return nil, interpretError(op, err)
	}
	return ps, nil
}

// DeletePolicy removes a retention policy and reports whether there was
// one. The default policy is never deleted, and a policy that declarations
// name is not either: both answer *leasecore.InUseError, the latter listing
// the tasks by name. A policy w may not remove answers
// *leasecore.ManagedError (checked by the delete itself, as DeleteTask's).
//
// The foreign key decides, not a read before the delete: a declaration that
// names the policy in a transaction committing while the delete runs makes
// the delete fail (the key is checked against the latest committed rows),
// and only then are the names read. If by then no task names the policy (it
// was pointed elsewhere meanwhile), the delete is tried again.
func (s *Store) DeletePolicy(ctx context.Context, name string, w leasecore.Writer) (bool, error) {
	const op = "delete_policy"
	if s.closed.Load() {
		return false, interpretError(op, errClosed)
	}
	if err := leasecore.CheckPolicyDeletable(name); err != nil {
		return false, err
	}
	for range maxDeletePolicyAttempts {
		tag, err := s.pool.Exec(ctx, deletePolicySQL, name, w.May(leasecore.ManagedByTerraform))
		if err == nil {
			if tag.RowsAffected() == 1 {
				return true, nil
			}
			found, err := s.refusal(ctx, op, policyManagerSQL, "retention policy", name, w)
			if err != nil || !found {
				return false, err
			}
			continue // its manager changed meanwhile: delete again
		}
		err = interpretConstraintError(op, err, nil, &leasecore.InUseError{Policy: name})
		var inUse *leasecore.InUseError
		if !errors.As(err, &inUse) {
			return false, err
		}
		rows, err := s.pool.Query(ctx, policyUsersSQL, name)
		if err != nil {
			return false, interpretError(op, err)
		}
		inUse.Tasks, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return false, interpretError(op, err)
		}
		if len(inUse.Tasks) > 0 {
			return false, inUse
		}
	}
	return false, interpretError(op, fmt.Errorf("%w: %d deletes of retention policy %q were each refused by a task that no longer named it when the tasks were read",
		errUsersChanging, maxDeletePolicyAttempts, name))
}

// History returns the task's newest events, newest first, at most limit.
func (s *Store) History(ctx context.Context, task string, limit int) ([]leasecore.Event, error) {
	const op = "history"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	if err := s.checkScope(ctx, op, leasecore.RightRead, task); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, historySQL, task, limit)
	if err != nil {
		return nil, interpretError(op, err)
	}
	evs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (leasecore.Event, error) {
		var (
			e    leasecore.Event
			hold *time.Time
			run  *string
		)
		if err := row.Scan(&e.ID, &e.Task, &e.Kind, &e.Owner, &e.Token, &e.At, &e.Detail, &e.Credential, &hold, &run); err != nil {
			return e, err
		}
		e.At = e.At.UTC()
		return e, eventExtras(&e, hold, run)
	})
	if err != nil {
		return nil, interpretError(op, err)
	}
	return evs, nil
}

// pruneTasksPerStatement is how many tasks one pruning statement covers.
// A pass is one statement per this many tasks, each its own transaction, so
// that a long backlog (pruning that was down, a policy tightened) is
// deleted in steps that each commit: a pass cut short by its deadline
// keeps what it deleted, and the next one goes on. What a statement costs
// is in docs/design.md, "Measurements behind the constants".
const pruneTasksPerStatement = 128

// PruneHistory deletes, for every task with history, the events its policy
// does not keep (undeclared tasks: the default policy's), judged by the
// store's clock, and returns how many it deleted. It goes through the tasks
// in order, pruneTasksPerStatement a statement; if one fails, the events
// the earlier ones deleted stay deleted. Concurrent passes do not
// deadlock, and each event deleted is counted by one of them.
func (s *Store) PruneHistory(ctx context.Context) (int64, error) {
	const op = "prune"
	if s.closed.Load() {
		return 0, interpretError(op, errClosed)
	}
	var (
		total int64
		after string // tasks are never empty, so "" comes before them all
	)
	for {
		var (
			tasks, deleted int64
			last           *string
		)
		err := s.pool.QueryRow(ctx, pruneHistorySQL, after, pruneTasksPerStatement).Scan(&tasks, &last, &deleted)
		if err != nil {
			return total, interpretError(op, err)
		}
		total += deleted
		if tasks < pruneTasksPerStatement || last == nil {
			return total, nil
		}
		after = *last
	}
}

// scanTask reads taskColumns.
func scanTask(row pgx.Row) (*leasecore.TaskDecl, error) {
	var (
		d                      leasecore.TaskDecl
		ttlMS, maxTTL, minHold int64
	)
	if err := row.Scan(&d.Name, &ttlMS, &maxTTL, &d.Description, &d.RetentionPolicy, &d.CreatedAt, &d.UpdatedAt, &d.TTLSpelling, &d.MaxTTLSpelling, &d.ManagedBy,
		&minHold, &d.MinHoldSpelling); err != nil {
		return nil, err
	}
	d.MinHold = time.Duration(minHold) * time.Millisecond
	d.TTL = time.Duration(ttlMS) * time.Millisecond
	d.MaxTTL = time.Duration(maxTTL) * time.Millisecond
	d.CreatedAt, d.UpdatedAt = d.CreatedAt.UTC(), d.UpdatedAt.UTC()
	return &d, nil
}

// scanPolicy reads policyColumns.
func scanPolicy(row pgx.Row) (*leasecore.RetentionPolicy, error) {
	var (
		p      leasecore.RetentionPolicy
		keepMS int64
	)
	if err := row.Scan(&p.Name, &keepMS, &p.KeepLast, &p.CreatedAt, &p.UpdatedAt, &p.KeepForSpelling, &p.ManagedBy); err != nil {
		return nil, err
	}
	p.KeepFor = time.Duration(keepMS) * time.Millisecond
	p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	return &p, nil
}
