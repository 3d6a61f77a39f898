package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// nowMS is the store's clock in whole milliseconds since the Unix epoch.
// SQLite reads its clock once per statement step, so every use of it in one
// statement sees the same instant.
const nowMS = `CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)`

// selectForUpdateSQL reads a task's row, if any, together with the store's
// now, in one statement. It always yields one row: the clock, then the
// lease's columns (NULL when the task has no row).
const selectForUpdateSQL = `
SELECT n.ms, l.owner, l.token, l.ttl_ms, l.expires_at, l.released_at
FROM (SELECT ` + nowMS + ` AS ms) AS n
LEFT JOIN leasehold_leases AS l ON l.task = :task`

// leaseColumns are the columns scanLease reads, in its order.
const leaseColumns = `task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note`

// grantSQL hands the task to a new holder: a first row with token 1, or the
// next token on the existing row. The caller has seen, in the same
// transaction, that no lease is live; the WHERE repeats the check so that the
// statement alone can never take a live lease away from its holder.
const grantSQL = `
INSERT INTO leasehold_leases AS l
       (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note, released_at)
VALUES (:task, :owner, 1, :now, :now, :now + :ttl, :ttl, 0, :note, NULL)
ON CONFLICT (task) DO UPDATE SET
       owner = excluded.owner,
       token = l.token + 1,
       acquired_at = excluded.acquired_at,
       renewed_at = excluded.renewed_at,
       expires_at = excluded.expires_at,
       ttl_ms = excluded.ttl_ms,
       renew_count = 0,
       note = excluded.note,
       released_at = NULL
WHERE l.released_at IS NOT NULL OR l.expires_at <= :now
RETURNING ` + leaseColumns

// extendSQL extends the owner's live lease under the given token: a same-owner
// claim (which also replaces the note) or a renewal (which keeps it).
const extendSQL = `
UPDATE leasehold_leases
SET expires_at = :now + :ttl,
    renewed_at = :now,
    ttl_ms = :ttl,
    renew_count = renew_count + 1,
    note = CASE WHEN :set_note THEN :note ELSE note END
WHERE task = :task AND owner = :owner AND token = :token
  AND released_at IS NULL AND expires_at > :now
RETURNING ` + leaseColumns

// releaseSQL ends the owner's live lease in one conditional statement.
const releaseSQL = `
UPDATE leasehold_leases
SET released_at = ` + nowMS + `, expires_at = ` + nowMS + `
WHERE task = :task AND owner = :owner
  AND released_at IS NULL AND expires_at > ` + nowMS + `
  AND (:token = 0 OR token = :token)`

// liveSQL selects live leases with the store's now as the last column.
const liveSQL = `
SELECT ` + leaseColumns + `, n.ms
FROM leasehold_leases, (SELECT ` + nowMS + ` AS ms) AS n
WHERE released_at IS NULL AND expires_at > n.ms`

// errVanished reports a write that matched no row although the same
// transaction had just read it: it cannot happen while transactions are
// serialised, and is reported as unavailable if it ever does.
var errVanished = errors.New("lease row changed inside its own transaction")

// current is a task's row as selectForUpdateSQL reads it.
type current struct {
	now       int64
	exists    bool
	owner     string
	token     int64
	ttlMS     int64
	expiresAt int64
	released  bool
}

func (c current) live() bool { return c.exists && !c.released && c.expiresAt > c.now }

func readCurrent(ctx context.Context, st *txStmts, task string) (current, error) {
	var (
		c                        current
		owner                    sql.NullString
		token, ttl, exp, release sql.NullInt64
	)
	err := st.current.QueryRowContext(ctx, sql.Named("task", task)).
		Scan(&c.now, &owner, &token, &ttl, &exp, &release)
	if err != nil {
		return current{}, err
	}
	c.exists = owner.Valid
	c.owner, c.token, c.ttlMS, c.expiresAt = owner.String, token.Int64, ttl.Int64, exp.Int64
	c.released = release.Valid
	return c, nil
}

// Claim acquires a free or expired lease with the next token, refreshes the
// owner's own live lease under its token, or returns *leasecore.HeldError.
// It runs in one of the writer's IMMEDIATE transactions, after the
// operations queued before it, so of concurrent claimants in any number of
// processes exactly one acquires; the answer comes after the commit.
func (s *Store) Claim(ctx context.Context, p leasecore.ClaimParams) (*leasecore.Lease, error) {
	res := s.submit(ctx, "claim", func(ctx context.Context, st *txStmts) (answer, error) {
		return claim(ctx, st, p)
	})
	return res.lease, res.err
}

