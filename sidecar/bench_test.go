package sidecar

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/leasehold/leasehold/internal/benchload"
	"github.com/leasehold/leasehold/leasecore"
)

// BenchmarkHTTPClaim measures a claim through the whole sidecar: an HTTP
// request over loopback TCP, request validation against openapi.yaml, the
// Service, the store's durable commit, and the JSON answer. Each client
// claims its own task as the same owner, so every call is a refresh that
// writes and commits (compare leasecore/postgres's BenchmarkRawClaimStatement,
// the bare statement on the same kind of pool).
func BenchmarkHTTPClaim(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) leasecore.Store
	}{
		{"sqlite", func(b *testing.B) leasecore.Store { return openSQLite(b, false) }},
		{"postgres", func(b *testing.B) leasecore.Store { return openPostgres(b) }},
	}
	for _, st := range stores {
		b.Run("store="+st.name, func(b *testing.B) {
			store := st.open(b)
			srv, err := New(Options{Store: store})
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.Migrate(b.Context()); err != nil {
				b.Fatal(err)
			}
			hs := httptest.NewUnstartedServer(srv.Handler())
			hs.Start()
			b.Cleanup(hs.Close)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.Cleanup(client.CloseIdleConnections)

			for _, clients := range []int{1, 32} {
				b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
					bodies := make([][]byte, clients)
					for c := range bodies {
						bodies[c] = fmt.Appendf(nil, `{"owner":"client-%d","ttl_ms":60000}`, c)
					}
					benchload.Run(b, clients, func(ctx context.Context, c int) error {
						url := fmt.Sprintf("%s/v1/leases/bench-%d-%d/claim", hs.URL, clients, c)
						req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[c]))
						if err != nil {
							return err
						}
						req.Header.Set("Content-Type", "application/json")
						resp, err := client.Do(req)
						if err != nil {
							return err
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							return fmt.Errorf("claim answered %d", resp.StatusCode)
						}
						return nil
					})
				})
			}
		})
	}
}
