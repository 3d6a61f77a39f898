package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/internal/harness/procstat"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/watch"
)

// What row-level security (migration 0005) costs a claim. The same
// claims as four roles of one database:
//
//   - owner: the tables' owner, which row-level security does not bind:
//     what a claim cost before 0005;
//   - runtime: a runtime role without a scope (unrestricted): the policies
//     are evaluated, and admit every row;
//   - scoped: a runtime role limited to one prefix, "bench/";
//   - scoped8: limited to eight prefixes, "bench/" the last to match.
//
// BenchmarkClaimStatementByRole sends the claim statements themselves, as
// each role, each on a connection of its own:
// op=refresh and op=new send claimSQL (a lone claim), op=batch32
// claimBatchSQL refreshing 32 tasks at once (one op is the 32). Each
// iteration sends one statement as each role, in turn, so that whatever
// else runs on the machine weighs on every role alike; the roles are
// metrics of one benchmark rather than benchmarks of their own, which a
// busy machine would run under different loads. ROLE-ns/op is the wall
// time of ROLE's statement; ROLE-server-cpu-ns/op the CPU time the
// PostgreSQL backend serving ROLE's connection spent per statement (from
// /proc/PID/schedstat, so only when the server runs on this machine): the
// policies are evaluated there. scripts/byrole.awk splits the roles into
// results of their own, for benchstat -col /role (docs/store-roles.md,
// "What it costs").
func BenchmarkClaimStatementByRole(b *testing.B) {
	db := newRoleDB(b)
	scoped := newBenchRole(b, db, "lh_bench_scoped")
	scoped8 := newBenchRole(b, db, "lh_bench_scoped8")
	db.scope(b, scoped.name, "bench/")
	db.scope(b, scoped8.name, "p1/", "p2/", "p3/", "p4/", "p5/", "p6/", "p7/", "bench/")
	type roleConn struct {
		name  string
		conn  *pgx.Conn
		pid   int
		batch []string
	}
	var roles []*roleConn
	for _, r := range []struct{ name, url string }{
		{"owner", db.ownerU}, {"runtime", db.aURL}, {"scoped", scoped.url}, {"scoped8", scoped8.url},
	} {
		rc := &roleConn{name: r.name, conn: mustConn(b, r.url)}
		if err := rc.conn.QueryRow(b.Context(), `SELECT pg_backend_pid()`).Scan(&rc.pid); err != nil {
			b.Fatal(err)
		}
		for i := range 32 {
			rc.batch = append(rc.batch, fmt.Sprintf("bench/stmt/%s/%02d", r.name, i))
		}
		roles = append(roles, rc)
	}
	ttlMS := benchTTL.Milliseconds()
	owners, ttls, notes := slices.Repeat([]string{"o"}, 32), slices.Repeat([]int64{ttlMS}, 32), slices.Repeat([]string{""}, 32)
	var seq atomic.Int64
	claim := func(ctx context.Context, op string, rc *roleConn) error {
		var (
			rows pgx.Rows
			err  error
			want = 1
		)
		switch op {
		case "refresh":
			rows, err = rc.conn.Query(ctx, claimSQL, "bench/stmt/"+rc.name, "o", ttlMS, "", "", int64(0))
		case "new":
			rows, err = rc.conn.Query(ctx, claimSQL, fmt.Sprintf("bench/stmt/new/%d", seq.Add(1)), "o", ttlMS, "", "", int64(0))
		default:
			rows, err = rc.conn.Query(ctx, claimBatchSQL, rc.batch, owners, ttls, notes, notes, make([]int64, 32))
			want = 32
		}
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("%s: %d rows claimed, want %d", rc.name, n, want)
		}
		return nil
	}
	for _, op := range []string{"refresh", "new", "batch32"} {
		b.Run("op="+op, func(b *testing.B) {
			wall := make([]time.Duration, len(roles))
			cpuBefore := make([]time.Duration, len(roles))
			cpuOK := true
			for i, rc := range roles {
				// Warm: the row exists, the statement is prepared and its
				// plan settled (generic after five executions).
				for range 6 {
					if err := claim(b.Context(), op, rc); err != nil {
						b.Fatal(err)
					}
				}
				var ok bool
				cpuBefore[i], ok = backendCPU(rc.pid)
				cpuOK = cpuOK && ok
			}
			b.ResetTimer()
			for n := range b.N {
				for j := range roles {
					i := (n + j) % len(roles) // each role first in turn
					start := time.Now()
					if err := claim(b.Context(), op, roles[i]); err != nil {
						b.Fatal(err)
					}
					wall[i] += time.Since(start)
				}
			}
			b.StopTimer()
			for i, rc := range roles {
				b.ReportMetric(float64(wall[i])/float64(b.N), rc.name+"-ns/op")
				if after, ok := backendCPU(rc.pid); cpuOK && ok {
					b.ReportMetric(float64(after-cpuBefore[i])/float64(b.N), rc.name+"-server-cpu-ns/op")
				}
			}
		})
	}
}

