// Package storeurl opens a leasecore.Store from the one URL that selects a
// store everywhere in leasehold (sidecar flag and env, provider attribute, Go
// API): sqlite:PATH or postgres://… (postgresql:// too).
package storeurl

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/internal/redact"
	"github.com/leasehold/leasehold/leasecore/postgres"
	"github.com/leasehold/leasehold/leasecore/sqlite"
)

// Default is the embedded store used when none is configured.
const Default = "sqlite:./leasehold.db"

// Open opens the store that raw names. It does not migrate: call Migrate on
// the result (leasehold serve does so at start). Its error holds no
// credential from raw (see Redact).
func Open(ctx context.Context, raw string) (leasecore.Store, error) {
	s, err := open(ctx, raw)
	if err != nil {
		return nil, redact.Error(err)
	}
	return s, nil
}

func open(ctx context.Context, raw string) (leasecore.Store, error) {
	switch {
	case strings.HasPrefix(raw, "sqlite:"):
		path, _ := SQLitePath(raw)
		if path == "" {
			return nil, fmt.Errorf("store %q: sqlite: needs a file path, as in %s", Redact(raw), Default)
		}
		return sqlite.Open(ctx, path)
	case strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://"):
		return postgres.Open(ctx, raw)
	default:
		return nil, fmt.Errorf("store %q: must be sqlite:PATH or postgres://USER@HOST:PORT/DB", Redact(raw))
	}
}

// Kind names the driver of a store that Open returns: "sqlite" or
// "postgres"; "" for any other leasecore.Store.
func Kind(s leasecore.Store) string {
	switch s.(type) {
	case *sqlite.Store:
		return "sqlite"
	case *postgres.Store:
		return "postgres"
	default:
		return ""
	}
}

// SQLitePath returns the file path of an sqlite: URL, as Open reads it, and
// whether raw is one.
func SQLitePath(raw string) (string, bool) {
	path, ok := strings.CutPrefix(raw, "sqlite:")
	if !ok {
		return "", false
	}
	return strings.TrimPrefix(path, "//"), true // sqlite:///abs/path and sqlite://rel both read as paths
}

// Redact masks every credential in s: a store URL or connection string of
// any shape (a userinfo password, with one host or several; a password or
// sslpassword query parameter in any case; password=… in a key=value
// string), whether it parses or not, or any text that quotes one, such as a
// driver's error. Everything leasehold logs or answers about a store passes
// through it.
func Redact(s string) string { return redact.String(s) }

// RedactError is err with its text passed through Redact; errors.Is and
// errors.As still see its causes.
func RedactError(err error) error { return redact.Error(err) }

// Unrecoverable reports whether err, from a store's Migrate or Ping, is a
// failure that waiting does not heal (an SQLite file that cannot be opened
// or written, is not a database, or was deleted or replaced while open), as
// opposed to a store that is down for now. See sqlite.Unrecoverable.
func Unrecoverable(err error) bool { return sqlite.Unrecoverable(err) }

// RedactAttr is a slog.HandlerOptions.ReplaceAttr that passes every string
// and error value through Redact, so that no log line holds a credential,
// whatever logged it.
func RedactAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(Redact(a.Value.String()))
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			a.Value = slog.StringValue(Redact(err.Error()))
		}
	}
	return a
}
