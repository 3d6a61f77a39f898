package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/internal/benchload"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

// The benchmarks measure one sidecar's path to PostgreSQL: leasecore.Service
// over this driver (BenchmarkClaim, BenchmarkRenew) against the bare claim
// statement on a pool of the same size (BenchmarkRawClaimStatement). Each runs
// with 1 and with 32 concurrent clients; every client works on a task of its
// own as the same owner, so a claim is a refresh (the DO UPDATE path) and
// clients never wait for each other's row locks: what is measured is the
// statement, the round trip and the durable commit, not contention. ns/op is
// wall time per operation across all clients (1/throughput); ops/s says the
// same as a rate.

var benchClients = []int{1, 32}

const benchTTL = time.Minute

func benchTask(kind string, clients, c int) (task, owner string) {
	return fmt.Sprintf("bench/%s/%d/%d", kind, clients, c), fmt.Sprintf("client-%d", c)
}

// BenchmarkClaim: repeated claims of the client's own task through
// leasecore.Service (validation, op timeout, the driver's claim).
func BenchmarkClaim(b *testing.B) {
	svc := leasecore.New(mustMigrated(b, pgtest.NewDatabase(b)))
	for _, clients := range benchClients {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			benchload.Run(b, clients, func(ctx context.Context, c int) error {
				task, owner := benchTask("claim", clients, c)
				_, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: owner, TTL: benchTTL})
				return err
			})
		})
	}
}

// BenchmarkRenew: repeated token-checked renewals of the client's own lease
// through leasecore.Service.
func BenchmarkRenew(b *testing.B) {
	svc := leasecore.New(mustMigrated(b, pgtest.NewDatabase(b)))
	for _, clients := range benchClients {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			tokens := make([]int64, clients)
			for c := range clients {
				task, owner := benchTask("renew", clients, c)
				l, err := svc.Claim(b.Context(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: benchTTL})
				if err != nil {
					b.Fatal(err)
				}
				tokens[c] = l.Token
			}
			benchload.Run(b, clients, func(ctx context.Context, c int) error {
				task, owner := benchTask("renew", clients, c)
				_, err := svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: owner, TTL: benchTTL, Token: tokens[c]})
				return err
			})
		})
	}
}

// BenchmarkRawClaimStatement: the claim statement alone, sent with
// pool.QueryRow and its row scanned, on a pgx pool of DefaultMaxConns
// connections: the floor under BenchmarkClaim.
func BenchmarkRawClaimStatement(b *testing.B) {
	url := pgtest.NewDatabase(b)
	mustMigrated(b, url) // the schema only; the store is not used below
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = DefaultMaxConns
	pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	ttlMS := benchTTL.Milliseconds()
	for _, clients := range benchClients {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			benchload.Run(b, clients, func(ctx context.Context, c int) error {
				task, owner := benchTask("raw", clients, c)
				var (
					tsk, own              string
					token, ttl, n, remain int64
					acq, ren, exp         time.Time
					note                  string
				)
				return pool.QueryRow(ctx, claimSQL, task, owner, ttlMS, "").
					Scan(&tsk, &own, &token, &acq, &ren, &exp, &ttl, &n, &note, &remain)
			})
		})
	}
}