// claim is Claim's read-decide-write inside a batch.
func claim(ctx context.Context, st *txStmts, p leasecore.ClaimParams) (answer, error) {
	cur, err := readCurrent(ctx, st, p.Task)
	if err != nil {
		return answer{}, err
	}
	ttl := p.TTL.Milliseconds()
	var row *sql.Row
	switch {
	case cur.live() && cur.owner != p.Owner:
		return answer{err: &leasecore.HeldError{Task: p.Task, Holder: leasecore.Holder{
			Owner:        cur.owner,
			ExpiresAt:    fromMS(cur.expiresAt),
			TTLRemaining: time.Duration(cur.expiresAt-cur.now) * time.Millisecond,
		}}}, nil
	case cur.live():
		row = st.extend.QueryRowContext(ctx,
			sql.Named("task", p.Task), sql.Named("owner", p.Owner), sql.Named("token", cur.token),
			sql.Named("now", cur.now), sql.Named("ttl", ttl),
			sql.Named("set_note", true), sql.Named("note", p.Note))
	default:
		row = st.grant.QueryRowContext(ctx,
			sql.Named("task", p.Task), sql.Named("owner", p.Owner),
			sql.Named("now", cur.now), sql.Named("ttl", ttl), sql.Named("note", p.Note))
	}
	lease, err := scanLease(row, cur.now)
	return answer{lease: lease}, err
}

// Renew extends the owner's live lease (a zero TTL keeps its TTL), or returns
// *leasecore.LostError with the reason. It never revives an expired lease.
// Like Claim, it runs in one of the writer's batches.
func (s *Store) Renew(ctx context.Context, p leasecore.RenewParams) (*leasecore.Lease, error) {
	res := s.submit(ctx, "renew", func(ctx context.Context, st *txStmts) (answer, error) {
		return renew(ctx, st, p)
	})
	return res.lease, res.err
}

// maxRenewBatch bounds the renewals RenewBatch puts in one operation of the
// writer's batches; a larger RenewBatch is split into several.
const maxRenewBatch = 2048

// RenewBatch renews many leases in the writer's transactions: up to
// maxRenewBatch renewals as one operation of a batch, in order, each judged
// as by Renew (a task named twice is renewed twice, the second seeing the
// first). It is leasecore.BatchRenewer.
func (s *Store) RenewBatch(ctx context.Context, ps []leasecore.RenewParams) ([]leasecore.RenewResult, error) {
	results := make([]leasecore.RenewResult, 0, len(ps))
	for len(ps) > 0 {
		chunk := ps[:min(len(ps), maxRenewBatch)]
		ps = ps[len(chunk):]
		res := s.submit(ctx, "renew", func(ctx context.Context, st *txStmts) (answer, error) {
			batch := make([]leasecore.RenewResult, len(chunk))
			for i, p := range chunk {
				a, err := renew(ctx, st, p)
				if err != nil {
					return answer{}, err
				}
				batch[i] = leasecore.RenewResult{Lease: a.lease, Err: a.err}
			}
			return answer{batch: batch}, nil
		})
		if res.err != nil {
			return nil, res.err
		}
		results = append(results, res.batch...)
	}
	return results, nil
}

// renew is Renew's read-decide-write inside a batch.
func renew(ctx context.Context, st *txStmts, p leasecore.RenewParams) (answer, error) {
	cur, err := readCurrent(ctx, st, p.Task)
	if err != nil {
		return answer{}, err
	}
	if reason, detail := lostReason(cur, p); reason != "" {
		return answer{err: &leasecore.LostError{Task: p.Task, Reason: reason, Detail: detail}}, nil
	}
	ttl := p.TTL.Milliseconds()
	if ttl == 0 {
		ttl = cur.ttlMS
	}
	row := st.extend.QueryRowContext(ctx,
		sql.Named("task", p.Task), sql.Named("owner", p.Owner), sql.Named("token", cur.token),
		sql.Named("now", cur.now), sql.Named("ttl", ttl),
		sql.Named("set_note", false), sql.Named("note", ""))
	lease, err := scanLease(row, cur.now)
	return answer{lease: lease}, err
}

