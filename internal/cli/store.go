package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
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
	return MigrateGranting(ctx, storeURL, nil, log)
}

// runtimeGranter is a store that can give runtime roles their privileges
// in its migration's transaction (the PostgreSQL driver's MigrateGranting).
type runtimeGranter interface {
	MigrateGranting(ctx context.Context, runtimeRoles []string) error
}

// MigrateGranting runs `leasehold migrate --grant-runtime ROLE,…`: Migrate,
// and in the same transaction gives each of runtimeRoles exactly the
// privileges a runtime role needs (docs/store-roles.md). It runs as the
// role that owns leasehold's tables. A store without roles (SQLite) refuses
// runtimeRoles, naming its kind.
func MigrateGranting(ctx context.Context, storeURL string, runtimeRoles []string, log *slog.Logger) error {
	storeName, err := storeurl.Parse(storeURL)
	if err != nil {
		return err
	}
	if len(runtimeRoles) == 0 {
		store, err := OpenMigrated(ctx, storeName)
		if err != nil {
			return err
		}
		defer store.Close()
		log.Info("store migrated", "store", storeName)
		LogNewerSchema(ctx, store, storeName, log)
		return nil
	}
	noRoles := func(kind string) error {
		return fmt.Errorf("--grant-runtime: store %s is %s, which has no database roles to grant; it needs a postgres:// store", storeName, kind)
	}
	if _, ok := storeName.SQLitePath(); ok {
		return noRoles("sqlite") // refused before opening, which would create the file
	}
	store, err := storeurl.Open(ctx, storeName)
	if err != nil {
		return fmt.Errorf("open store %s: %w", storeName, err)
	}
	defer store.Close()
	g, ok := store.(runtimeGranter)
	if !ok {
		return noRoles(storeurl.Kind(store))
	}
	ctx, cancel := context.WithTimeout(ctx, MigrateTimeout)
	defer cancel()
	if err := g.MigrateGranting(ctx, runtimeRoles); err != nil {
		return fmt.Errorf("migrate store %s, granting the runtime privileges to %s: %w", storeName, strings.Join(runtimeRoles, ", "), err)
	}
	log.Info("store migrated; runtime privileges granted", "store", storeName, "roles", strings.Join(runtimeRoles, ","))
	return nil
}

// ParseRoles reads the value of --grant-runtime: role names separated by
// commas, each by leasecore.ValidateRoleName's rule. Empty is none.
func ParseRoles(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var roles []string
	for _, r := range strings.Split(list, ",") {
		r = strings.TrimSpace(r)
		if err := leasecore.ValidateRoleName(r); err != nil {
			return nil, fmt.Errorf("--grant-runtime: role %q %s", r, Rule(err))
		}
		roles = append(roles, r)
	}
	return roles, nil
}

// PruneTimeout bounds `leasehold prune`.
const PruneTimeout = 10 * time.Minute

// Prune runs `leasehold prune`: it opens the store at storeURL, which must
// exist already (an SQLite file, a leasehold schema: see openExisting),
// upgrades its schema if it is behind, and runs one pruning pass guarded by
// the prune lease (skipped when another pruner holds it), then closes the
// store.
func Prune(ctx context.Context, storeURL string, log *slog.Logger) error {
	storeName, err := storeurl.Parse(storeURL)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, PruneTimeout)
	defer cancel()
	store, err := openExisting(ctx, storeName, "prune")
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate store %s: %w", storeName, err)
	}
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

// OpenMigrated opens the store at storeName and applies its migrations once
// (no retry, within MigrateTimeout), as `leasehold migrate` does and as the
// verbs that write to a store do first, so that a new SQLite file works at
// once; the caller closes the store.
func OpenMigrated(ctx context.Context, storeName storeurl.URL) (leasecore.Store, error) {
	store, err := storeurl.Open(ctx, storeName)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", storeName, err)
	}
	ctx, cancel := context.WithTimeout(ctx, MigrateTimeout)
	defer cancel()
	// Straight to the store, on purpose: the CLI verbs run no Server, so
	// there is no gate to pass and no metric to time the call with.
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		return nil, fmt.Errorf("migrate store %s: %w", storeName, err)
	}
	return store, nil
}

// noStoreHint is what to do about a verb run on a store that is not there.
const noStoreHint = "check --store (or LEASEHOLD_STORE), or create the store with `leasehold migrate --store URL`"

// openExisting opens the store at storeName for verb, which only makes sense
// on a store that exists: an SQLite file that is missing is refused before
// it is opened (opening would create it), and so is a store without the
// leasehold schema. The caller closes the store.
func openExisting(ctx context.Context, storeName storeurl.URL, verb string) (leasecore.Store, error) {
	if path, missing := MissingSQLiteFile(storeName); missing {
		return nil, fmt.Errorf("store %s: no database file at %s; %s works on an existing store: %s", storeName, path, verb, noStoreHint)
	}
	store, err := storeurl.Open(ctx, storeName)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", storeName, err)
	}
	// A read says whether the schema is there; a store that is merely
	// behind is upgraded by the caller.
	if _, err := store.Get(ctx, leasecore.PruneTask); errors.Is(err, leasecore.ErrSchemaMissing) {
		store.Close()
		return nil, fmt.Errorf("store %s has no leasehold schema; %s works on an existing store: %s", storeName, verb, noStoreHint)
	}
	// A verb that only reads migrates nothing, so it checks here what
	// Migrate would: a store contracted past this build is refused.
	if err := RefuseTooNew(ctx, store); err != nil {
		store.Close()
		return nil, fmt.Errorf("store %s: %w", storeName, err)
	}
	return store, nil
}

// MissingSQLiteFile reports whether u names an SQLite file that does
// not exist, and its path: a verb that only reads refuses it, since opening
// it would create an empty store.
func MissingSQLiteFile(u storeurl.URL) (path string, missing bool) {
	path, ok := u.SQLitePath()
	if !ok || path == "" {
		return path, false
	}
	_, err := os.Stat(path)
	return path, errors.Is(err, fs.ErrNotExist)
}
