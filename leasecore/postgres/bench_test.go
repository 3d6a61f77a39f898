package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/internal/bench/benchload"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

// The benchmarks measure one sidecar's path to PostgreSQL: leasecore.Service
// over this driver (BenchmarkClaim, BenchmarkRenew), which batches concurrent
// calls, against the bare single-row claim statement, one statement and one
// commit per claim (BenchmarkRawClaimStatement). Each runs with 1 and with 32
// concurrent clients; every client works on a task of its own as the same
// owner, so a claim is a refresh (the DO UPDATE path) and clients never wait
// for each other's row locks: what is measured is the statements, the round
// trips and the durable commits, not contention (BenchmarkClaimHeld measures
// contention). ns/op is wall time per operation across all clients
// (1/throughput); ops/s says the same as a rate.

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

// newClients are the client counts of the new-grant benchmarks, those of
// the sidecar's HTTP benchmark.
var newClients = []int{1, 8, 32}

// BenchmarkClaimNew: every claim a new grant on a task never claimed before
// (a new row with token 1 and an acquired event in the history), through
// leasecore.Service: the workload of the sidecar's HTTP benchmark below
// HTTP. cpu-ns/op is this process's CPU per claim, PostgreSQL's not
// included; BenchmarkRawClaimNewStatement is the baseline.
func BenchmarkClaimNew(b *testing.B) {
	svc := leasecore.New(mustMigrated(b, pgtest.NewDatabase(b)))
	var seq atomic.Int64
	for _, clients := range newClients {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			benchload.Run(b, clients, func(ctx context.Context, c int) error {
				task := fmt.Sprintf("bench/new/%d", seq.Add(1))
				l, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "client", TTL: benchTTL})
				if err == nil && l.Token != 1 {
					err = fmt.Errorf("claim of new task %s: token %d, want 1", task, l.Token)
				}
				return err
			})
		})
	}
}

// BenchmarkRawClaimNewStatement: BenchmarkClaimNew's claims as the bare
// single-row claim statement (claimSQL, which writes the acquired event
// too), one statement and one commit per claim, on a pgx pool of
// rawPoolConns connections.
func BenchmarkRawClaimNewStatement(b *testing.B) {
	pool := rawPool(b)
	ttlMS := benchTTL.Milliseconds()
	var seq atomic.Int64
	for _, clients := range newClients {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			benchload.Run(b, clients, func(ctx context.Context, c int) error {
				task := fmt.Sprintf("bench/raw-new/%d", seq.Add(1))
				var (
					tsk, own              string
					token, ttl, n, remain int64
					acq, ren, exp         time.Time
					note                  string
				)
				err := pool.QueryRow(ctx, claimSQL, task, "client", ttlMS, "", "", int64(0)).
					Scan(&tsk, &own, &token, &acq, &ren, &exp, &ttl, &n, &note, &remain, new(*time.Time))
				if err == nil && token != 1 {
					err = fmt.Errorf("claim of new task %s: token %d, want 1", task, token)
				}
				return err
			})
		})
	}
}

// BenchmarkClaimRelease: the client's own task claimed and released in
// turn through leasecore.Service, so that every claim is a new grant and
// every release ends a lease: each writes a history event with its change
// (BenchmarkClaim's refreshes write none). One op is a claim and a release.
func BenchmarkClaimRelease(b *testing.B) {
	svc := leasecore.New(mustMigrated(b, pgtest.NewDatabase(b)))
	for _, clients := range benchClients {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			benchload.Run(b, clients, func(ctx context.Context, c int) error {
				task, owner := benchTask("claim-release", clients, c)
				l, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: owner, TTL: benchTTL})
				if err != nil {
					return err
				}
				ok, err := svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: owner, Token: l.Token})
				if err == nil && !ok {
					err = fmt.Errorf("release of %s: not released", task)
				}
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

// rawPoolConns is the pool BenchmarkRawClaimStatement sends the bare
// statement on: 16 connections, the driver's pool before it batched, at
// which the single-row statement did as well as with 32 (a statement per
// claim needs a connection per claim in flight, unlike the batches).
const rawPoolConns = 16

// BenchmarkRenewMany: token-checked renewals of 1024 leases from 1024
// concurrent clients, one lease each, as a sidecar keeping many leases alive
// sends them: the renewal batches run full.
func BenchmarkRenewMany(b *testing.B) {
	const clients = 1024
	svc := leasecore.New(mustMigrated(b, pgtest.NewDatabase(b)))
	tokens := make([]int64, clients)
	for c := range clients {
		task, owner := benchTask("renew-many", clients, c)
		l, err := svc.Claim(b.Context(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: benchTTL})
		if err != nil {
			b.Fatal(err)
		}
		tokens[c] = l.Token
	}
	benchload.Run(b, clients, func(ctx context.Context, c int) error {
		task, owner := benchTask("renew-many", clients, c)
		_, err := svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: owner, TTL: benchTTL, Token: tokens[c]})
		return err
	})
}

// BenchmarkRawClaimStatement: the single-row claim statement alone (claimSQL,
// one statement and one commit per claim, no batching), sent with
// pool.QueryRow and its row scanned, on a pgx pool of rawPoolConns
// connections: the baseline BenchmarkClaim and the sidecar's
// BenchmarkHTTPClaim are compared with.
func BenchmarkRawClaimStatement(b *testing.B) {
	pool := rawPool(b)
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
				return pool.QueryRow(ctx, claimSQL, task, owner, ttlMS, "", "", int64(0)).
					Scan(&tsk, &own, &token, &acq, &ren, &exp, &ttl, &n, &note, &remain, new(*time.Time))
			})
		})
	}
}