// backendCPU is the CPU time the process pid has run; false when it
// cannot be read (a server elsewhere).
func backendCPU(pid int) (time.Duration, bool) {
	d, err := procstat.SchedCPU(pid)
	return d, err == nil
}

// benchRole is a runtime role made for a benchmark.
type benchRole struct{ name, url string }

// newBenchRole makes another runtime role in db, granted as db's are.
func newBenchRole(b *testing.B, db roleDB, prefix string) benchRole {
	b.Helper()
	name, url := pgtest.NewRole(b, db.admin, prefix)
	if err := mustOpen(b, db.ownerU).MigrateGranting(b.Context(), []string{name}); err != nil {
		b.Fatal(err)
	}
	return benchRole{name, url}
}

// BenchmarkWatchDelayByRole: how long after a claim commits its acquired
// event reaches a watcher of the claimant's own Service, while another
// role's claims come in between (each a gap, to a scoped role, that must
// settle before the events after it are delivered; docs/store-roles.md,
// "The watch under scopes"). One op is one of the other role's claims and
// then one of the watcher's role; delay-ms/op is the time from the second
// claim's answer to its event. role=runtime watches as an unrestricted
// role, which sees every event (no gap); role=scoped as a role limited to
// its prefix.
func BenchmarkWatchDelayByRole(b *testing.B) {
	db := newRoleDB(b)
	db.scope(b, db.b, "other/")
	other := leasecore.New(openAs(b, db.bURL, Options{}))
	var seq atomic.Int64 // task names new to every run: a refresh would write no event
	for _, role := range []string{"runtime", "scoped"} {
		b.Run("role="+role, func(b *testing.B) {
			if role == "scoped" {
				db.scope(b, db.a, "mine/")
			}
			svc := leasecore.New(openAs(b, db.aURL, Options{}))
			w, err := watch.New(svc).Watch(b.Context(), watch.Params{Prefix: "mine/", Since: watch.FromNow})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			for it := range w.Items() {
				if it.Ready {
					break
				}
			}
			var total time.Duration
			b.ResetTimer()
			for range b.N {
				i := seq.Add(1)
				task := fmt.Sprintf("mine/%d", i)
				if _, err := other.Claim(b.Context(), leasecore.ClaimParams{Task: fmt.Sprintf("other/%d", i), Owner: "o", TTL: benchTTL}); err != nil {
					b.Fatal(err)
				}
				if _, err := svc.Claim(b.Context(), leasecore.ClaimParams{Task: task, Owner: "m", TTL: benchTTL}); err != nil {
					b.Fatal(err)
				}
				claimed := time.Now()
				for it := range w.Items() {
					if it.Event.Task == task {
						break
					}
				}
				total += time.Since(claimed)
			}
			b.ReportMetric(total.Seconds()*1000/float64(b.N), "delay-ms/op")
		})
	}
}
