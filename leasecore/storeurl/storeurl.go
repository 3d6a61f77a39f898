// Package storeurl opens a leasecore.Store from the one URL that selects a
// store everywhere in leasehold (sidecar flag and env, provider attribute, Go
// API): sqlite:PATH or postgres://… (postgresql:// too).
package storeurl

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/postgres"
	"github.com/leasehold/leasehold/leasecore/sqlite"
)

// Default is the embedded store used when none is configured.
const Default = "sqlite:./leasehold.db"

// Open opens the store that raw names. It does not migrate: call Migrate on
// the result (leasehold serve does so at start).
func Open(ctx context.Context, raw string) (leasecore.Store, error) {
	switch {
	case strings.HasPrefix(raw, "sqlite:"):
		path := strings.TrimPrefix(raw, "sqlite:")
		path = strings.TrimPrefix(path, "//") // sqlite:///abs/path and sqlite://rel both read as paths
		if path == "" {
			return nil, fmt.Errorf("store %q: sqlite: needs a file path, as in %s", raw, Default)
		}
		return sqlite.Open(ctx, path)
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return postgres.Open(ctx, raw)
	default:
		return nil, fmt.Errorf("store %q: must be sqlite:PATH or postgres://USER@HOST:PORT/DB", Redact(raw))
	}
}

// Redact hides a password in a store URL so that it can be logged.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
