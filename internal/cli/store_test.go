package cli

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

func TestStoreConfigFlags(t *testing.T) {
	t.Parallel()
	cfg := DefaultStoreConfig()
	if cfg.Store != storeurl.Default || cfg.LogFormat != "text" {
		t.Fatalf("default %+v", cfg)
	}
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--store", "sqlite:/x.db", "--log-format", "json"}); err != nil {
		t.Fatal(err)
	}
	if cfg != (StoreConfig{Store: "sqlite:/x.db", LogFormat: "json"}) {
		t.Errorf("parsed %+v", cfg)
	}
	if err := fs.Parse([]string{"--listen", ":1"}); err == nil {
		t.Error("a store verb accepted --listen")
	}
}

// TestMigrateAndPrune: migrate creates the schema; prune runs a pass, or
// skips it while another pruner holds the prune lease.
func TestMigrateAndPrune(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	url := "sqlite:" + path
	var logs lockedbuf.Buffer
	log, _ := NewLogger("text", &logs)
	if err := Migrate(t.Context(), url, log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil || !strings.Contains(logs.String(), "store migrated") {
		t.Fatalf("after migrate: %v\n%s", err, logs.String())
	}
	if err := Prune(t.Context(), url, log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "pruned lease history") {
		t.Fatalf("prune did not say it pruned:\n%s", logs.String())
	}

	store, err := storeurl.Open(t.Context(), storeurl.MustParse(url))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Claim(t.Context(), leasecore.ClaimParams{Task: leasecore.PruneTask, Owner: "another pruner", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := Prune(t.Context(), url, log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "another pruner holds the prune lease") {
		t.Errorf("prune did not skip while another pruner held the lease:\n%s", logs.String())
	}
}

// TestStoreVerbsFail: a store that cannot be opened fails the verb with an
// error that names it, without its password.
func TestStoreVerbsFail(t *testing.T) {
	t.Parallel()
	discard := slog.New(slog.DiscardHandler)
	missing := "sqlite:" + filepath.Join(t.TempDir(), "no", "such", "dir", "leasehold.db")
	for name, verb := range map[string]func(context.Context, string, *slog.Logger) error{"migrate": Migrate, "prune": Prune} {
		if err := verb(t.Context(), missing, discard); err == nil || !strings.Contains(err.Error(), "store "+missing) {
			t.Errorf("%s on a missing directory: %v, want an error naming the store", name, err)
		}
	}
	err := Migrate(t.Context(), "postgres://leasehold:s3cret@127.0.0.1:notaport/db", discard)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("migrate of a bad URL: %v, want an error without the password", err)
	}
}

// TestPruneRefusesMissingStore: prune only makes sense on a store that
// exists. A missing SQLite file is refused with an error naming its path and
// is not created; a database without the leasehold schema (an empty SQLite
// file, a fresh PostgreSQL database) is refused and left without one.
// Migrate creates both, after which prune works.
func TestPruneRefusesMissingStore(t *testing.T) {
	t.Parallel()
	discard := slog.New(slog.DiscardHandler)
	dir := t.TempDir()

	missing := filepath.Join(dir, "leasehold.db")
	err := Prune(t.Context(), "sqlite:"+missing, discard)
	if err == nil || !strings.Contains(err.Error(), "no database file at "+missing) || !strings.Contains(err.Error(), "leasehold migrate") {
		t.Errorf("prune of a missing file: %v, want an error naming %s and how to create it", err, missing)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("prune created %s", missing)
	}

	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil { // an empty file is an empty SQLite database
		t.Fatal(err)
	}
	urls := map[string]string{"sqlite": "sqlite:" + empty}
	if os.Getenv(pgtest.EnvURL) != "" || os.Getenv("CI") != "" {
		urls["postgres"] = pgtest.NewDatabase(t)
	}
	for name, url := range urls {
		err := Prune(t.Context(), url, discard)
		if err == nil || !strings.Contains(err.Error(), "has no leasehold schema") || !strings.Contains(err.Error(), "store "+storeurl.Redact(url)) {
			t.Errorf("%s: prune of a store without the schema: %v, want an error naming the store", name, err)
		}
		store, err := storeurl.Open(t.Context(), storeurl.MustParse(url))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Get(t.Context(), "t"); !errors.Is(err, leasecore.ErrSchemaMissing) {
			t.Errorf("%s: after the refused prune, a read gives %v, want the schema still missing", name, err)
		}
		store.Close()
		if err := Migrate(t.Context(), url, discard); err != nil {
			t.Fatal(err)
		}
		if err := Prune(t.Context(), url, discard); err != nil {
			t.Errorf("%s: prune after migrate: %v", name, err)
		}
	}
}

// TestGrantRuntimeRefused: --grant-runtime names roles by leasehold's rule,
// and needs a store with roles: an SQLite store is refused, naming its
// kind, and its file is not created.
func TestGrantRuntimeRefused(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"team-a", "9x", "a b", "a,,b"} {
		if _, err := ParseRoles(bad); err == nil || !strings.Contains(err.Error(), "--grant-runtime") {
			t.Errorf("ParseRoles(%q): %v, want an error naming --grant-runtime", bad, err)
		}
	}
	if roles, err := ParseRoles(" team_a, team_b "); err != nil || len(roles) != 2 || roles[0] != "team_a" || roles[1] != "team_b" {
		t.Errorf("ParseRoles: %q, %v", roles, err)
	}
	if roles, err := ParseRoles(""); err != nil || roles != nil {
		t.Errorf("ParseRoles of nothing: %q, %v", roles, err)
	}
	file := filepath.Join(t.TempDir(), "leasehold.db")
	err := MigrateGranting(t.Context(), "sqlite:"+file, []string{"team_a"}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "is sqlite, which has no database roles") {
		t.Errorf("--grant-runtime on SQLite: %v, want refused naming the store's kind", err)
	}
	if _, err := os.Stat(file); err == nil {
		t.Errorf("the refused migration created %s", file)
	}
}
