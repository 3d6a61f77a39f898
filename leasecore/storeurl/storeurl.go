// Package storeurl opens a leasecore.Store from the one URL that selects a
// store everywhere in leasehold (sidecar flag and env, provider attribute, Go
// API): sqlite:PATH or postgres://… (postgresql:// too).
//
// A store URL is parsed once, by Parse, into a URL, which masks its
// password wherever it is printed (String, fmt, slog, JSON), as
// net/url.URL.Redacted does; only Secret, which Open calls, gives the
// connection string itself. So leasehold passes URLs around, never the raw
// string.
//
// Pattern masking (Redact, RedactError, RedactAttr) remains, as the last
// net at the boundary where text leaves the process, for what no type
// guards: errors of the PostgreSQL driver, which may quote a connection
// string (pgx masks only the password shapes it recognises), and any
// string a future change logs by mistake. It is not how a store is
// printed.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/internal/redact"
	"github.com/leasehold/leasehold/leasecore/migration"
	"github.com/leasehold/leasehold/leasecore/postgres"
	"github.com/leasehold/leasehold/leasecore/sqlite"
)

// Default is the embedded store used when none is configured.
const Default = "sqlite:./leasehold.db"

// URL is a store URL parsed once, by Parse: sqlite:PATH or postgres://….
// Every way of printing it shows its password masked, as
// net/url.URL.Redacted does: String, the fmt verbs (Format, GoString),
// slog (LogValue) and text and JSON marshalling. Only Secret gives the
// connection string itself, and only Open calls it. The zero URL names no
// store.
type URL struct {
	kind   string // "sqlite" or "postgres"
	secret string // as given
	shown  string // secret with every credential masked
}

// Parse reads raw as a store URL: sqlite:PATH, or a PostgreSQL URL
// (postgres:// or postgresql://) that the PostgreSQL driver accepts. Its
// error names the rule raw breaks and never quotes raw unmasked: a text
// that does not parse is the one most likely to be logged.
func Parse(raw string) (URL, error) {
	switch {
	case strings.HasPrefix(raw, "sqlite:"):
		u := URL{kind: "sqlite", secret: raw, shown: raw} // an SQLite URL holds no credential
		if path, _ := u.SQLitePath(); path == "" {
			return URL{}, fmt.Errorf("store URL %s: sqlite: needs a file path, as in %s", raw, Default)
		}
		return u, nil
	case strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://"):
		if err := postgres.CheckURL(raw); err != nil {
			return URL{}, err
		}
		return URL{kind: "postgres", secret: raw, shown: maskPostgres(raw)}, nil
	default:
		return URL{}, CheckScheme(raw)
	}
}

// CheckScheme reports whether raw starts as a store URL does (sqlite:,
// postgres:// or postgresql://), without parsing the rest; Parse says
// whether the rest is right. Its error does not quote raw, which may hold
// a password in a shape no parse here recognises (a key=value connection
// string, another scheme, a typo); it names raw's scheme if it has one.
func CheckScheme(raw string) error {
	for _, prefix := range []string{"sqlite:", "postgres://", "postgresql://"} {
		if strings.HasPrefix(raw, prefix) {
			return nil
		}
	}
	what := ""
	if i := strings.Index(raw, "://"); i > 0 && validScheme(raw[:i]) {
		what = " (scheme " + raw[:i] + ")"
	} else if strings.Contains(raw, "=") {
		what = " (a key=value connection string)"
	} else if raw == "" {
		what = " (empty)"
	}
	return fmt.Errorf("store URL%s must be sqlite:PATH or postgres://USER@HOST:PORT/DB", what)
}

