package client_test

import (
	"context"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar"
)

// stores are the two stores every test runs on: SQLite always, PostgreSQL
// when LEASEHOLD_TEST_POSTGRES_URL names a server (a failure under CI when
// it does not).
var stores = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.NewDatabase(t) }},
}

// eachStore runs f on a fresh store of each kind, as parallel subtests.
func eachStore(t *testing.T, f func(t *testing.T, st leasecore.Store)) {
	t.Helper()
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			f(t, openStore(t, s.url(t)))
		})
	}
}

func openStore(t *testing.T, url string) leasecore.Store {
	t.Helper()
	st, err := storeurl.Open(context.Background(), storeurl.MustParse(url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// serve starts a migrated sidecar over st behind httptest and returns it.
func serve(t *testing.T, st leasecore.Store, o sidecar.Options) *httptest.Server {
	t.Helper()
	o.Store = st
	srv, err := sidecar.New(o)
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

// newClient is a client of hs.
func newClient(t *testing.T, hs *httptest.Server, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(hs.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitFor polls cond until it holds, failing after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("gave up waiting for %s", what)
		case <-tick.C:
		}
	}
}

// serveSocket starts a migrated sidecar over st on a Unix socket and
// returns its address, unix:PATH.
func serveSocket(t *testing.T, st leasecore.Store) string {
	t.Helper()
	srv, err := sidecar.New(sidecar.Options{Store: st})
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
