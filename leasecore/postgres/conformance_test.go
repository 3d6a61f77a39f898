package postgres_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/postgres"
	"github.com/leasehold/leasehold/leasecore/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	shared := pgtest.NewDatabase(t)
	var urls sync.Map // *postgres.Store → its database's URL, for RewindHistory
	storetest.Exercise(t, storetest.Driver{
		Open: func(t *testing.T) leasecore.Store {
			st := openMigrated(t, shared)
			urls.Store(st, shared)
			return st
		},
		OpenUnmigrated: func(t *testing.T) leasecore.Store {
			url := pgtest.NewDatabase(t)
			st := open(t, url)
			urls.Store(st, url)
			return st
		},
		OpenUnreachable: func(t *testing.T) leasecore.Store {
			return open(t, pgtest.ClosedURL(t))
		},
		HistoryFeed: true,
		RewindHistory: func(t *testing.T, st leasecore.Store, to int64) {
			url, ok := urls.Load(st)
			if !ok {
				t.Fatalf("rewind: %T is not a store this test opened", st)
			}
			rewindHistory(t, url.(string), to)
		},
	})
}

// rewindHistory puts the history of the database at url back as restoring
// a dump taken when its newest event was to would: the later events are
// gone and the identity sequence says to (pg_dump saves its value with
// setval), so ids above it are handed out again.
func rewindHistory(t *testing.T, url string, to int64) {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("rewind: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `DELETE FROM leasehold_history WHERE id > $1`, to); err != nil {
		t.Fatalf("rewind: %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT CASE WHEN $1::bigint > 0
	    THEN setval(pg_get_serial_sequence('leasehold_history', 'id'), $1::bigint)
	    ELSE setval(pg_get_serial_sequence('leasehold_history', 'id'), 1, false) END`, to); err != nil {
		t.Fatalf("rewind: %v", err)
	}
}

// open opens a store on url. The caller (or the conformance suite) closes it.
func open(t testing.TB, url string) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return st
}

// openMigrated opens a store on url, migrates it, and closes it when t ends
// (Close is idempotent, so a caller may close it earlier).
func openMigrated(t testing.TB, url string) *postgres.Store {
	t.Helper()
	st := open(t, url)
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return st
}
