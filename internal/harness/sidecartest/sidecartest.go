// Package sidecartest serves a sidecar in a test's own process: the
// sidecar package's Server over a store the test chose, migrated, behind
// an httptest.Server on 127.0.0.1 that closes when the test ends. Tests of
// the clients (the Go client, the operator commands, the binary's verbs)
// use it to ask a real sidecar without starting a process.
package sidecartest

import (
	"net/http/httptest"
	"testing"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar"
)

// Serve starts a sidecar over store with opts (their Store set to store),
// migrates the store, and returns the server, closed when t ends.
func Serve(t testing.TB, store leasecore.Store, opts sidecar.Options) *httptest.Server {
	t.Helper()
	opts.Store = store
	srv, err := sidecar.New(opts)
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
