// Package fencepgx is the fence's check for programs that use pgx (v5)
// rather than database/sql: the same call as fence.Check with the Postgres
// dialect, on a pgx.Tx (or a *pgx.Conn, a *pgxpool.Pool), with the same
// errors (*fence.StaleTokenError, fence.ErrInvalid, fence.ErrNotInstalled).
//
//	tx, err := pool.Begin(ctx)
//	…
//	defer tx.Rollback(ctx)
//	if err := fencepgx.Check(ctx, tx, lease.Task, lease.Token); err != nil {
//		return err // errors.Is(err, fence.ErrStale): a newer holder has the task
//	}
//	// … the writes …
//	return tx.Commit(ctx)
package fencepgx

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/client/fence"
	"github.com/leasehold/leasehold/client/fence/internal/check"
)

// Querier is what Check sends its statement on: a pgx.Tx (the writing
// transaction, the one to pass), a *pgx.Conn, a *pgxpool.Pool or Conn.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Check is fence.Check(ctx, tx, fence.Postgres, task, token) for pgx: it
// refuses a token lower than the highest seen for task (a
// *fence.StaleTokenError, errors.Is fence.ErrStale, wrapping the
// *pgconn.PgError of SQLSTATE LH001), accepts an equal one and records a
// higher one, in q's transaction. A refusal aborts the transaction, as any
// PostgreSQL error does.
func Check(ctx context.Context, q Querier, task string, token int64) error {
	if err := check.Validate(task, token); err != nil {
		return err
	}
	var recorded int64
	err := q.QueryRow(ctx, check.PostgresCheck, task, token).Scan(&recorded)
	if err == nil {
		return nil
	}
	switch state := check.SQLState(err); {
	case state == check.StaleState:
		return &fence.StaleTokenError{Task: task, Token: token, Highest: check.Highest(err.Error()), Err: err}
	case check.NotInstalled(state):
		return check.Missing(err)
	}
	return fmt.Errorf("fence: check %q at token %d: %w", task, token, err)
}

// Beginner starts the transaction Install runs in: a *pgx.Conn, a
// *pgxpool.Pool.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Install is fence.Install for pgx: it applies fence.SQL(fence.Postgres) in
// one transaction, idempotently.
func Install(ctx context.Context, db Beginner) (err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("fence: install (postgres): %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(ctx)
		}
	}()
	// Without arguments pgx sends each Exec over the simple protocol,
	// which takes several statements at once.
	for _, s := range []string{check.PostgresInstallLock, fence.SQL(fence.Postgres)} {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("fence: install (postgres): %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("fence: install (postgres): commit: %w", err)
	}
	return nil
}
