package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// The catalog: task declarations, retention policies and lease history
// (leasecore.CatalogStore). Writes go through the writer's batches like the
// lease operations, so they are serialised with them, and every
// check-then-write (does the policy exist? does a task name it?) holds
// within its transaction; catalog outcomes (exists, not found, in use) are
// answers, never SQL errors, so they never fail a batch. Reads use the
// reader pool.

const taskColumns = `name, ttl_ms, max_ttl_ms, description, retention_policy, created_at, updated_at, ttl_spelling, max_ttl_spelling, managed_by, min_hold_ms, min_hold_spelling`

const policyColumns = `name, keep_for_ms, keep_last, created_at, updated_at, keep_for_spelling, managed_by`

const (
	taskExistsSQL   = `SELECT EXISTS (SELECT 1 FROM leasehold_tasks WHERE name = :name)`
	policyExistsSQL = `SELECT EXISTS (SELECT 1 FROM leasehold_retention_policies WHERE name = :name)`
)

// The manager of a declaration or policy, read in the writer's transaction
// before it is changed or deleted (no row: none).
const (
	taskManagerSQL   = `SELECT managed_by FROM leasehold_tasks WHERE name = :name`
	policyManagerSQL = `SELECT managed_by FROM leasehold_retention_policies WHERE name = :name`
)

const insertTaskSQL = `
INSERT INTO leasehold_tasks (` + taskColumns + `)
VALUES (:name, :ttl, :max_ttl, :description, :policy, ` + nowMS + `, ` + nowMS + `, :ttl_spelling, :max_ttl_spelling, :managed_by, :min_hold, :min_hold_spelling)
RETURNING ` + taskColumns

// updateTaskSQL keeps created_at, and never moves updated_at backwards.
const updateTaskSQL = `
UPDATE leasehold_tasks
SET ttl_ms = :ttl, max_ttl_ms = :max_ttl, description = :description, retention_policy = :policy,
    ttl_spelling = :ttl_spelling, max_ttl_spelling = :max_ttl_spelling, managed_by = :managed_by,
    min_hold_ms = :min_hold, min_hold_spelling = :min_hold_spelling,
    updated_at = max(updated_at, ` + nowMS + `)
WHERE name = :name
RETURNING ` + taskColumns

const insertPolicySQL = `
INSERT INTO leasehold_retention_policies (` + policyColumns + `)
VALUES (:name, :keep_for, :keep_last, ` + nowMS + `, ` + nowMS + `, :keep_for_spelling, :managed_by)
RETURNING ` + policyColumns

const updatePolicySQL = `
UPDATE leasehold_retention_policies
SET keep_for_ms = :keep_for, keep_last = :keep_last, keep_for_spelling = :keep_for_spelling, managed_by = :managed_by, updated_at = max(updated_at, ` + nowMS + `)
WHERE name = :name
RETURNING ` + policyColumns

// historySQL walks the task's chain of events from its newest (see the
// migration), newest first, each step a lookup by id.
const historySQL = `
WITH RECURSIVE chain(id, task, kind, owner, token, at, detail, credential, hold_until, run, prev) AS (
    SELECT h.id, h.task, h.kind, h.owner, h.token, h.at, h.detail, h.credential, h.hold_until, h.run, h.prev_id
    FROM leasehold_leases AS l JOIN leasehold_history AS h ON h.id = l.last_event AND h.task = l.task
    WHERE l.task = :task
    UNION ALL
    SELECT h.id, h.task, h.kind, h.owner, h.token, h.at, h.detail, h.credential, h.hold_until, h.run, h.prev_id
    FROM chain AS c JOIN leasehold_history AS h ON h.id = c.prev AND h.task = :task
    LIMIT :limit
)
SELECT id, task, kind, owner, token, at, detail, credential, hold_until, run FROM chain ORDER BY id DESC`

// pruneTasksSQL lists the next tasks with history from :after on (the task
// :after itself only when :again, to finish it), by name, with the bounds of
// the policy each follows: its declaration's, or the default policy's when
// it is not declared (NULL: no such policy).
const pruneTasksSQL = `
SELECT l.task, l.last_event, p.keep_for_ms, p.keep_last
FROM leasehold_leases AS l
LEFT JOIN leasehold_tasks AS t ON t.name = l.task
LEFT JOIN leasehold_retention_policies AS p ON p.name = coalesce(t.retention_policy, 'default')
WHERE (l.task > :after OR (:again AND l.task = :after)) AND l.last_event IS NOT NULL
ORDER BY l.task
LIMIT :limit`

