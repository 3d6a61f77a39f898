package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// StoreConfig is what the one-shot store verbs, `leasehold migrate` and
// `leasehold prune`, run with.
type StoreConfig struct {
	// Store is the store URL: sqlite:PATH or postgres://…
	Store string
	// LogFormat is text or json.
	LogFormat string
}

// DefaultStoreConfig returns the configuration of a store verb with no flags.
func DefaultStoreConfig() StoreConfig {
	return StoreConfig{Store: storeurl.Default, LogFormat: "text"}
}

// RegisterFlags defines the store verbs' flags on fs, with c's values as
// defaults.
func (c *StoreConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Store, "store", c.Store, "store `URL`: sqlite:PATH or postgres://USER@HOST:PORT/DB")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log `format`: text or json")
}

// MigrateTimeout bounds `leasehold migrate`.
const MigrateTimeout = time.Minute

// Migrate runs `leasehold migrate`: it opens the store at storeURL, applies
// its migrations once (no retry) and closes it.
func Migrate(ctx context.Context, storeURL string, log *slog.Logger) error {
	storeName := storeurl.Redact(storeURL)
	ctx, cancel := context.WithTimeout(ctx, MigrateTimeout)
	defer cancel()
	store, err := openMigrated(ctx, storeURL)
	if err != nil {
		return err
	}
	store.Close()
	log.Info("store migrated", "store", storeName)
	return nil
}

// PruneTimeout bounds `leasehold prune`.
const PruneTimeout = 10 * time.Minute

// Prune runs `leasehold prune`: it opens the store at storeURL, migrates it,
// and runs one pruning pass guarded by the prune lease (skipped when another
// pruner holds it), then closes the store.
func Prune(ctx context.Context, storeURL string, log *slog.Logger) error {
	storeName := storeurl.Redact(storeURL)
	ctx, cancel := context.WithTimeout(ctx, PruneTimeout)
	defer cancel()
	store, err := openMigrated(ctx, storeURL)
	if err != nil {
		return err
	}
	defer store.Close()
	result, n, err := leasecore.NewPruner(leasecore.New(store), 0, leasecore.NewOwner(), log).Once(ctx)
	if err != nil {
		return fmt.Errorf("prune store %s: %w", storeName, err)
	}
	switch result {
	case leasecore.PruneSkipped:
		log.Info("another pruner holds the prune lease; it prunes this round", "lease", leasecore.PruneTask, "store", storeName)
	default:
		log.Info("pruned lease history", "result", string(result), "deleted", n, "store", storeName)
	}
	return nil
}

// openMigrated opens the store at storeURL and applies its migrations once
// (no retry); the caller closes it.
func openMigrated(ctx context.Context, storeURL string) (leasecore.Store, error) {
	storeName := storeurl.Redact(storeURL)
	store, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", storeName, err)
	}
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		return nil, fmt.Errorf("migrate store %s: %w", storeName, err)
	}
	return store, nil
}
