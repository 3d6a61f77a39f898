package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/benchload"
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
			benchload.Run(b, clients, func(ctx context.Context, c int) error {
				task := benchTask(c)
				_, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "bench-" + task, TTL: time.Minute})
				return err
			})
		})
	}
}

// BenchmarkClaimRelease measures the grant path: each operation is a claim
// of a free task (a new token, and an acquired event in the history) and
// its release (a released event), two durable commits unless batched.
func BenchmarkClaimRelease(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			svc := benchService(b)
			benchload.Run(b, clients, func(ctx context.Context, c int) error {
				task, owner := benchTask(c), "bench-"+benchTask(c)
				lease, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Minute})
				if err != nil {
					return err
				}
				_, err = svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: owner, Token: lease.Token})
				return err
			})
		})
	}
}

func BenchmarkRenew(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			svc := benchService(b)
			tokens := make([]int64, clients)
			for c := range clients {
				task := benchTask(c)
				lease, err := svc.Claim(b.Context(), leasecore.ClaimParams{Task: task, Owner: "bench-" + task, TTL: time.Minute})
				if err != nil {
					b.Fatalf("claim %s: %v", task, err)
				}
				tokens[c] = lease.Token
			}
			benchload.Run(b, clients, func(ctx context.Context, c int) error {
				task := benchTask(c)
				_, err := svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "bench-" + task, TTL: time.Minute, Token: tokens[c]})
				return err
			})
		})
	}
}

func benchService(b *testing.B) *leasecore.Service {
	b.Helper()
	return leasecore.New(openMigrated(b, filepath.Join(b.TempDir(), "leasehold.db")))
}

func benchTask(client int) string { return fmt.Sprintf("bench-%d", client) }
