// Package testsidecar serves a sidecar inside a test's own process, for the
// tests of the packages that talk to one (the Go client, `leasehold run`,
// the operator commands): a migrated sidecar.Server behind httptest on
// loopback TCP or on a Unix socket, a store that closes with the test, and
// waiting for a condition. A real `leasehold serve` process is
// internal/harness/serveproc's.
package testsidecar

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar"
)

// OpenStore opens the store at url, closed when t ends.
func OpenStore(t testing.TB, url string) leasecore.Store {
	t.Helper()
	st, err := storeurl.Open(context.Background(), storeurl.MustParse(url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// SQLiteURL is a fresh SQLite store's URL in t's temporary directory.
func SQLiteURL(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db")
}

// Handler is a migrated sidecar over o.Store with o's options.
func Handler(t testing.TB, o sidecar.Options) http.Handler {
	t.Helper()
	srv, err := sidecar.New(o)
	if err != nil {
		t.Fatal(err)
	}
	// After the server's own Cleanup (registered later, run earlier), and
	// before its store's Close (registered earlier): the streams end and
	// the watch leaves the store before it closes.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.CloseStreams(ctx); err != nil {
			t.Errorf("closing the sidecar's streams: %v", err)
		}
	})
	if err := srv.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return srv.Handler()
}

// Serve serves a migrated sidecar with options o on loopback TCP, until t
// ends.
func Serve(t testing.TB, o sidecar.Options) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(Handler(t, o))
	t.Cleanup(hs.Close)
	return hs
}

// ServeSocket serves h on a Unix socket until t ends, and returns the
// address clients are given, unix:PATH.
func ServeSocket(t testing.TB, h http.Handler) string {
	t.Helper()
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
	hs := httptest.NewUnstartedServer(h)
	hs.Listener = ln
	hs.Start()
	t.Cleanup(hs.Close)
	return "unix:" + path
}

// WaitFor polls cond until it holds, failing t after 30 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
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
