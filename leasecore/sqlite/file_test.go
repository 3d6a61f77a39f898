package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/readonly"
	"github.com/leasehold/leasehold/leasecore"
)

// everyWrite runs each lease write and Ping against s and returns their
// errors by operation; the task's lease was granted to owner "o" with token.
func everyWrite(s *Store, task string, token int64) map[string]error {
	ctx := context.Background()
	errs := map[string]error{"ping": s.Ping(ctx)}
	_, errs["claim"] = s.Claim(ctx, leasecore.ClaimParams{Task: task + "-other", Owner: "o", TTL: time.Minute})
	_, errs["renew"] = s.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "o", Token: token, TTL: time.Minute})
	_, errs["release"] = s.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "o", Token: token})
	return errs
}

// TestDeletedOrReplacedFileIsUnavailable removes the database file under an
// open store, or renames another database over it: every write and Ping is
// then unavailable, never an outcome, and a second store that creates a new
// file on the path does not make the first one grant again.
func TestDeletedOrReplacedFileIsUnavailable(t *testing.T) {
	t.Parallel()
	for name, swap := range map[string]func(t *testing.T, path string){
		"deleted": func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		},
		"replaced": func(t *testing.T, path string) {
			other := filepath.Join(t.TempDir(), "other.db")
			o := openMigrated(t, other)
			if _, err := o.Claim(context.Background(), leasecore.ClaimParams{Task: "t", Owner: "x", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if err := o.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, path); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "leasehold.db")
			s := openMigrated(t, path)
			ctx := context.Background()
			lease, err := s.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Minute})
			if err != nil {
				t.Fatalf("claim before: %v", err)
			}
			swap(t, path)

			for op, err := range everyWrite(s, "t", lease.Token) {
				assertUnavailable(t, op, err, "the database file "+path+" was deleted or replaced while open; restart the sidecar")
				if !Unrecoverable(err) {
					t.Errorf("%s: Unrecoverable(%v) = false", op, err)
				}
			}
			assertUnavailable(t, "migrate", s.Migrate(ctx), "deleted or replaced")

			// A new store on the path works on whatever file is there now;
			// the old one stays refused.
			fresh := openMigrated(t, path)
			if _, err := fresh.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o2", TTL: time.Minute}); err != nil && !errors.Is(err, leasecore.ErrHeld) {
				t.Fatalf("claim on the new file: %v", err)
			}
			_, err = s.Claim(ctx, leasecore.ClaimParams{Task: "fresh", Owner: "o", TTL: time.Minute})
			assertUnavailable(t, "claim", err, "deleted or replaced")
		})
	}
}

// TestUnwritableFileIsNotReady makes the database file, or its directory,
// unwritable: Ping (readiness) and every write are unavailable, and the
// failure is one serve refuses to start on.
func TestUnwritableFileIsNotReady(t *testing.T) {
	t.Parallel()
	for _, what := range []string{"file", "directory"} {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "leasehold.db")
			s := openMigrated(t, path)
			lease, err := s.Claim(context.Background(), leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Minute})
			if err != nil {
				t.Fatalf("claim before: %v", err)
			}
			target := map[string]string{"file": path, "directory": dir}[what]
			readonly.Make(t, target)

			for op, err := range everyWrite(s, "t", lease.Token) {
				assertUnavailable(t, op, err, "not writable by this process")
				if !Unrecoverable(err) {
					t.Errorf("%s: Unrecoverable(%v) = false", op, err)
				}
			}
		})
	}
}

// TestUnrecoverable sorts the failures serve refuses to start on from those
// it waits out.
func TestUnrecoverable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()

	missing := openStore(t, filepath.Join(dir, "no-such-dir", "leasehold.db"))
	if err := missing.Migrate(ctx); !Unrecoverable(err) {
		t.Errorf("missing directory: Unrecoverable(%v) = false", err)
	}

	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte("this is not an SQLite database, but it is long enough to have a header"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := openStore(t, garbage).Migrate(ctx); !Unrecoverable(err) {
		t.Errorf("not a database: Unrecoverable(%v) = false", err)
	}

	path := filepath.Join(dir, "locked.db")
	holder := openMigrated(t, path)
	tx, err := holder.writer.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := openStore(t, path).Migrate(short); err == nil || Unrecoverable(err) {
		t.Errorf("locked file: Migrate = %v, want an error that is not Unrecoverable", err)
	}
}

// BenchmarkFileCheck measures what the guard adds to every write batch:
// one check before it (identity and access) and one after its commit.
func BenchmarkFileCheck(b *testing.B) {
	s := openMigrated(b, filepath.Join(b.TempDir(), "leasehold.db"))
	for b.Loop() {
		if err := s.file.check(true); err != nil {
			b.Fatal(err)
		}
		if err := s.file.check(false); err != nil {
			b.Fatal(err)
		}
	}
}
