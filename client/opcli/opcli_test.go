package opcli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/client/opcli"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar"
	"github.com/leasehold/leasehold/sidecar/api"
)

// result is one run of a verb.
type result struct {
	code           int
	stdout, stderr string
}

// leasehold runs `leasehold VERB ARGS...` in process, with env as the
// environment.
func leasehold(t *testing.T, env map[string]string, verb string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := opcli.Main(t.Context(), verb, args, func(k string) string { return env[k] }, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func (r result) expect(t *testing.T, code int, stdout ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
		}
	}
}

// decode decodes stdout, which must be one JSON document, into a T.
func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("stdout is not one %T: %v\n%s", v, err, r.stdout)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON document:\n%s", r.stdout)
	}
	return v
}

// sidecarOn starts a migrated sidecar over store behind httptest, with
// token as its bearer token (none when empty).
func sidecarOn(t *testing.T, store leasecore.Store, token string, requireDeclared bool) *httptest.Server {
	t.Helper()
	srv, err := sidecar.New(sidecar.Options{Store: store, Token: []byte(token), RequireDeclared: requireDeclared})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs
}

// sidecarOnSocket is sidecarOn, serving on a Unix socket; it returns the
// sidecar's address, unix:PATH.
func sidecarOnSocket(t *testing.T, store leasecore.Store) string {
	t.Helper()
	srv, err := sidecar.New(sidecar.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "lh") // short: a socket's path must fit in about 100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "leasehold.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Listener = ln
	hs.Start()
	t.Cleanup(hs.Close)
	return "unix:" + path
}

// openStore opens the store at url, closed when t ends.
func openStore(t *testing.T, url string) leasecore.Store {
	t.Helper()
	store, err := storeurl.Open(context.Background(), storeurl.MustParse(url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// migrated returns url after creating its schema.
func migrated(t *testing.T, url string) string {
	t.Helper()
	if err := cli.Migrate(t.Context(), url, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return url
}

func sqliteURL(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db") }

// target is a way to reach a fresh store: open returns the flags that
// choose it.
type target struct {
	name string
	kind api.StoreStatusKind
	open func(t *testing.T) []string
}

// targets are every way to reach a store: a sidecar over SQLite, SQLite
// directly, a sidecar over SQLite on a Unix socket, a sidecar over
// PostgreSQL, PostgreSQL directly.
var targets = []target{
	{"sidecar/sqlite", api.Sqlite, func(t *testing.T) []string {
		return []string{"--addr", sidecarOn(t, openStore(t, sqliteURL(t)), "", false).URL}
	}},
	{"store/sqlite", api.Sqlite, func(t *testing.T) []string { return []string{"--store", migrated(t, sqliteURL(t))} }},
	{"socket/sqlite", api.Sqlite, func(t *testing.T) []string {
		return []string{"--addr", sidecarOnSocket(t, openStore(t, sqliteURL(t)))}
	}},
	{"sidecar/postgres", api.Postgres, func(t *testing.T) []string {
		return []string{"--addr", sidecarOn(t, openStore(t, pgtest.NewDatabase(t)), "", false).URL}
	}},
	{"store/postgres", api.Postgres, func(t *testing.T) []string { return []string{"--store", migrated(t, pgtest.NewDatabase(t))} }},
}

// eachTarget runs f on each target, as parallel subtests.
func eachTarget(t *testing.T, f func(t *testing.T, conn []string, kind api.StoreStatusKind)) {
	t.Helper()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			f(t, tg.open(t), tg.kind)
		})
	}
}

// with appends conn to args.
func with(conn []string, args ...string) []string { return append(args, conn...) }