// pruneBoundarySQL finds where one task's kept history ends: it walks the
// chain from the newest event (:newest) while the events are kept (the
// newest :keep_last, none older than :keep_for by the store's clock; 0: no
// such bound), and returns the first event not kept (NULL: all are kept)
// and the oldest kept (NULL: none is). Each step is a lookup by id.
const pruneBoundarySQL = `
WITH RECURSIVE
clock(ms) AS (SELECT ` + nowMS + `),
kept(id, prev, n, at) AS (
    SELECT id, prev_id, 1, at FROM leasehold_history WHERE id = :newest AND task = :task
    UNION ALL
    SELECT h.id, h.prev_id, k.n + 1, h.at
    FROM kept AS k JOIN leasehold_history AS h ON h.id = k.prev AND h.task = :task
    WHERE NOT ((:keep_last > 0 AND k.n > :keep_last) OR (:keep_for > 0 AND k.at < (SELECT ms FROM clock) - :keep_for))
),
judged(id, doomed) AS (
    SELECT id, (:keep_last > 0 AND n > :keep_last) OR (:keep_for > 0 AND at < (SELECT ms FROM clock) - :keep_for)
    FROM kept
)
SELECT (SELECT max(id) FROM judged WHERE doomed), (SELECT min(id) FROM judged WHERE NOT doomed)`

// pruneChainSQL lists up to :limit events of the chain from :first back,
// newest first.
const pruneChainSQL = `
WITH RECURSIVE doomed(id, prev) AS (
    SELECT id, prev_id FROM leasehold_history WHERE id = :first AND task = :task
    UNION ALL
    SELECT h.id, h.prev_id FROM doomed AS d JOIN leasehold_history AS h ON h.id = d.prev AND h.task = :task
    LIMIT :limit
)
SELECT id FROM doomed`

// pruneDeleteSQL deletes the task's events whose ids are in the JSON array
// :ids.
const pruneDeleteSQL = `
DELETE FROM leasehold_history WHERE task = :task AND id IN (SELECT value FROM json_each(:ids))`

// When a task's doomed events do not fit in one round, what is left of them
// is linked to what is kept (or, when nothing is, to the lease row), so the
// next round finds them where this one stopped.
const (
	pruneRelinkEventSQL = `UPDATE leasehold_history SET prev_id = :next WHERE id = :boundary AND task = :task`
	pruneRelinkLeaseSQL = `UPDATE leasehold_leases SET last_event = :next WHERE task = :task`
)

// pruneRoundTasks bounds the tasks one transaction of PruneHistory visits,
// and pruneRoundEvents the events it deletes, so that a large pass (a
// backlog of millions of events) does not hold the file's write lock, and
// the writer, for long: the lease operations queued meanwhile go in
// between. docs/benchmarks.md's BenchmarkPruneBacklog figures say how long a round
// takes.
const (
	pruneRoundTasks  = 256
	pruneRoundEvents = 10_000
)

// CreateTask stores a new declaration, managed by w: *leasecore.ExistsError
// when the name is taken, *leasecore.NotFoundError when its policy does not
// exist.
func (s *Store) CreateTask(ctx context.Context, d leasecore.TaskDecl, w leasecore.Writer) (*leasecore.TaskDecl, error) {
	res := s.submit(ctx, "create_task", func(ctx context.Context, st *txStmts) (answer, error) {
		if taken, err := exists(ctx, st.tx, taskExistsSQL, d.Name); err != nil {
			return answer{}, err
		} else if taken {
			return answer{err: &leasecore.ExistsError{Kind: "task", Name: d.Name}}, nil
		}
		if a, err := policyMissing(ctx, st.tx, d.RetentionPolicy); err != nil || a.err != nil {
			return a, err
		}
		decl, err := scanTask(st.tx.QueryRowContext(ctx, insertTaskSQL, taskArgs(d, w)...))
		return answer{task: decl}, err
	})
	return res.task, res.err
}

