package fencepgx_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/client/fence"
	"github.com/leasehold/leasehold/client/fence/fencepgx"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// checkTx runs Check in a pgx transaction of its own, committed when the
// check passes.
func checkTx(t *testing.T, pool *pgxpool.Pool, task string, token int64) error {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := fencepgx.Check(ctx, tx, task, token); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Through pgx: installed twice, a higher token recorded, an equal one
// accepted, a lower one refused as SQLSTATE LH001 with the highest seen.
func TestCheck(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	if err := checkTx(t, pool, "nightly", 1); !errors.Is(err, fence.ErrNotInstalled) {
		t.Errorf("before Install: %v, want ErrNotInstalled", err)
	}
	for range 2 {
		if err := fencepgx.Install(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}
	for _, token := range []int64{2, 2, 5} {
		if err := checkTx(t, pool, "nightly", token); err != nil {
			t.Fatalf("token %d: %v", token, err)
		}
	}
	err := checkTx(t, pool, "nightly", 4)
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStale) || stale.Task != "nightly" || stale.Token != 4 || stale.Highest != 5 {
		t.Fatalf("token 4 after 5: %v (%+v), want stale with highest 5", err, stale)
	}
	if want := `stale fencing token 4 for task "nightly": highest seen is 5`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "LH001" {
		t.Errorf("the refusal wraps %v, want a *pgconn.PgError with code LH001", err)
	}
	var got int64
	if err := pool.QueryRow(ctx, "SELECT token FROM leasehold_fence WHERE task = 'nightly'").Scan(&got); err != nil || got != 5 {
		t.Errorf("the record is %d (%v), want 5", got, err)
	}
	// On a *pgx.Conn too, outside a transaction (the function's own).
	conn, err := pgx.Connect(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := fencepgx.Check(ctx, conn, "nightly", 6); err != nil {
		t.Errorf("on a *pgx.Conn: %v", err)
	}
}

// Bad input is refused before any SQL, naming the field, writing nothing.
func TestCheckBadInput(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	if err := fencepgx.Install(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		task  string
		token int64
		want  string
	}{
		{"", 1, "fence: task must not be empty"},
		{"nightly", 0, "fence: token must be an integer of at least 1, not 0"},
	} {
		if err := checkTx(t, pool, c.task, c.token); !errors.Is(err, fence.ErrInvalid) || err.Error() != c.want {
			t.Errorf("Check(%q, %d): %v, want %q", c.task, c.token, err, c.want)
		}
	}
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM leasehold_fence").Scan(&n); err != nil || n != 0 {
		t.Errorf("bad input wrote %d rows (%v)", n, err)
	}
}
