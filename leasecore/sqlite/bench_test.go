package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// The benchmarks measure one durable SQLite commit per operation through
// leasecore.Service, with 1 and 32 clients each working on its own task.
// Every claim after the first is a same-owner refresh, so every operation
// writes and commits.

func BenchmarkClaim(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			svc := benchService(b)
			runClients(b, clients, func(ctx context.Context, task string) func() error {
				p := leasecore.ClaimParams{Task: task, Owner: "bench-" + task, TTL: time.Minute}
				return func() error {
					_, err := svc.Claim(ctx, p)
					return err
				}
			})
		})
	}
}

func BenchmarkRenew(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			svc := benchService(b)
			runClients(b, clients, func(ctx context.Context, task string) func() error {
				owner := "bench-" + task
				lease, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Minute})
				if err != nil {
					b.Fatalf("claim %s: %v", task, err)
				}
				p := leasecore.RenewParams{Task: task, Owner: owner, TTL: time.Minute, Token: lease.Token}
				return func() error {
					_, err := svc.Renew(ctx, p)
					return err
				}
			})
		})
	}
}

func benchService(b *testing.B) *leasecore.Service {
	b.Helper()
	return leasecore.New(openMigrated(b, filepath.Join(b.TempDir(), "leasehold.db")))
}

// runClients splits b.N operations between clients goroutines. setup runs
// before the timer starts and returns one client's operation on its task.
func runClients(b *testing.B, clients int, setup func(ctx context.Context, task string) func() error) {
	ctx := context.Background()
	ops := make([]func() error, clients)
	for i := range ops {
		ops[i] = setup(ctx, fmt.Sprintf("bench-%d", i))
	}
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i, op := range ops {
		n := b.N / clients
		if i < b.N%clients {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if err := op(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
}
