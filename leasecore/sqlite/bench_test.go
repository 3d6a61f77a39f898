package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/bench/benchload"
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

// BenchmarkClaimNew measures the workload of the sidecar's HTTP benchmark
// below HTTP: every claim is a new grant on a task never claimed before (a
// new lease row with token 1 and an acquired event in the history), from 1,
// 8 and 32 concurrent clients. allocs/op and the CPU profile of this
// benchmark are the store's cost of a grant.
func BenchmarkClaimNew(b *testing.B) {
	for _, clients := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			svc := benchService(b)
			var seq atomic.Int64
			benchload.Run(b, clients, func(ctx context.Context, c int) error {
				task := fmt.Sprintf("new-%d", seq.Add(1))
				l, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "bench-owner", TTL: time.Minute})
				if err == nil && l.Token != 1 {
					err = fmt.Errorf("claim of new task %s: token %d, want 1", task, l.Token)
				}
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

// BenchmarkPruneBacklog prunes one task's backlog of 100,000 events down to
// its newest one: the pass runs in rounds of at most pruneRoundEvents
// deletions, one writer transaction each, and ms/round is how long a round
// holds the writer (the claims and renewals queued meanwhile wait that
// long at most).
func BenchmarkPruneBacklog(b *testing.B) {
	const backlog = 100_000
	s := openMigrated(b, filepath.Join(b.TempDir(), "leasehold.db"))
	svc := leasecore.New(s, leasecore.WithOpTimeout(time.Minute))
	ctx := context.Background()
	if _, err := svc.UpdatePolicy(ctx, leasecore.RetentionPolicy{Name: leasecore.DefaultPolicy, KeepLast: 1}, leasecore.Writer{}); err != nil {
		b.Fatal(err)
	}
	var rounds int64
	for b.Loop() {
		b.StopTimer()
		res := s.submit(ctx, "bulk", func(ctx context.Context, st *txStmts) (answer, error) {
			_, err := st.tx.ExecContext(ctx, `DELETE FROM leasehold_history WHERE task = 'bulk'`)
			if err != nil {
				return answer{}, err
			}
			_, err = st.tx.ExecContext(ctx, `
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT ?)
INSERT INTO leasehold_history (id, task, kind, owner, token, at, detail, prev_id)
SELECT i, 'bulk', 'acquired', 'a', i, 0, '', CASE WHEN i = 1 THEN NULL ELSE i - 1 END FROM n`, backlog)
			if err == nil {
				_, err = st.tx.ExecContext(ctx, `
INSERT INTO leasehold_leases (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note, released_at, end_recorded, last_event)
VALUES ('bulk', 'a', ?, 0, 0, 1, 1, 0, '', 0, 1, ?)
ON CONFLICT (task) DO UPDATE SET token = excluded.token, last_event = excluded.last_event`, backlog, backlog)
			}
			return answer{}, err
		})
		if res.err != nil {
			b.Fatal(res.err)
		}
		before := s.batches.Load()
		b.StartTimer()
		n, err := svc.PruneHistory(ctx)
		if err != nil || n != backlog-1 {
			b.Fatalf("prune: %d, %v; want %d deleted", n, err, backlog-1)
		}
		rounds += s.batches.Load() - before
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(rounds), "ms/round")
	b.ReportMetric(float64(rounds)/float64(b.N), "rounds/op")
}

// BenchmarkFollowNextEmpty: one read of the history by a cursor at the
// newest event that finds nothing new, the read a watched sidecar's hub
// makes at least every second and at most every 100 ms. It carries the id
// high-water mark that tells a history gone back from one that went on.
func BenchmarkFollowNextEmpty(b *testing.B) {
	st := openMigrated(b, filepath.Join(b.TempDir(), "leasehold.db"))
	svc := leasecore.New(st)
	ctx := context.Background()
	for i := range 100 {
		if _, err := svc.Claim(ctx, leasecore.ClaimParams{Task: benchTask(i), Owner: "o", TTL: time.Minute}); err != nil {
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
