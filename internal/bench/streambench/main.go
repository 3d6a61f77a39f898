// Command streambench measures one sidecar holding many keepalive streams.
//
// It starts `leasehold serve` as a process of its own, opens N keepalive
// streams to it on distinct tasks, holds them for a duration, and reports,
// in Go benchmark format (so that benchstat reads it):
//
//   - lost: streams that ended or reported `lost` while held (target 0);
//   - leases/s: renewals confirmed per second, from the streams' `renewed` events;
//   - stmts/s: write statements (PostgreSQL) or transactions (SQLite) that
//     carried renewals, per second, from the sidecar's own counters;
//   - leases/stmt: the two divided, the batching factor;
//   - MB-rss: the sidecar's peak resident memory (VmHWM) during the run;
//   - cpu-cores: the sidecar's CPU time (user + system) per second of the run.
//
// Every stream is a TCP connection at both ends, so N streams need N file
// descriptors in this process and in the sidecar. streambench raises its
// soft open-file limit to the hard limit and says so; the sidecar, a Go
// program, raises its own the same way at start-up.
//
// Usage (make bench-streams runs it on both stores):
//
//	go run ./internal/bench/streambench -leasehold bin/leasehold -store sqlite -streams 10000 -duration 60s
//	go run ./internal/bench/streambench -leasehold bin/leasehold -store postgres -streams 10000
//
// -store postgres creates a database of its own on the server in
// LEASEHOLD_TEST_POSTGRES_URL (scripts/with-postgres.sh sets it) and drops
// it afterwards; -store sqlite uses a file in a temporary directory.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/bench/benchproc"
)

const tool = "streambench"

func main() {
	var (
		bin      = flag.String("leasehold", "bin/leasehold", "the leasehold binary to run")
		store    = flag.String("store", "sqlite", "sqlite, or postgres (a new database on LEASEHOLD_TEST_POSTGRES_URL's server)")
		streams  = flag.Int("streams", 1000, "keepalive streams to hold")
		duration = flag.Duration("duration", 60*time.Second, "how long to hold them once all are acquired")
		ttl      = flag.Duration("ttl", 10*time.Second, "the streams' ttl")
		open     = flag.Int("open-concurrency", 64, "streams opened at once while ramping up")
	)
	flag.Parse()
	if err := run(*bin, *store, *streams, *duration, *ttl, *open); err != nil {
		fmt.Fprintln(os.Stderr, "streambench:", err)
		os.Exit(1)
	}
}

func run(bin, storeKind string, n int, duration, ttl time.Duration, openConcurrency int) error {
	if err := benchproc.RaiseFileLimit(tool, n, "streams"); err != nil {
		return err
	}
	storeURL, cleanup, err := benchproc.NewStore(tool, storeKind)
	if err != nil {
		return err
	}
	defer cleanup()

	sc, err := benchproc.StartSidecar(tool, bin, storeURL, "--max-streams", strconv.Itoa(n+64))
	if err != nil {
		return err
	}
	defer sc.Stop()

	client := &http.Client{Transport: &http.Transport{
		// One connection per stream, and none of them reused.
		MaxIdleConnsPerHost: -1,
		DisableKeepAlives:   true,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	}}
	h := &holder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Ramp up: open every stream and wait for its acquired event.
	rampStart := time.Now()
	sem := make(chan struct{}, openConcurrency)
	var wg sync.WaitGroup
	var openErr atomic.Value
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			acquired := make(chan error, 1)
			go h.hold(ctx, client, sc.Base, i, ttl, acquired)
			if err := <-acquired; err != nil {
				openErr.CompareAndSwap(nil, err)
			}
			<-sem
		})
	}
	wg.Wait()
	if err, _ := openErr.Load().(error); err != nil {
		return fmt.Errorf("opening streams: %w", err)
	}
	fmt.Fprintf(os.Stderr, "streambench: %d streams acquired in %s\n", n, time.Since(rampStart).Round(time.Millisecond))

	// Measure.
	before, err := takeSample(sc)
	if err != nil {
		return err
	}
	renewedBefore := h.renewed.Load()
	lostBefore := h.lost.Load()
	start := time.Now()
	time.Sleep(duration)
	after, err := takeSample(sc)
	if err != nil {
		return err
	}
	elapsed := time.Since(start).Seconds()
	renewed := float64(h.renewed.Load() - renewedBefore)
	lost := h.lost.Load() - lostBefore
	if open := h.open.Load(); open != int64(n) {
		lost = max(lost, int64(n)-open)
	}
	stmts := after.renewStmts - before.renewStmts
	perStmt := 0.0
	if stmts > 0 {
		perStmt = (after.renewOps - before.renewOps) / stmts
	}
	cpu := (after.cpuSeconds - before.cpuSeconds) / elapsed
	fmt.Printf("BenchmarkKeepaliveStreams/store=%s/streams=%d\t1\t%d ns/op\t%d lost\t%.1f leases/s\t%.2f stmts/s\t%.0f leases/stmt\t%.1f MB-rss\t%.3f cpu-cores\n",
		storeKind, n, int64(elapsed*1e9), lost, renewed/elapsed, stmts/elapsed, perStmt, after.peakRSSMB, cpu)
	fmt.Fprintf(os.Stderr, "streambench: sidecar at the end: heap in use %.1f MB, stacks %.1f MB, %.0f goroutines\n",
		after.heapMB, after.stackMB, after.goroutines)
	cancel()
	return nil
}

