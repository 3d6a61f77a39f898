package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client/fence"
)

// Two holders of one task write at once on PostgreSQL: the older (token 1)
// and the newer (token 2), each fencing, then writing the job's one row,
// then committing. Whichever fences first holds the fence's row lock while
// the other's fence waits on it (the test sees it wait); then the first
// writes and commits. Either way the row ends with the newer holder's
// write: the older one's commits first and is overwritten, or is refused.
func TestConcurrentHolders(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		first, second int64
	}{
		{"older holds the lock first", 1, 2},
		{"newer holds the lock first", 2, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := installed(t, fence.Postgres, openPostgres(t))
			r := interleave(t, db, c.first, c.second)
			if err := r.violation(); err != nil {
				t.Error(err)
			}
			if c.first == 2 && !errors.Is(r.errs[1], fence.ErrStale) {
				t.Errorf("the older holder, fencing after the newer: %v, want stale", r.errs[1])
			}
			if c.first == 1 && r.errs[2] != nil {
				t.Errorf("the newer holder, fencing after the older committed: %v", r.errs[2])
			}
		})
	}
}

// The test above catches a fence without its guard: the older holder,
// waiting behind the newer, then lowers the record and overwrites the
// newer holder's write.
func TestConcurrentHoldersCatchesMutant(t *testing.T) {
	t.Parallel()
	db := openPostgres(t)
	if err := fence.InstallWithoutGuard(t.Context(), db, fence.Postgres); err != nil {
		t.Fatal(err)
	}
	r := interleave(t, db, 2, 1)
	if r.violation() == nil {
		t.Errorf("a fence without its guard passed: final row by token %d, errors %v", r.final, r.errs)
	}
}

// race is what interleave saw: each holder's error (nil when it wrote and
// committed), and the token whose write the job's row holds at the end.
type race struct {
	errs  map[int64]error
	final int64
}

// violation says how r breaks the fence's promise, or nil: the newest
// holder's write must be the last, and every holder must have either
// written or been refused as stale.
func (r race) violation() error {
	for token, err := range r.errs {
		if err != nil && !errors.Is(err, fence.ErrStale) {
			return fmt.Errorf("the holder of token %d failed, neither writing nor refused as stale: %w", token, err)
		}
	}
	if r.final != 2 {
		return fmt.Errorf("the job's row holds token %d's write, after token 2's", r.final)
	}
	return nil
}

// interleave runs the two holders' transactions: first fences, then second
// starts fencing and waits for first's row lock; first writes and commits,
// and second goes on (writing and committing, or refused).
func interleave(t *testing.T, db *sql.DB, first, second int64) race {
	t.Helper()
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE TABLE job_state (id int PRIMARY KEY, written_by bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	write := func(tx *sql.Tx, token int64) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO job_state VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET written_by = excluded.written_by", token)
		return err
	}
	// holder runs one holder's transaction on a connection of its own;
	// fenced is closed once its fence has returned.
	holder := func(conn *sql.Conn, token int64, fenced chan<- error, proceed <-chan struct{}) error {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		err = fence.Check(ctx, tx, fence.Postgres, "nightly", token)
		if fenced != nil {
			fenced <- err
		}
		if err != nil {
			return err
		}
		if proceed != nil {
			<-proceed
		}
		if err := write(tx, token); err != nil {
			return err
		}
		return tx.Commit()
	}
	connA, connB := conn(t, db), conn(t, db)
	var pidB int
	if err := connB.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pidB); err != nil {
		t.Fatal(err)
	}
	errs := map[int64]error{}
	fencedA, proceedA, doneA := make(chan error, 1), make(chan struct{}), make(chan error, 1)
	release := sync.OnceFunc(func() { close(proceedA) })
	t.Cleanup(release) // before the connections close, should the test end early
	go func() { doneA <- holder(connA, first, fencedA, proceedA) }()
	if err := <-fencedA; err != nil {
		t.Fatalf("the first holder's fence (token %d): %v", first, err)
	}
	doneB := make(chan error, 1)
	go func() { doneB <- holder(connB, second, nil, nil) }()
	waitForLock(t, db, pidB)
	release()
	errs[first] = <-doneA
	errs[second] = <-doneB
	var final int64
	if err := db.QueryRowContext(ctx, "SELECT written_by FROM job_state WHERE id = 1").Scan(&final); err != nil {
		t.Fatal(err)
	}
	return race{errs: errs, final: final}
}

// conn is a connection of db's own for the test.
func conn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitForLock waits until the backend pid waits for a lock (the fence's
// row, held by the other holder's transaction).
func waitForLock(t *testing.T, db *sql.DB, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		var waiting bool
		err := db.QueryRowContext(ctx, "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		if err != nil {
			t.Fatalf("backend %d waiting for the fence's lock: %v", pid, err)
		}
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("backend %d never waited for the fence's lock", pid)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
