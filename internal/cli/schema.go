package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/migration"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// schemaStatuser is a store that can say where its schema stands, reading
// only: both drivers.
type schemaStatuser interface {
	SchemaStatus(ctx context.Context) (migration.Status, error)
}

// SchemaStatus runs `leasehold migrate --status`: it opens the store at
// storeURL, which must exist (an SQLite file is not created), and reports
// where its schema stands against this build, writing nothing.
func SchemaStatus(ctx context.Context, storeURL string) (migration.Status, error) {
	storeName, err := storeurl.Parse(storeURL)
	if err != nil {
		return migration.Status{}, err
	}
	if path, missing := MissingSQLiteFile(storeName); missing {
		return migration.Status{}, leasecore.Unavailable("schema status", fmt.Errorf("store %s: no database file at %s: %s", storeName, path, noStoreHint))
	}
	ctx, cancel := context.WithTimeout(ctx, MigrateTimeout)
	defer cancel()
	store, err := storeurl.Open(ctx, storeName)
	if err != nil {
		return migration.Status{}, fmt.Errorf("open store %s: %w", storeName, err)
	}
	defer store.Close()
	st, err := statusOf(ctx, store)
	if err != nil {
		return migration.Status{}, fmt.Errorf("store %s: %w", storeName, err)
	}
	return st, nil
}

func statusOf(ctx context.Context, store leasecore.Store) (migration.Status, error) {
	s, ok := store.(schemaStatuser)
	if !ok {
		return migration.Status{}, fmt.Errorf("a %s store keeps no schema versions", storeurl.Kind(store))
	}
	return s.SchemaStatus(ctx)
}

// LogNewerSchema logs one line when store, just migrated, has a schema
// newer than this build knows, which it serves because the store's floor
// allows it: the sign of a fleet in the middle of an upgrade (or of a
// rollback). It logs nothing otherwise, nor when the status cannot be read.
func LogNewerSchema(ctx context.Context, store leasecore.Store, storeName storeurl.URL, log *slog.Logger) {
	st, err := statusOf(ctx, store)
	if err != nil || st.Verdict != migration.Newer {
		return
	}
	log.Info("store schema is newer than this leasehold knows; serving it within its floor",
		"store", storeName, "schema", st.Version, "floor", st.Floor, "knows", st.Knows)
}

// RefuseTooNew returns the refusal Migrate would give store when its schema
// was contracted past this build (*migration.TooNewError), for the verbs
// that only read and so migrate nothing; nil otherwise, and when the store
// cannot say.
func RefuseTooNew(ctx context.Context, store leasecore.Store) error {
	st, err := statusOf(ctx, store)
	if err != nil {
		return nil
	}
	return st.Err()
}
