package sidecar

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/internal/version"
	"github.com/leasehold/leasehold/leasecore/postgres"
	"github.com/leasehold/leasehold/sidecar/api"
)

// /healthz names the build; /v1/status reports the build, the store, the
// streams and the batching counts, on both stores.
func TestStatus(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		h := decode[api.Status](t, ts.get("/healthz"))
		if h.Version == nil || *h.Version != version.String() || *h.Version == "" {
			t.Errorf("healthz version %v, want %q", h.Version, version.String())
		}

		expect(t, ts.post("/v1/leases/job/claim", body{"owner": "w1"}), http.StatusOK)
		r := ts.get("/v1/status")
		expect(t, r, http.StatusOK)
		st := decode[api.SidecarStatus](t, r)
		wantKind := api.StoreStatusKind(t.Name()[strings.LastIndex(t.Name(), "/")+1:])
		if st.Version != version.String() || st.Store.Kind != wantKind || !st.Store.Ready || st.Store.Detail != "" {
			t.Errorf("status %+v, want version %q and a ready %s store", st, version.String(), wantKind)
		}
		if st.StartedAt != api.FormatTime(ts.srv.started) {
			t.Errorf("started_at %s, want %s", st.StartedAt, api.FormatTime(ts.srv.started))
		}
		if st.Streams.Open != 0 || st.Streams.Max != DefaultMaxStreams || st.Watchers != 0 {
			t.Errorf("streams %+v, watchers %d; want none open of %d", st.Streams, st.Watchers, DefaultMaxStreams)
		}
		claims := int64(-1)
		for _, wc := range st.Batching {
			if wc.Op == "claim" {
				claims = wc.Operations
			}
		}
		if claims != 1 {
			t.Errorf("batching %+v, want one claim counted", st.Batching)
		}

		for range 2 {
			ts.openWatch("/v1/watch", nil).expectReady()
		}
		if got := decode[api.SidecarStatus](t, ts.get("/v1/status")).Watchers; got != 2 {
			t.Errorf("watchers %d, want 2", got)
		}
	})
}

// /v1/status answers 200 with the reason when the store is down, with no
// credential in it; like every /v1 route it wants the token.
func TestStatusStoreDown(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-Pw"
	url := strings.Replace(pgtest.ClosedURL(t), "leasehold@", "leasehold:"+secret+"@", 1)
	store, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ts := startServer(t, withStore(store), withToken("tok"))

	expect(t, ts.get("/v1/status"), http.StatusUnauthorized)
	ts.token = "tok"
	st := decode[api.SidecarStatus](t, ts.get("/v1/status"))
	if st.Store.Ready || st.Store.Kind != api.Postgres || !strings.Contains(st.Store.Detail, "not migrated") {
		t.Errorf("store before the migration: %+v, want not ready, not migrated", st.Store)
	}
	ts.srv.migrated.Store(true) // as if the store went down after its migration
	st = decode[api.SidecarStatus](t, ts.get("/v1/status"))
	if st.Store.Ready || st.Store.Detail == "" || strings.Contains(st.Store.Detail, secret) {
		t.Errorf("store that is down: %+v, want not ready, a reason, no password", st.Store)
	}
}