// UpdateTask replaces a declaration, keeping its created_at, managed by w
// from then on: *leasecore.NotFoundError when the task or its policy does
// not exist, *leasecore.ManagedError when w may not change it.
func (s *Store) UpdateTask(ctx context.Context, d leasecore.TaskDecl, w leasecore.Writer) (*leasecore.TaskDecl, error) {
	res := s.submit(ctx, "update_task", func(ctx context.Context, st *txStmts) (answer, error) {
		if a, err := mayWrite(ctx, st.tx, taskManagerSQL, "task", d.Name, w); err != nil || a.err != nil {
			return a, err
		}
		if a, err := policyMissing(ctx, st.tx, d.RetentionPolicy); err != nil || a.err != nil {
			return a, err
		}
		decl, err := scanTask(st.tx.QueryRowContext(ctx, updateTaskSQL, taskArgs(d, w)...))
		return answer{task: decl}, err
	})
	return res.task, res.err
}

// GetTask returns a declaration, or nil when there is none.
func (s *Store) GetTask(ctx context.Context, name string) (*leasecore.TaskDecl, error) {
	var decl *leasecore.TaskDecl
	err := s.read(ctx, "get_task", `SELECT `+taskColumns+` FROM leasehold_tasks WHERE name = :name`,
		[]any{sql.Named("name", name)}, func(rows *sql.Rows) error {
			d, err := scanTask(rows)
			decl = d
			return err
		})
	if err != nil {
		return nil, err
	}
	return decl, nil
}

// ListTasks returns a page of the declarations, ordered by name, by the
// primary key's range (name > after).
func (s *Store) ListTasks(ctx context.Context, p leasecore.ListParams) ([]leasecore.TaskDecl, error) {
	decls := []leasecore.TaskDecl{}
	err := s.read(ctx, "list_tasks", `SELECT `+taskColumns+` FROM leasehold_tasks WHERE name > :after`+inPrefix("name")+` ORDER BY name LIMIT :limit`,
		[]any{sql.Named("after", p.After), sql.Named("limit", sqlLimit(p.Limit)), sql.Named("from", p.Prefix), sql.Named("below", leasecore.PrefixEnd(p.Prefix))},
		func(rows *sql.Rows) error {
			d, err := scanTask(rows)
			if err == nil {
				decls = append(decls, *d)
			}
			return err
		})
	if err != nil {
		return nil, err
	}
	return decls, nil
}

// DeleteTask removes a declaration and reports whether there was one:
// *leasecore.ManagedError when w may not. The task's lease and history
// stay.
func (s *Store) DeleteTask(ctx context.Context, name string, w leasecore.Writer) (bool, error) {
	res := s.submit(ctx, "delete_task", func(ctx context.Context, st *txStmts) (answer, error) {
		if a, err := mayWrite(ctx, st.tx, taskManagerSQL, "task", name, w); err != nil || a.err != nil {
			if errors.As(a.err, new(*leasecore.NotFoundError)) {
				return answer{}, nil // nothing to delete
			}
			return a, err
		}
		deleted, err := execDeleted(ctx, st.tx, `DELETE FROM leasehold_tasks WHERE name = :name`, sql.Named("name", name))
		return answer{deleted: deleted}, err
	})
	return res.deleted, res.err
}

// CreatePolicy stores a new retention policy, managed by w:
// *leasecore.ExistsError when the name is taken.
func (s *Store) CreatePolicy(ctx context.Context, p leasecore.RetentionPolicy, w leasecore.Writer) (*leasecore.RetentionPolicy, error) {
	res := s.submit(ctx, "create_policy", func(ctx context.Context, st *txStmts) (answer, error) {
		if taken, err := exists(ctx, st.tx, policyExistsSQL, p.Name); err != nil {
			return answer{}, err
		} else if taken {
			return answer{err: &leasecore.ExistsError{Kind: "retention policy", Name: p.Name}}, nil
		}
		policy, err := scanPolicy(st.tx.QueryRowContext(ctx, insertPolicySQL, policyArgs(p, w)...))
		return answer{policy: policy}, err
	})
	return res.policy, res.err
}

