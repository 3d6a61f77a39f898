//go:build unix

package sidecar

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/bench/benchload"
	"github.com/leasehold/leasehold/leasecore"
)

// benchStores are the stores the HTTP benchmarks run on, each opened fresh.
var benchStores = []struct {
	name string
	open func(b *testing.B) leasecore.Store
}{
	{"sqlite", func(b *testing.B) leasecore.Store { return openSQLite(b, false) }},
	{"postgres", func(b *testing.B) leasecore.Store { return openPostgres(b) }},
}

// benchServer is a migrated Server over store.
func benchServer(b *testing.B, store leasecore.Store) *Server {
	b.Helper()
	srv, err := New(Options{Store: store})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	return srv
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHTTPReclaimInProcess measures a claim through the whole sidecar:
// an HTTP request over loopback TCP, request validation against
// openapi.yaml, the Service, the store's durable commit, and the JSON
// answer. Each client re-claims its own task as the same owner, so every
// call is a refresh that writes and commits but grants nothing new (no
// token, no history event), and the HTTP client runs in the same process,
// so the process's CPU is the client's as well as the sidecar's. Compare
// leasecore/postgres's BenchmarkRawClaimStatement, the bare statement on
// the same kind of pool; BenchmarkHTTPClaimNewTask is the claim of a new
// grant.
func BenchmarkHTTPReclaimInProcess(b *testing.B) {
	for _, st := range benchStores {
		b.Run("store="+st.name, func(b *testing.B) {
			srv := benchServer(b, st.open(b))
			hs := httptest.NewServer(srv.Handler())
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
						return postClaim(ctx, client, url, bodies[c])
					})
				})
			}
		})
	}
}

// postClaim sends one claim and expects 200.
func postClaim(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
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
}

// BenchmarkHTTPClaimNewTask measures the claim of a new grant: every
// operation claims a task nobody has claimed before (a new token, a history
// event, a durable commit), through the sidecar's HTTP handler, two ways:
//
//   - via=handler: the request is handed to Server.Handler() in the
//     benchmark's goroutines, with no socket and no HTTP client. The
//     process's CPU is then the sidecar's own per claim (routing,
//     validation, decoding, the Service, the store's driver, the answer's
//     encoding), reported as cpu-ns/op; only net/http's parsing of the
//     request line and headers is left out.
//   - via=tcp: over loopback TCP to a real listener, with the client in the
//     same process (cpu-ns/op then counts both ends).
func BenchmarkHTTPClaimNewTask(b *testing.B) {
	for _, st := range benchStores {
		b.Run("store="+st.name, func(b *testing.B) {
			srv := benchServer(b, st.open(b))
			handler := srv.Handler()
			hs := httptest.NewServer(handler)
			b.Cleanup(hs.Close)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.Cleanup(client.CloseIdleConnections)
			var seq atomic.Int64 // every claim's task is new, across sub-benchmarks
			body := []byte(`{"owner":"bench-owner","ttl_ms":60000,"note":"new grant"}`)

			for _, via := range []string{"handler", "tcp"} {
				for _, clients := range []int{1, 32} {
					b.Run(fmt.Sprintf("via=%s/clients=%d", via, clients), func(b *testing.B) {
						b.ReportAllocs()
						var op func(ctx context.Context, c int) error
						switch via {
						case "handler":
							op = func(ctx context.Context, _ int) error {
								path := fmt.Sprintf("/v1/leases/new-%d/claim", seq.Add(1))
								// As net/http hands a request to a handler, without
								// httptest.NewRequest's own buffered reader.
								req, err := http.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(body))
								if err != nil {
									return err
								}
								req.Header.Set("Content-Type", "application/json")
								rec := httptest.NewRecorder()
								handler.ServeHTTP(rec, req)
								if rec.Code != http.StatusOK {
									return fmt.Errorf("claim answered %d: %s", rec.Code, rec.Body)
								}
								return nil
							}
						case "tcp":
							op = func(ctx context.Context, _ int) error {
								return postClaim(ctx, client, fmt.Sprintf("%s/v1/leases/new-%d/claim", hs.URL, seq.Add(1)), body)
							}
						}
						// The CPU clock also runs through benchload's warm-up
						// (one call per client), so it is shared by those calls too.
						cpu0 := processCPU(b)
						benchload.Run(b, clients, op)
						cpu := processCPU(b) - cpu0
						b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N+clients), "cpu-ns/op")
					})
				}
			}
		})
	}
}
