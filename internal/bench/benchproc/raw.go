package benchproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/internal/harness/procstat"
	"github.com/leasehold/leasehold/leasecore/postgres"
)

// LoadResult is what a load process (httpbench raw, fleetbench raw,
// etcdload) prints as one JSON line. Keys is what the store holds
// afterwards (grants recorded, keys written), to check against Ops.
type LoadResult struct {
	Ops     int64   `json:"ops"`
	Errors  int64   `json:"errors"`
	Seconds float64 `json:"seconds"`
	Keys    int64   `json:"keys"`
	Error   string  `json:"error,omitempty"`
	// P50US and P99US are the nearest-rank percentiles of the successful
	// ops' latencies, in µs, over every client (0 when the load process
	// does not measure them).
	P50US float64 `json:"p50_us,omitempty"`
	P99US float64 `json:"p99_us,omitempty"`
}

// ParseLoad reads the last line of a load process's output as its
// LoadResult.
func ParseLoad(out []byte) (LoadResult, error) {
	var lr LoadResult
	line := bytes.TrimSpace(out)
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal(line, &lr); err != nil {
		return lr, fmt.Errorf("no result line in %q: %w", out, err)
	}
	return lr, nil
}

// GrantsSQL counts the acquired events of the tasks a point claimed,
// leaving out the sidecar's own, such as its pruner's lease: the argument
// is TasksLike(prefix). SQLite writes its placeholder ?.
const GrantsSQL = `SELECT count(*) FROM leasehold_history WHERE kind = 'acquired' AND task LIKE $1`

// TasksLike matches the names of a point's tasks, PREFIX-...: prefixes
// hold no LIKE wildcard.
func TasksLike(prefix string) string { return prefix + "-%" }

// CountPostgres is GrantsSQL's count of prefix's grants in the database at
// dbURL.
func CountPostgres(dbURL, prefix string) (int64, error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, GrantsSQL, TasksLike(prefix)).Scan(&n)
	return n, err
}

// RawMain is a bench's `raw` subcommand, the raw lone-claim baseline's load
// process: the PostgreSQL driver's single-claim statement
// (postgres.LoneClaimSQL), one statement and one commit per op on
// -clients pooled connections, each on a task of its own, for -duration.
// It prints a LoadResult line on out and returns the exit status.
func RawMain(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("raw", flag.ExitOnError)
	var (
		url      = fs.String("url", "", "the PostgreSQL database, migrated")
		clients  = fs.Int("clients", 1, "concurrent clients, a connection each")
		duration = fs.Duration("duration", 10*time.Second, "how long to start new ops")
		prefix   = fs.String("prefix", "raw", "task name prefix, unique per run")
	)
	_ = fs.Parse(args)
	res, err := rawLoad(*url, *clients, *duration, *prefix)
	if err != nil {
		res.Error = err.Error()
	}
	_ = json.NewEncoder(out).Encode(res)
	if err != nil {
		return 1
	}
	return 0
}

func rawLoad(url string, clients int, duration time.Duration, prefix string) (LoadResult, error) {
	var res LoadResult
	sql := postgres.LoneClaimSQL()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return res, err
	}
	cfg.MaxConns, cfg.MinConns = int32(clients), int32(clients)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	// Open every connection before the clock starts, as wrk's are.
	conns := make([]*pgxpool.Conn, clients)
	for i := range conns {
		if conns[i], err = pool.Acquire(ctx); err != nil {
			return res, err
		}
	}
	for _, c := range conns {
		c.Release()
	}

	var ops, errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	latencies := make([][]time.Duration, clients) // each client's own
	start := time.Now()
	end := start.Add(duration)
	for c := range clients {
		wg.Go(func() {
			owner := fmt.Sprintf("raw-%d", c)
			// Ops started before the end run to completion: every counted
			// grant is in the store and none in the store is uncounted.
			for n := 0; time.Now().Before(end); n++ {
				task := fmt.Sprintf("%s-%d-%d", prefix, c, n)
				began := time.Now()
				if err := rawClaim(ctx, pool, sql, task, owner); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				latencies[c] = append(latencies[c], time.Since(began))
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	all := MergeLatencies(latencies)
	res.P50US = float64(Quantile(all, 0.50)) / float64(time.Microsecond)
	res.P99US = float64(Quantile(all, 0.99)) / float64(time.Microsecond)
	res.Ops, res.Errors = ops.Load(), errs.Load()
	if err := pool.QueryRow(ctx, GrantsSQL, TasksLike(prefix)).Scan(&res.Keys); err != nil {
		return res, fmt.Errorf("count acquired events: %w", err)
	}
	if err, _ := firstErr.Load().(error); err != nil {
		return res, fmt.Errorf("%d claims failed, the first: %w", res.Errors, err)
	}
	return res, nil
}

// rawClaim is one op: the claim statement on its own (its own implicit
// transaction and commit), its row read as the driver reads it.
func rawClaim(ctx context.Context, pool *pgxpool.Pool, sql, task, owner string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		tsk, own, note        string
		token, ttl, n, remain int64
		acq, ren, exp         time.Time
	)
	err := pool.QueryRow(ctx, sql, task, owner, int64(60000), "", "", int64(0)).
		Scan(&tsk, &own, &token, &acq, &ren, &exp, &ttl, &n, &note, &remain, new(*time.Time))
	if err != nil {
		return fmt.Errorf("claim %s: %w", task, err)
	}
	if token != 1 || n != 0 {
		return errors.New("claim " + task + ": not a new grant")
	}
	return nil
}

// RawRun is one run of the raw lone-claim load, measured from outside.
type RawRun struct {
	Load LoadResult
	// PGCPU is PostgreSQL's CPU over the run (its postmaster's process
	// tree), when PGMeasured.
	PGCPU      time.Duration
	PGMeasured bool
	// Check says what was checked against the store; Failed, when not
	// empty, why the run does not count.
	Check, Failed string
}

// RunRaw runs the raw lone-claim load as a process of its own (self's
// `raw` subcommand, RawMain) on the migrated database dbURL, with clients
// connections for duration on tasks named after prefix, and measures
// PostgreSQL's CPU when postmaster (FindPostmaster) is not 0. The run fails
// (Failed) on any claim error, and when the store does not hold exactly the
// grants the load counted; tool names the subcommand in errors.
func RunRaw(tool, self string, postmaster int, dbURL string, clients int, duration time.Duration, prefix string) (RawRun, error) {
	var r RawRun
	pg0, pgOK := PostmasterCPU(postmaster)
	var before map[int]bool
	if pgOK {
		_, before, _ = procstat.TreeCPUChildren(postmaster)
	}
	out, err := exec.Command(self, "raw", "-url", dbURL,
		"-clients", strconv.Itoa(clients), "-duration", duration.String(), "-prefix", prefix).Output()
	if pgOK {
		AwaitBackendsGone(postmaster, before)
	}
	pg1, pgOK1 := PostmasterCPU(postmaster)
	lr, perr := ParseLoad(out)
	if perr != nil {
		return r, fmt.Errorf("%s raw: %v (%w)", tool, perr, err)
	}
	r.Load = lr
	r.PGCPU, r.PGMeasured = pg1-pg0, pgOK && pgOK1
	r.Check = fmt.Sprintf("%d acquired history rows for %d claims", lr.Keys, lr.Ops)
	switch {
	case lr.Error != "":
		r.Failed = fmt.Sprintf("%d errors: %s", lr.Errors, lr.Error)
	case lr.Keys != lr.Ops:
		r.Failed = "grants do not match: " + r.Check
	}
	return r, nil
}