// validScheme reports whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, '+', '-' or '.'): safe to quote, it holds no password.
func validScheme(s string) bool {
	for i, c := range s {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return s != ""
}

// maskPostgres masks the password of a PostgreSQL URL that the driver
// accepted, read as the driver (like libpq) reads it: the userinfo ends at
// the '@' before the first '/' (the driver refuses a URL with more than
// one), its password starts after its first ':'; the query starts at the
// first '?' after the userinfo, and every parameter whose key,
// percent-decoded, holds "pass" in any case (password, sslpassword) has
// its value masked.
func maskPostgres(raw string) string {
	i := strings.Index(raw, "://") + len("://")
	scheme, rest := raw[:i], raw[i:]
	var b strings.Builder
	b.WriteString(scheme)
	if at := strings.IndexAny(rest, "@/"); at >= 0 && rest[at] == '@' {
		if user, _, ok := strings.Cut(rest[:at], ":"); ok {
			b.WriteString(user + ":" + Mask)
		} else {
			b.WriteString(rest[:at])
		}
		b.WriteByte('@')
		rest = rest[at+1:]
	}
	base, query, ok := strings.Cut(rest, "?")
	b.WriteString(base)
	if !ok {
		return b.String()
	}
	pairs := strings.Split(query, "&")
	for i, p := range pairs {
		key, _, hasValue := strings.Cut(p, "=")
		decoded, err := url.PathUnescape(key)
		if err != nil {
			decoded = key
		}
		if strings.Contains(strings.ToLower(decoded), "pass") {
			pairs[i] = key + "=" + Mask
		} else if !hasValue && err != nil {
			pairs[i] = Mask // cannot happen for a URL the driver accepted: mask rather than guess
		}
	}
	b.WriteByte('?')
	b.WriteString(strings.Join(pairs, "&"))
	return b.String()
}

// Mask is what a URL shows in place of a password.
const Mask = redact.Mask

// MustParse is Parse for a URL known to be valid (a constant, a test's):
// it panics, naming no credential, where Parse fails.
func MustParse(raw string) URL {
	u, err := Parse(raw)
	if err != nil {
		panic(err)
	}
	return u
}

// String is the URL with its password masked.
func (u URL) String() string { return u.shown }

// GoString is what %#v prints: the masked URL, never the fields.
func (u URL) GoString() string { return "storeurl.URL(" + strconv.Quote(u.shown) + ")" }

// Format prints the masked URL for every verb and flag (%v, %+v, %s, %q,
// %#v as GoString), so that no fmt verb reaches the fields.
func (u URL) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = io.WriteString(f, u.GoString())
	case verb == 'q':
		_, _ = io.WriteString(f, strconv.Quote(u.shown))
	default:
		_, _ = io.WriteString(f, u.shown)
	}
}

// LogValue makes slog log the masked URL.
func (u URL) LogValue() slog.Value { return slog.StringValue(u.shown) }

// MarshalText is the masked URL, for encoding/json, encoding/xml and the
// like. There is no UnmarshalText: a masked URL opens nothing.
func (u URL) MarshalText() ([]byte, error) { return []byte(u.shown), nil }

// Secret is the connection string itself, password and all. Only Open
// calls it; anything that prints, logs or answers uses the URL.
func (u URL) Secret() string { return u.secret }

// IsZero reports whether u names no store (it did not come from Parse).
func (u URL) IsZero() bool { return u.kind == "" }

// Kind is "sqlite" or "postgres": the driver Open uses for u.
func (u URL) Kind() string { return u.kind }

// SQLitePath returns the file path of an sqlite: URL, as Open reads it, and
// whether u is one.
func (u URL) SQLitePath() (string, bool) { return SQLitePath(u.secret) }

// Open opens the store u names. It does not migrate: call Migrate on the
// result (leasehold serve does so at start). Its error holds no credential
// from u: the drivers mask what their own errors quote.
func Open(ctx context.Context, u URL) (leasecore.Store, error) {
	switch u.kind {
	case "sqlite":
		path, _ := u.SQLitePath()
		return sqlite.Open(ctx, path)
	case "postgres":
		return postgres.Open(ctx, u.Secret())
	default:
		return nil, errors.New("store URL: none given (sqlite:PATH or postgres://USER@HOST:PORT/DB)")
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
// whether raw is one. An sqlite: URL holds no credential.
func SQLitePath(raw string) (string, bool) {
	path, ok := strings.CutPrefix(raw, "sqlite:")
	if !ok {
		return "", false
	}
	return strings.TrimPrefix(path, "//"), true // sqlite:///abs/path and sqlite://rel both read as paths
}

// Redact masks every credential it can recognise in s, any text that may
// quote a store URL or connection string, by pattern (see the redact
// package). It is the last net, not the way to print a store: a store is a
// URL, which masks itself; Redact is for texts that quote one the type did
// not guard, such as a driver's error, at the boundary where they leave
// the process (a log handler, a printed error).
func Redact(s string) string { return redact.String(s) }

// Unrecoverable reports whether err, from a store's Migrate or Ping, is a
// failure that waiting does not heal (an SQLite file that cannot be opened
// or written, is not a database, or was deleted or replaced while open), as
// opposed to a store that is down for now. See sqlite.Unrecoverable. A
// store whose schema is newer than this build may serve
// (*migration.TooNewError) is one too: only a newer leasehold heals it.
func Unrecoverable(err error) bool {
	var tooNew *migration.TooNewError
	return sqlite.Unrecoverable(err) || errors.As(err, &tooNew)
}

// RedactAttr is a slog.HandlerOptions.ReplaceAttr that passes every string
// and error value through Redact, so that no log line holds a credential,
// whatever logged it: the last net under URL, for what slips past the type
// (a driver error that quotes a connection string, a raw string someone
// logged).
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
