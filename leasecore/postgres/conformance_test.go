package postgres_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/postgres"
	"github.com/leasehold/leasehold/leasecore/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	shared := pgtest.NewDatabase(t)
	storetest.Exercise(t, storetest.Driver{
		Open: func(t *testing.T) leasecore.Store {
			return openMigrated(t, shared)
		},
		OpenUnmigrated: func(t *testing.T) leasecore.Store {
			return open(t, pgtest.NewDatabase(t))
		},
		OpenUnreachable: func(t *testing.T) leasecore.Store {
			return open(t, pgtest.ClosedURL(t))
		},
		HistoryFeed: true,
	})
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