// holder keeps the streams and counts what they report.
type holder struct {
	open    atomic.Int64 // streams acquired and not ended
	renewed atomic.Int64 // renewed events
	lost    atomic.Int64 // lost events, and streams that ended while held
}

// hold opens one stream and reads it until ctx ends; acquired receives nil
// after the acquired event, or the reason the stream did not start.
func (h *holder) hold(ctx context.Context, client *http.Client, base string, i int, ttl time.Duration, acquired chan<- error) {
	u := fmt.Sprintf("%s/v1/leases/bench-%06d/keepalive?owner=streambench&ttl_ms=%d", base, i, ttl.Milliseconds())
	resp, err := benchproc.OpenStream(ctx, client, u)
	if err != nil {
		acquired <- fmt.Errorf("stream %d: %w", i, err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	held := false
	for sc.Scan() {
		name, ok := strings.CutPrefix(sc.Text(), "event: ")
		if !ok {
			continue
		}
		switch name {
		case "acquired":
			held = true
			h.open.Add(1)
			acquired <- nil
		case "renewed":
			h.renewed.Add(1)
		case "lost":
			h.lost.Add(1)
			held = false
			h.open.Add(-1)
		}
	}
	if held {
		h.open.Add(-1)
		if ctx.Err() == nil {
			h.lost.Add(1) // the stream ended under us
		}
	} else if !held && ctx.Err() == nil {
		select {
		case acquired <- fmt.Errorf("stream %d ended before it acquired the lease", i):
		default:
		}
	}
}

// sample is what the sidecar's counters and /proc say at one moment.
type sample struct {
	renewStmts, renewOps float64
	cpuSeconds           float64
	peakRSSMB            float64
	// The Go runtime's view, for finding where the memory goes.
	heapMB, stackMB, goroutines float64
}

func takeSample(sc *benchproc.Sidecar) (sample, error) {
	var out sample
	text, err := sc.Metrics()
	if err != nil {
		return out, err
	}
	if out.renewStmts, err = benchproc.Metric(text, `leasehold_store_write_statements_total{operation="renew"}`); err != nil {
		return out, err
	}
	if out.renewOps, err = benchproc.Metric(text, `leasehold_store_write_operations_total{operation="renew"}`); err != nil {
		return out, err
	}
	for _, m := range []struct {
		dst    *float64
		series string
		scale  float64
	}{
		{&out.heapMB, "go_memstats_heap_inuse_bytes", 1 << 20},
		{&out.stackMB, "go_memstats_stack_inuse_bytes", 1 << 20},
		{&out.goroutines, "go_goroutines", 1},
	} {
		v, err := benchproc.Metric(text, m.series)
		if err != nil {
			return out, err
		}
		*m.dst = v / m.scale
	}
	out.cpuSeconds, out.peakRSSMB, err = sc.Usage("VmHWM")
	return out, err
}
