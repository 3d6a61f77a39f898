package cli

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lockedbuf"
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

	store, err := storeurl.Open(t.Context(), url)
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