// lostReason says why p cannot renew cur, or "" when it can.
func lostReason(cur current, p leasecore.RenewParams) (leasecore.LostReason, string) {
	switch {
	case !cur.exists:
		return leasecore.LostNotHeld, "the task has no lease"
	case cur.owner != p.Owner && cur.live():
		return leasecore.LostHeldByOther, fmt.Sprintf("held by %q", cur.owner)
	case cur.owner != p.Owner:
		return leasecore.LostNotHeld, "the owner holds no lease on the task"
	case cur.released:
		return leasecore.LostNotHeld, "the lease was released"
	case !cur.live():
		return leasecore.LostExpired, "the lease expired; claim it again for a new token"
	case p.Token != 0 && p.Token != cur.token:
		return leasecore.LostTokenMismatch, fmt.Sprintf("the lease has token %d, not %d", cur.token, p.Token)
	}
	return "", ""
}

// Release ends the owner's live lease (checking the token when given) and
// reports whether it did. What is not held is left alone: (false, nil).
// Like Claim, it runs in one of the writer's batches.
func (s *Store) Release(ctx context.Context, p leasecore.ReleaseParams) (bool, error) {
	res := s.submit(ctx, "release", func(ctx context.Context, st *txStmts) (answer, error) {
		return release(ctx, st, p)
	})
	return res.released, res.err
}

// release is Release's one conditional UPDATE inside a batch.
func release(ctx context.Context, st *txStmts, p leasecore.ReleaseParams) (answer, error) {
	res, err := st.release.ExecContext(ctx,
		sql.Named("task", p.Task), sql.Named("owner", p.Owner), sql.Named("token", p.Token))
	if err != nil {
		return answer{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return answer{}, err
	}
	return answer{released: n > 0}, nil
}

// Get returns the task's live lease, or nil when there is none.
func (s *Store) Get(ctx context.Context, task string) (*leasecore.Lease, error) {
	leases, err := s.live(ctx, "get", liveSQL+` AND task = :task`, sql.Named("task", task))
	if err != nil || len(leases) == 0 {
		return nil, err
	}
	return &leases[0], nil
}

// List returns every live lease, ordered by task.
func (s *Store) List(ctx context.Context) ([]leasecore.Lease, error) {
	return s.live(ctx, "list", liveSQL+` ORDER BY task`)
}

func (s *Store) live(ctx context.Context, op, query string, args ...any) ([]leasecore.Lease, error) {
	if err := s.usable(op); err != nil {
		return nil, err
	}
	rows, err := s.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError(op, err)
	}
	defer rows.Close()
	leases := []leasecore.Lease{}
	for rows.Next() {
		var (
			l   leasecore.Lease
			raw rawLease
			now int64
		)
		if err := rows.Scan(append(raw.dest(&l), &now)...); err != nil {
			return nil, interpretError(op, err)
		}
		leases = append(leases, raw.lease(l, now))
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(op, err)
	}
	return leases, nil
}

// Ping checks that the file opens, the schema exists, and it is at least
// at the version this build needs.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.usable("ping"); err != nil {
		return err
	}
	// Naming both tables makes a missing one fail the statement.
	var version, none int
	err := s.reader.QueryRowContext(ctx, `
SELECT (SELECT coalesce(max(version), 0) FROM leasehold_schema_migrations),
       (SELECT count(*) FROM (SELECT 1 FROM leasehold_leases LIMIT 0))`).Scan(&version, &none)
	if err != nil {
		return interpretError("ping", err)
	}
	if want := len(s.migrations); version < want {
		return interpretError("ping", fmt.Errorf("schema is at version %d, this build needs %d", version, want))
	}
	return nil
}

// rawLease holds the integer columns of leaseColumns while they are scanned.
type rawLease struct {
	acquiredAt, renewedAt, expiresAt, ttlMS int64
}

// dest returns scan destinations for leaseColumns, in order.
func (r *rawLease) dest(l *leasecore.Lease) []any {
	return []any{&l.Task, &l.Owner, &l.Token, &r.acquiredAt, &r.renewedAt, &r.expiresAt, &r.ttlMS, &l.RenewCount, &l.Note}
}

// lease completes l with the times, measured against the store's now.
func (r *rawLease) lease(l leasecore.Lease, now int64) leasecore.Lease {
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt = fromMS(r.acquiredAt), fromMS(r.renewedAt), fromMS(r.expiresAt)
	l.TTL = time.Duration(r.ttlMS) * time.Millisecond
	l.TTLRemaining = time.Duration(r.expiresAt-now) * time.Millisecond
	return l
}

// scanLease reads the row a write statement returned.
func scanLease(row *sql.Row, now int64) (*leasecore.Lease, error) {
	var (
		l   leasecore.Lease
		raw rawLease
	)
	if err := row.Scan(raw.dest(&l)...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, errVanished
		}
		return nil, err
	}
	l = raw.lease(l, now)
	return &l, nil
}

func fromMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