// UpdatePolicy replaces a retention policy, keeping its created_at, managed
// by w from then on: *leasecore.NotFoundError when it does not exist,
// *leasecore.ManagedError when w may not change it.
func (s *Store) UpdatePolicy(ctx context.Context, p leasecore.RetentionPolicy, w leasecore.Writer) (*leasecore.RetentionPolicy, error) {
	res := s.submit(ctx, "update_policy", func(ctx context.Context, st *txStmts) (answer, error) {
		if a, err := mayWrite(ctx, st.tx, policyManagerSQL, "retention policy", p.Name, w); err != nil || a.err != nil {
			return a, err
		}
		policy, err := scanPolicy(st.tx.QueryRowContext(ctx, updatePolicySQL, policyArgs(p, w)...))
		return answer{policy: policy}, err
	})
	return res.policy, res.err
}

// GetPolicy returns a retention policy, or nil when there is none.
func (s *Store) GetPolicy(ctx context.Context, name string) (*leasecore.RetentionPolicy, error) {
	var policy *leasecore.RetentionPolicy
	err := s.read(ctx, "get_policy", `SELECT `+policyColumns+` FROM leasehold_retention_policies WHERE name = :name`,
		[]any{sql.Named("name", name)}, func(rows *sql.Rows) error {
			p, err := scanPolicy(rows)
			policy = p
			return err
		})
	if err != nil {
		return nil, err
	}
	return policy, nil
}

// ListPolicies returns every retention policy, ordered by name.
func (s *Store) ListPolicies(ctx context.Context) ([]leasecore.RetentionPolicy, error) {
	policies := []leasecore.RetentionPolicy{}
	err := s.read(ctx, "list_policies", `SELECT `+policyColumns+` FROM leasehold_retention_policies ORDER BY name`, nil,
		func(rows *sql.Rows) error {
			p, err := scanPolicy(rows)
			if err == nil {
				policies = append(policies, *p)
			}
			return err
		})
	if err != nil {
		return nil, err
	}
	return policies, nil
}

// DeletePolicy removes a retention policy and reports whether there was
// one. The default policy is refused with *leasecore.InUseError, a policy w
// may not remove with *leasecore.ManagedError, and a policy that
// declarations name with *leasecore.InUseError (naming those tasks, by
// name).
func (s *Store) DeletePolicy(ctx context.Context, name string, w leasecore.Writer) (bool, error) {
	res := s.submit(ctx, "delete_policy", func(ctx context.Context, st *txStmts) (answer, error) {
		if err := leasecore.CheckPolicyDeletable(name); err != nil {
			return answer{err: err}, nil
		}
		if a, err := mayWrite(ctx, st.tx, policyManagerSQL, "retention policy", name, w); err != nil || a.err != nil {
			if errors.As(a.err, new(*leasecore.NotFoundError)) {
				return answer{}, nil // nothing to delete
			}
			return a, err
		}
		rows, err := st.tx.QueryContext(ctx,
			`SELECT name FROM leasehold_tasks WHERE retention_policy = :name ORDER BY name`, sql.Named("name", name))
		if err != nil {
			return answer{}, err
		}
		var users []string
		for rows.Next() {
			var task string
			if err := rows.Scan(&task); err != nil {
				_ = rows.Close()
				return answer{}, err
			}
			users = append(users, task)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return answer{}, err
		}
		if len(users) > 0 {
			return answer{err: &leasecore.InUseError{Policy: name, Tasks: users}}, nil
		}
		deleted, err := execDeleted(ctx, st.tx, `DELETE FROM leasehold_retention_policies WHERE name = :name`, sql.Named("name", name))
		return answer{deleted: deleted}, err
	})
	return res.deleted, res.err
}

// History returns the task's newest events, newest first, at most limit.
func (s *Store) History(ctx context.Context, task string, limit int) ([]leasecore.Event, error) {
	events := []leasecore.Event{}
	err := s.read(ctx, "history", historySQL,
		[]any{sql.Named("task", task), sql.Named("limit", limit)}, func(rows *sql.Rows) error {
			e, err := scanEvent(rows)
			if err != nil {
				return err
			}
			events = append(events, e)
			return nil
		})
	if err != nil {
		return nil, err
	}
	return events, nil
}

