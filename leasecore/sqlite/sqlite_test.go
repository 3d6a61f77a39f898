package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	shared := filepath.Join(t.TempDir(), "leasehold.db")
	storetest.Exercise(t, storetest.Driver{
		Open: func(t *testing.T) leasecore.Store {
			return openMigrated(t, shared)
		},
		OpenUnmigrated: func(t *testing.T) leasecore.Store {
			return openStore(t, filepath.Join(t.TempDir(), "unmigrated.db"))
		},
		OpenUnreachable: func(t *testing.T) leasecore.Store {
			return openStore(t, filepath.Join(t.TempDir(), "no-such-dir", "leasehold.db"))
		},
		HistoryFeed:   true,
		RewindHistory: rewindHistory,
	})
}

// rewindHistory puts st's history back as a restore in place (SQLite's
// backup API writing an older copy into the same file) would: the events
// after to are gone and sqlite_sequence says to, so ids above it are
// handed out again. It writes through a connection of its own.
func rewindHistory(t *testing.T, st leasecore.Store, to int64) {
	t.Helper()
	s, ok := st.(*Store)
	if !ok {
		t.Fatalf("rewind: %T is not this driver's store", st)
	}
	c, err := msqlite.NewConnector(dataSourceName(s.file.path))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("rewind: %v", err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, q := range []string{
		`DELETE FROM leasehold_history WHERE id > ?`,
		`UPDATE sqlite_sequence SET seq = ? WHERE name = 'leasehold_history'`,
	} {
		if _, err := tx.ExecContext(ctx, q, to); err != nil {
			t.Fatalf("rewind: %s: %v", q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("rewind: %v", err)
	}
}

// openStore opens a store over path and closes it when t ends.
func openStore(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openMigrated opens a store over path and migrates it.
func openMigrated(t testing.TB, path string) *Store {
	t.Helper()
	s := openStore(t, path)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate(%q): %v", path, err)
	}
	return s
}

func TestOpenDoesNotTouchTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing", "leasehold.db")
	s := openStore(t, path)
	ctx := context.Background()

	checks := map[string]error{
		"ping":    s.Ping(ctx),
		"migrate": s.Migrate(ctx),
	}
	_, checks["claim"] = s.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Second})
	_, checks["renew"] = s.Renew(ctx, leasecore.RenewParams{Task: "t", Owner: "o"})
	_, checks["release"] = s.Release(ctx, leasecore.ReleaseParams{Task: "t", Owner: "o"})
	_, checks["get"] = s.Get(ctx, "t")
	_, checks["list"] = s.List(ctx, leasecore.ListParams{})
	for op, err := range checks {
		assertUnavailable(t, op, err, "unable to open database file")
	}
}

func TestUnmigratedSaysSchemaMissing(t *testing.T) {
	t.Parallel()
	s := openStore(t, filepath.Join(t.TempDir(), "leasehold.db"))
	ctx := context.Background()
	errPing := s.Ping(ctx)
	assertUnavailable(t, "ping", errPing, "schema is missing")
	_, err := s.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Second})
	assertUnavailable(t, "claim", err, "no such table: leasehold_leases")
	_, errGet := s.Get(ctx, "t")
	assertUnavailable(t, "get", errGet, "schema is missing")
	for op, err := range map[string]error{"ping": errPing, "claim": err, "get": errGet} {
		if !errors.Is(err, leasecore.ErrSchemaMissing) {
			t.Errorf("%s of an unmigrated store: %v, want ErrSchemaMissing", op, err)
		}
	}
}

func TestPingWantsTheLatestSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := openMigrated(t, path)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after Migrate: %v", err)
	}
	// Pretend this build knows one more migration than the file has.
	s.migrations = append(s.migrations[:len(s.migrations):len(s.migrations)], s.migrations[0])
	err := s.Ping(ctx)
	assertUnavailable(t, "ping", err, "schema is older than this build")
	if !errors.Is(err, leasecore.ErrSchemaBehind) {
		t.Errorf("ping of an old schema: %v, want ErrSchemaBehind", err)
	}
}

func TestCallsAfterCloseAreUnavailable(t *testing.T) {
	t.Parallel()
	s := openMigrated(t, filepath.Join(t.TempDir(), "leasehold.db"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := context.Background()
	_, err := s.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Second})
	assertUnavailable(t, "claim", err, "store is closed")
	_, err = s.Release(ctx, leasecore.ReleaseParams{Task: "t", Owner: "o"})
	assertUnavailable(t, "release", err, "store is closed")
	_, err = s.List(ctx, leasecore.ListParams{})
	assertUnavailable(t, "list", err, "store is closed")
	assertUnavailable(t, "migrate", s.Migrate(ctx), "store is closed")
}

func TestCancelledContextIsUnavailable(t *testing.T) {
	t.Parallel()
	s := openMigrated(t, filepath.Join(t.TempDir(), "leasehold.db"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Second})
	assertUnavailable(t, "claim", err, "cancel")
}

// TestLockedFileIsUnavailable holds the file's write lock from a second
// store, as another process would, and checks that a claim that cannot get
// it in time is unavailable, never held.
func TestLockedFileIsUnavailable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	holder := openMigrated(t, path)
	tx, err := holder.writer.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })

	s := openStore(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	t.Cleanup(cancel)
	_, err = s.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Second})
	if errors.Is(err, leasecore.ErrHeld) {
		t.Fatalf("claim on a locked file = %v, want unavailable", err)
	}
	assertUnavailable(t, "claim", err, "")
}

func TestDurabilityPragmas(t *testing.T) {
	t.Parallel()
	s := openMigrated(t, filepath.Join(t.TempDir(), "leasehold.db"))
	ctx := context.Background()
	want := map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "10000"}
	for pragma, value := range want {
		for _, db := range []*sql.DB{s.writer, s.reader} {
			var got string
			if err := db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
				t.Fatalf("PRAGMA %s: %v", pragma, err)
			}
			if !strings.EqualFold(got, value) {
				t.Errorf("PRAGMA %s = %q, want %q", pragma, got, value)
			}
		}
	}
}

func TestPathsThatLookLikeURIs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	for _, name := range []string{"what?.db", "100%.db", "a#b.db", "with space.db"} {
		path := filepath.Join(dir, name)
		s := openMigrated(t, path)
		if _, err := s.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatalf("claim in %q: %v", name, err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("file %q not created where asked: %v", name, err)
		}
	}
}

func assertUnavailable(t *testing.T, op string, err error, detail string) {
	t.Helper()
	var u *leasecore.UnavailableError
	if !errors.As(err, &u) || !errors.Is(err, leasecore.ErrUnavailable) {
		t.Errorf("%s: err = %v (%T), want *leasecore.UnavailableError", op, err, err)
		return
	}
	if u.Op != op {
		t.Errorf("%s: UnavailableError.Op = %q", op, u.Op)
	}
	if !strings.Contains(err.Error(), detail) {
		t.Errorf("%s: err = %q, want it to mention %q", op, err, detail)
	}
}