// rawPool is a pgx pool of rawPoolConns connections to a new migrated
// database, for the raw statement benchmarks.
func rawPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	url := pgtest.NewDatabase(b)
	mustMigrated(b, url) // the schema only; the store is not used
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = rawPoolConns
	pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// BenchmarkClaimHeld: repeated claims of one task that another owner holds,
// each client as its own owner, through leasecore.Service: every claim is
// refused and reads the holder. Claims of one task cannot share a batch, so
// this is the driver's worst case for batching; the row lock serialises the
// contenders in the server anyway.
func BenchmarkClaimHeld(b *testing.B) {
	svc := leasecore.New(mustMigrated(b, pgtest.NewDatabase(b)))
	for _, clients := range benchClients {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			task := fmt.Sprintf("bench/held/%d", clients)
			if _, err := svc.Claim(b.Context(), leasecore.ClaimParams{Task: task, Owner: "holder", TTL: time.Hour}); err != nil {
				b.Fatal(err)
			}
			benchload.Run(b, clients, func(ctx context.Context, c int) error {
				_, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: fmt.Sprintf("client-%d", c), TTL: benchTTL})
				if errors.Is(err, leasecore.ErrHeld) {
					return nil
				}
				return fmt.Errorf("claim of a held task: %v, want held", err)
			})
		})
	}
}

// BenchmarkPoolSize: one sidecar's claims (new grants, 32 clients) and
// token-checked renewals (256 leases, one client each, as keepalive streams
// send them) through leasecore.Service on pools of 1 to 8 connections
// (pool_max_conns): how few connections a sidecar needs (docs/stores.md, "A fleet
// on one PostgreSQL").
func BenchmarkPoolSize(b *testing.B) {
	url := pgtest.NewDatabase(b)
	mustMigrated(b, url)
	for _, conns := range []int{1, 2, 4, 8} {
		svc := leasecore.New(mustOpen(b, fmt.Sprintf("%s&pool_max_conns=%d", url, conns)))
		b.Run(fmt.Sprintf("conns=%d/claim-new/clients=32", conns), func(b *testing.B) {
			var n atomic.Int64
			benchload.Run(b, 32, func(ctx context.Context, c int) error {
				task := fmt.Sprintf("pool/%d/%d", conns, n.Add(1))
				_, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "o", TTL: benchTTL})
				return err
			})
		})
		b.Run(fmt.Sprintf("conns=%d/renew/streams=256", conns), func(b *testing.B) {
			const streams = 256
			tokens := make([]int64, streams)
			for c := range streams {
				task, owner := benchTask(fmt.Sprintf("pool-renew-%d", conns), streams, c)
				l, err := svc.Claim(b.Context(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: benchTTL})
				if err != nil {
					b.Fatal(err)
				}
				tokens[c] = l.Token
			}
			benchload.Run(b, streams, func(ctx context.Context, c int) error {
				task, owner := benchTask(fmt.Sprintf("pool-renew-%d", conns), streams, c)
				_, err := svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: owner, TTL: benchTTL, Token: tokens[c]})
				return err
			})
		})
	}
}

// BenchmarkFollowNextEmpty: one read of the history by a cursor at the
// newest event that finds nothing new, the read a watched sidecar's hub
// makes at least every second and at most every 100 ms. It carries the id
// high-water mark that tells a history gone back from one that went on.
func BenchmarkFollowNextEmpty(b *testing.B) {
	st := mustMigrated(b, pgtest.NewDatabase(b))
	svc := leasecore.New(st)
	ctx := context.Background()
	for i := range 100 {
		if _, err := svc.Claim(ctx, leasecore.ClaimParams{Task: fmt.Sprintf("bench/follow/%d", i), Owner: "o", TTL: benchTTL}); err != nil {
			b.Fatal(err)
		}
	}
	cur, err := st.FollowHistory(ctx, -1)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		evs, err := cur.Next(ctx, 512)
		if err != nil || len(evs) != 0 {
			b.Fatalf("read %d events: %v", len(evs), err)
		}
	}
}

// BenchmarkHistoryChangesPoll: the question a watched sidecar asks the
// database every ChangesPoll (followFromNowSQL) on a history of 100,000
// events, from one client: what one poll costs, round trip included.
func BenchmarkHistoryChangesPoll(b *testing.B) {
	url := pgtest.NewDatabase(b)
	st := mustMigrated(b, url)
	ctx := context.Background()
	const events = 100_000
	if _, err := st.pool.Exec(ctx, `
INSERT INTO leasehold_history (task, kind, owner, token, at)
SELECT 'bench/poll/' || (i % 1000), 'acquired', 'o', i, now() FROM generate_series(1, $1::bigint) AS i`, events); err != nil {
		b.Fatal(err)
	}
	if _, err := st.pool.Exec(ctx, `VACUUM ANALYZE leasehold_history`); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		var newest int64
		if err := st.pool.QueryRow(ctx, followFromNowSQL).Scan(&newest); err != nil || newest < events {
			b.Fatalf("newest %d: %v", newest, err)
		}
	}
}