// PruneHistory deletes, for every task with history, the events its policy
// does not keep (undeclared tasks: the default policy's), by the store's
// clock, and returns how many it deleted. It works in rounds of at most
// pruneRoundTasks tasks and pruneRoundEvents deletions, one writer
// transaction each; when it fails part way, the rounds committed before
// stay done.
func (s *Store) PruneHistory(ctx context.Context) (int64, error) {
	var total int64
	after, again := "", false
	for {
		res := s.submit(ctx, "prune", func(ctx context.Context, st *txStmts) (answer, error) {
			return pruneRound(ctx, st.tx, after, again, s.pruneRound, s.pruneEvents)
		})
		if res.err != nil {
			return 0, res.err
		}
		total += res.pruned
		if res.next == "" {
			return total, nil
		}
		after, again = res.next, res.unfinished
	}
}

// pruneRound prunes the next tasks (at most tasks of them, deleting at most
// events) from the task named after on.
func pruneRound(ctx context.Context, tx *sql.Tx, after string, again bool, tasks, events int) (answer, error) {
	type bounds struct {
		task              string
		newest            int64
		keepFor, keepLast int64
		hasPolicy         bool
	}
	rows, err := tx.QueryContext(ctx, pruneTasksSQL, sql.Named("after", after), sql.Named("again", again), sql.Named("limit", tasks))
	if err != nil {
		return answer{}, err
	}
	var todo []bounds
	for rows.Next() {
		var (
			b                 bounds
			keepFor, keepLast sql.NullInt64
		)
		if err := rows.Scan(&b.task, &b.newest, &keepFor, &keepLast); err != nil {
			_ = rows.Close()
			return answer{}, err
		}
		b.keepFor, b.keepLast, b.hasPolicy = keepFor.Int64, keepLast.Int64, keepFor.Valid
		todo = append(todo, b)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return answer{}, err
	}
	var a answer
	budget := events
	for _, b := range todo {
		a.next = b.task
		if !b.hasPolicy { // only if the default policy was deleted behind leasehold's back: keep all
			continue
		}
		if b.keepFor == 0 && b.keepLast == 0 {
			continue // keeps everything
		}
		n, done, err := pruneTask(ctx, tx, b.task, b.newest, b.keepFor, b.keepLast, budget)
		if err != nil {
			return answer{}, err
		}
		a.pruned += n
		budget -= int(n)
		if !done {
			a.unfinished = true
			return a, nil
		}
		if budget <= 0 {
			return a, nil
		}
	}
	return a, nil
}

// pruneTask deletes up to budget of the events of one task that its policy
// does not keep, and reports whether it deleted them all.
func pruneTask(ctx context.Context, tx *sql.Tx, task string, newest, keepFor, keepLast int64, budget int) (int64, bool, error) {
	var first, boundary sql.NullInt64
	err := tx.QueryRowContext(ctx, pruneBoundarySQL, sql.Named("task", task), sql.Named("newest", newest),
		sql.Named("keep_last", keepLast), sql.Named("keep_for", keepFor)).Scan(&first, &boundary)
	if err != nil || !first.Valid {
		return 0, true, err
	}
	rows, err := tx.QueryContext(ctx, pruneChainSQL, sql.Named("task", task), sql.Named("first", first.Int64), sql.Named("limit", budget+1))
	if err != nil {
		return 0, false, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close()
			return 0, false, err
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, false, err
	}
	done := len(ids) <= budget
	if !done {
		next := ids[budget]
		ids = ids[:budget]
		relink, args := pruneRelinkLeaseSQL, []any{sql.Named("task", task), sql.Named("next", next)}
		if boundary.Valid {
			relink, args = pruneRelinkEventSQL, append(args, sql.Named("boundary", boundary.Int64))
		}
		if _, err := tx.ExecContext(ctx, relink, args...); err != nil {
			return 0, false, err
		}
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return 0, false, err
	}
	n, err := execCount(ctx, tx, pruneDeleteSQL, sql.Named("task", task), sql.Named("ids", string(list)))
	return n, done, err
}

// read runs a query on the reader pool and hands each row to scan; any
// failure is unavailable for op.
func (s *Store) read(ctx context.Context, op, query string, args []any, scan func(*sql.Rows) error) error {
	if err := s.usable(op); err != nil {
		return err
	}
	rows, err := s.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return interpretError(op, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return interpretError(op, err)
		}
	}
	if err := rows.Err(); err != nil {
		return interpretError(op, err)
	}
	return nil
}

