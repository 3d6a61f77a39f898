package client_test

import (
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/leasecore"
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
			f(t, testsidecar.OpenStore(t, s.url(t)))
		})
	}
}

// serve starts a migrated sidecar over st behind httptest and returns it.
func serve(t *testing.T, st leasecore.Store, o sidecar.Options) *httptest.Server {
	t.Helper()
	o.Store = st
	return testsidecar.Serve(t, o)
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
