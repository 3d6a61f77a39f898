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
//	go run ./internal/streambench -leasehold bin/leasehold -store sqlite -streams 10000 -duration 60s
//	go run ./internal/streambench -leasehold bin/leasehold -store postgres -streams 10000
//
// -store postgres creates a database of its own on the server in
// LEASEHOLD_TEST_POSTGRES_URL (scripts/with-postgres.sh sets it) and drops
// it afterwards; -store sqlite uses a file in a temporary directory.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

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
	if err := raiseFileLimit(n); err != nil {
		return err
	}
	storeURL, cleanup, err := makeStore(storeKind)
	if err != nil {
		return err
	}
	defer cleanup()

	sc, err := startSidecar(bin, storeURL, n)
	if err != nil {
		return err
	}
	defer sc.stop()

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
			go h.hold(ctx, client, sc.base, i, ttl, acquired)
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
	before, err := sc.sample()
	if err != nil {
		return err
	}
	renewedBefore := h.renewed.Load()
	lostBefore := h.lost.Load()
	start := time.Now()
	time.Sleep(duration)
	after, err := sc.sample()
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		acquired <- err
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		acquired <- err
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		acquired <- fmt.Errorf("stream %d: %s: %s", i, resp.Status, b)
		return
	}
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

// sidecar is the `leasehold serve` process under test.
type sidecar struct {
	cmd  *exec.Cmd
	base string
	logs *os.File
}

var listenRE = regexp.MustCompile(`addr=127\.0\.0\.1:(\d+)`)

func startSidecar(bin, storeURL string, n int) (*sidecar, error) {
	logs, err := os.CreateTemp("", "streambench-sidecar-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--store", storeURL,
		"--max-streams", strconv.Itoa(n+64))
	pr, pw := io.Pipe()
	cmd.Stdout = logs
	cmd.Stderr = io.MultiWriter(logs, pw)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &sidecar{cmd: cmd, logs: logs}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- "http://127.0.0.1:" + m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case s.base = <-addr:
	case <-time.After(60 * time.Second):
		s.stop()
		return nil, fmt.Errorf("the sidecar printed no listening address in 60s (log: %s)", logs.Name())
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("the sidecar was not ready in 60s (log: %s)", logs.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *sidecar) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.logs.Close()
	_ = os.Remove(s.logs.Name())
}

// sample is what the sidecar's counters and /proc say at one moment.
type sample struct {
	renewStmts, renewOps float64
	cpuSeconds           float64
	peakRSSMB            float64
	// The Go runtime's view, for finding where the memory goes.
	heapMB, stackMB, goroutines float64
}

func (s *sidecar) sample() (sample, error) {
	var out sample
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		return out, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return out, err
	}
	text := string(body)
	if out.renewStmts, err = metric(text, `leasehold_store_write_statements_total{operation="renew"}`); err != nil {
		return out, err
	}
	if out.renewOps, err = metric(text, `leasehold_store_write_operations_total{operation="renew"}`); err != nil {
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
		v, err := metric(text, m.series)
		if err != nil {
			return out, err
		}
		*m.dst = v / m.scale
	}
	pid := s.cmd.Process.Pid
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return out, err
	}
	// Fields after the command name (which may hold spaces): utime and
	// stime are the 14th and 15th fields, in clock ticks (100 a second on
	// Linux).
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	out.cpuSeconds = (utime + stime) / 100
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return out, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			out.peakRSSMB = kb / 1024
		}
	}
	return out, nil
}

func metric(text, series string) (float64, error) {
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("the sidecar's /metrics has no %s", series)
}

// raiseFileLimit lifts this process's soft open-file limit to the hard
// limit, and fails when even that cannot hold n streams.
func raiseFileLimit(n int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur < lim.Max {
		old := lim.Cur
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("raise the open-file limit: %w", err)
		}
		fmt.Fprintf(os.Stderr, "streambench: raised the open-file limit from %d to %d\n", old, lim.Cur)
	}
	if need := uint64(n) + 256; lim.Cur < need {
		return fmt.Errorf("%d streams need about %d open files; the hard limit is %d (raise it with ulimit -Hn as root)", n, need, lim.Cur)
	}
	return nil
}

// makeStore returns the store URL for the sidecar and how to remove it.
func makeStore(kind string) (string, func(), error) {
	switch kind {
	case "sqlite":
		dir, err := os.MkdirTemp("", "streambench-")
		if err != nil {
			return "", nil, err
		}
		return "sqlite:" + filepath.Join(dir, "leasehold.db"), func() { os.RemoveAll(dir) }, nil
	case "postgres":
		server := os.Getenv("LEASEHOLD_TEST_POSTGRES_URL")
		if server == "" {
			return "", nil, errors.New("-store postgres needs LEASEHOLD_TEST_POSTGRES_URL (run through scripts/with-postgres.sh)")
		}
		u, err := url.Parse(server)
		if err != nil {
			return "", nil, err
		}
		var b [4]byte
		_, _ = rand.Read(b[:])
		name := "streambench_" + hex.EncodeToString(b[:])
		if err := admin(server, "CREATE DATABASE "+name); err != nil {
			return "", nil, fmt.Errorf("create database: %w", err)
		}
		u.Path = "/" + name
		return u.String(), func() { _ = admin(server, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") }, nil
	}
	return "", nil, fmt.Errorf("-store %q: want sqlite or postgres", kind)
}

func admin(server, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}