// policyMissing answers *leasecore.NotFoundError when the policy a
// declaration names does not exist (the foreign key would fail the whole
// batch instead).
func policyMissing(ctx context.Context, tx *sql.Tx, policy string) (answer, error) {
	found, err := exists(ctx, tx, policyExistsSQL, policy)
	if err != nil || found {
		return answer{}, err
	}
	return answer{err: &leasecore.NotFoundError{Kind: "retention policy", Name: policy}}, nil
}

// mayWrite answers *leasecore.NotFoundError when there is no declaration
// or policy of that kind and name (query reads its manager), and
// *leasecore.ManagedError when w may not change or remove it. It runs in
// the writer's transaction, so nothing changes the manager before the write
// that follows.
func mayWrite(ctx context.Context, tx *sql.Tx, query, kind, name string, w leasecore.Writer) (answer, error) {
	var m string
	err := tx.QueryRowContext(ctx, query, sql.Named("name", name)).Scan(&m)
	if errors.Is(err, sql.ErrNoRows) {
		return answer{err: &leasecore.NotFoundError{Kind: kind, Name: name}}, nil
	}
	if err != nil {
		return answer{}, err
	}
	if !w.May(leasecore.Manager(m)) {
		return answer{err: &leasecore.ManagedError{Kind: kind, Name: name, By: leasecore.Manager(m)}}, nil
	}
	return answer{}, nil
}

// exists runs a SELECT EXISTS query for name.
func exists(ctx context.Context, tx *sql.Tx, query, name string) (bool, error) {
	var found bool
	err := tx.QueryRowContext(ctx, query, sql.Named("name", name)).Scan(&found)
	return found, err
}

// execDeleted runs a DELETE and reports whether it deleted a row.
func execDeleted(ctx context.Context, tx *sql.Tx, query string, args ...any) (bool, error) {
	n, err := execCount(ctx, tx, query, args...)
	return n > 0, err
}

// execCount runs a statement and returns the rows it changed.
func execCount(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func taskArgs(d leasecore.TaskDecl, w leasecore.Writer) []any {
	return []any{
		sql.Named("managed_by", string(w.Manager())),
		sql.Named("name", d.Name), sql.Named("ttl", d.TTL.Milliseconds()), sql.Named("max_ttl", d.MaxTTL.Milliseconds()),
		sql.Named("description", d.Description), sql.Named("policy", d.RetentionPolicy),
		sql.Named("ttl_spelling", d.TTLSpelling), sql.Named("max_ttl_spelling", d.MaxTTLSpelling),
		sql.Named("min_hold", d.MinHold.Milliseconds()), sql.Named("min_hold_spelling", d.MinHoldSpelling),
	}
}

func policyArgs(p leasecore.RetentionPolicy, w leasecore.Writer) []any {
	return []any{
		sql.Named("managed_by", string(w.Manager())),
		sql.Named("name", p.Name), sql.Named("keep_for", p.KeepFor.Milliseconds()), sql.Named("keep_last", p.KeepLast),
		sql.Named("keep_for_spelling", p.KeepForSpelling),
	}
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// scanTask reads taskColumns.
func scanTask(row scanner) (*leasecore.TaskDecl, error) {
	var (
		d                                      leasecore.TaskDecl
		ttl, maxTTL, created, updated, minHold int64
	)
	if err := row.Scan(&d.Name, &ttl, &maxTTL, &d.Description, &d.RetentionPolicy, &created, &updated, &d.TTLSpelling, &d.MaxTTLSpelling, &d.ManagedBy,
		&minHold, &d.MinHoldSpelling); err != nil {
		return nil, err
	}
	d.TTL, d.MaxTTL = time.Duration(ttl)*time.Millisecond, time.Duration(maxTTL)*time.Millisecond
	d.MinHold = time.Duration(minHold) * time.Millisecond
	d.CreatedAt, d.UpdatedAt = fromMS(created), fromMS(updated)
	return &d, nil
}

// scanPolicy reads policyColumns.
func scanPolicy(row scanner) (*leasecore.RetentionPolicy, error) {
	var (
		p                         leasecore.RetentionPolicy
		keepFor, created, updated int64
	)
	if err := row.Scan(&p.Name, &keepFor, &p.KeepLast, &created, &updated, &p.KeepForSpelling, &p.ManagedBy); err != nil {
		return nil, err
	}
	p.KeepFor = time.Duration(keepFor) * time.Millisecond
	p.CreatedAt, p.UpdatedAt = fromMS(created), fromMS(updated)
	return &p, nil
}
