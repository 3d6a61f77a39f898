// Command watchbench measures what the watch (GET /v1/watch) costs a
// sidecar and its store per watcher.
//
// For each watcher count W it starts `leasehold serve` as a process of its
// own on a new, empty store, opens W watch streams to it (each its own TCP
// connection, read and parsed here), waits for every stream's `ready`, then
// drives a fixed lease load from this process: a claim and a release of one
// of -tasks tasks, -rate pairs a second paced by a ticker (not as fast as
// possible), so every watcher should hear 2 × rate events a second. It
// reports, in Go benchmark format (so that benchstat reads it):
//
//   - missed: events the load's own answers say were recorded that a watcher
//     did not receive, plus events received twice or not made by the load
//     (target 0; any other figure fails the run);
//   - events/s/watcher: events each watcher received per second of load;
//   - MB-rss-delta, KB-rss/watcher, KB-heap/watcher: the sidecar's resident
//     memory (VmRSS) and Go heap in use (go_memstats_heap_inuse_bytes) once
//     the W streams are ready, minus before the first was opened (the first
//     watcher also starts the sidecar's one history follower, so W=1 carries
//     that fixed cost); -loaded: the same at the end of the measured window,
//     with the load running (events in the watchers' buffers and the
//     streams' write buffers, and the load's own share, which W=0 shows);
//   - pairs/s: the load's claims per second (each followed by a release);
//   - read_history/s, follow_history/s, record_expiries/s, watch-calls/s: the
//     store calls the watch makes, per second, from the deltas of the
//     sidecar's leasehold_store_operation_duration_seconds counts;
//   - pg-xact/s (PostgreSQL): the server's own count of committed
//     transactions in the bench's database (pg_stat_database.xact_commit) per
//     second of load. It counts every transaction, the load's claims and
//     releases included, so compare it with W=0's. PostgreSQL's backends
//     report their counts late (an idle one within 10 s), so the count runs
//     from a quiet moment before the load to 11 s after it: it includes the
//     few idle reads of the history in those 11 s;
//   - ms-p50, ms-p99: delivery latency, from the claim's (or release's)
//     answer reaching this process to the event reaching a watcher in this
//     process (one clock); slightly negative when the event overtakes the
//     answer;
//   - cpu-cores: the sidecar's CPU time (user + system) per second.
//
// The sidecar's rates and CPU come from two samples taken while the load
// runs, -warmup after it starts and -duration later. Events are checked
// over the whole load, and after it stops each watcher has -drain to
// receive the rest.
//
// Usage (make bench-watch runs it on both stores):
//
//	go run ./internal/bench/watchbench -leasehold bin/leasehold -store sqlite -watchers "0 1 100 1000" -duration 20s
//	go run ./internal/bench/watchbench -leasehold bin/leasehold -store postgres -watchers 100
//
// -store postgres creates a database of its own per point on the server in
// LEASEHOLD_TEST_POSTGRES_URL (scripts/with-postgres.sh sets it) and drops
// it afterwards; -store sqlite uses a file in a temporary directory.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasehold/leasehold/internal/bench/benchproc"
)

const tool = "watchbench"

// pgStatsSettle is longer than PostgreSQL's backends wait, idle, before
// reporting their statistics (PGSTAT_IDLE_INTERVAL, 10 s).
const pgStatsSettle = 11 * time.Second

// watchOps are the store operations the watch makes.
var watchOps = []string{"read_history", "follow_history", "record_expiries"}

type config struct {
	bin, store             string
	duration, warmup       time.Duration
	drain                  time.Duration
	rate                   int
	tasks                  int
	openConcurrency        int
	watchers               []int
	leaseTTL               time.Duration
	owner                  string
	pairs                  int // claim + release pairs per point
	taskPrefix             string
	maxTokensPerTask, nKey int
}

func main() {
	var (
		c        config
		watchers string
	)
	flag.StringVar(&c.bin, "leasehold", "bin/leasehold", "the leasehold binary to run")
	flag.StringVar(&c.store, "store", "sqlite", "sqlite, or postgres (a new database on LEASEHOLD_TEST_POSTGRES_URL's server)")
	flag.StringVar(&watchers, "watchers", "0 1 100 1000", "watcher counts to measure, each on a fresh sidecar and store")
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "measured load per point")
	flag.DurationVar(&c.warmup, "warmup", 2*time.Second, "load before the measured window starts")
	flag.DurationVar(&c.drain, "drain", 10*time.Second, "how long watchers may take to receive the last events once the load stops")
	flag.IntVar(&c.rate, "rate", 100, "claim + release pairs per second")
	flag.IntVar(&c.tasks, "tasks", 50, "tasks the load cycles through")
	flag.IntVar(&c.openConcurrency, "open-concurrency", 64, "watch streams opened at once")
	flag.Parse()
	for f := range strings.FieldsSeq(watchers) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "watchbench: -watchers: %q is not a count of watchers\n", f)
			os.Exit(2)
		}
		c.watchers = append(c.watchers, n)
	}
	if c.rate <= 0 || c.tasks <= 0 || c.duration <= 0 || c.warmup < 0 {
		fmt.Fprintln(os.Stderr, "watchbench: -rate, -tasks and -duration must be positive, -warmup not negative")
		os.Exit(2)
	}
	c.leaseTTL = 30 * time.Second // longer than any pair: no lease expires under the load
	c.owner = "watchbench"
	c.taskPrefix = "watchbench-"
	c.pairs = int(float64(c.rate) * (c.warmup + c.duration).Seconds())
	// Each pair on a task takes its next token, from 1 on a new store; a
	// margin in case the store starts elsewhere.
	c.maxTokensPerTask = c.pairs/c.tasks + 2
	c.nKey = 2 * c.tasks * c.maxTokensPerTask

	failed := false
	for _, w := range c.watchers {
		ok, err := runPoint(&c, w)
		if err != nil {
			fmt.Fprintf(os.Stderr, "watchbench: store=%s watchers=%d: %v\n", c.store, w, err)
			os.Exit(1)
		}
		failed = failed || !ok
	}
	if failed {
		fmt.Fprintln(os.Stderr, "watchbench: FAIL: some watchers missed events (see above)")
		os.Exit(1)
	}
}

// key numbers an event the load can cause: kind (0 acquired, 1 released),
// task and token.
func (c *config) key(kind, task int, token int64) (int, bool) {
	if task < 0 || task >= c.tasks || token < 1 || token > int64(c.maxTokensPerTask) {
		return 0, false
	}
	return (kind*c.maxTokensPerTask+int(token-1))*c.tasks + task, true
}

// runPoint measures one watcher count on a fresh store and sidecar; ok is
// false when events went missing.
func runPoint(c *config, n int) (ok bool, err error) {
	if err := benchproc.RaiseFileLimit(tool, n, "watchers"); err != nil {
		return false, err
	}
	storeURL, cleanup, err := benchproc.NewStore(tool, c.store)
	if err != nil {
		return false, err
	}
	defer cleanup()
	sc, err := benchproc.StartSidecar(tool, c.bin, storeURL, "--max-watchers", strconv.Itoa(n+16))
	if err != nil {
		return false, err
	}
	defer sc.Stop()
	var pg *pgx.Conn
	if c.store == "postgres" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		pg, err = pgx.Connect(ctx, storeURL)
		cancel()
		if err != nil {
			return false, err
		}
		defer pg.Close(context.Background())
	}

	base := time.Now()
	answers := make([]atomic.Int64, c.nKey) // ns after base when the load's answer came; 0: none
	before, err := takeSample(sc)
	if err != nil {
		return false, err
	}

	// Open the watchers and wait for every ready.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := &http.Client{Transport: &http.Transport{
		// One connection per watcher, none reused.
		MaxIdleConnsPerHost: -1,
		DisableKeepAlives:   true,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	}}
	ws := make([]*watcher, n)
	openStart := time.Now()
	sem := make(chan struct{}, c.openConcurrency)
	var wg sync.WaitGroup
	var openErr atomic.Value
	var running sync.WaitGroup
	for i := range ws {
		w := &watcher{c: c, base: base, arrived: make([]int64, c.nKey)}
		ws[i] = w
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ready := make(chan error, 1)
			running.Go(func() { w.watch(ctx, client, sc.Base, ready) })
			if err := <-ready; err != nil {
				openErr.CompareAndSwap(nil, err)
			}
		})
	}
	wg.Wait()
	if err, _ := openErr.Load().(error); err != nil {
		return false, fmt.Errorf("opening watch streams: %w", err)
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "watchbench: store=%s: %d watchers ready in %s\n", c.store, n, time.Since(openStart).Round(time.Millisecond))
	}
	time.Sleep(time.Second) // let the streams' first writes and the follower settle
	connected, err := takeSample(sc)
	if err != nil {
		return false, err
	}

	// The load: the pacer hands pair k to task k % tasks, whose own goroutine
	// claims and releases it, so that pairs on different tasks may overlap
	// and pairs on one task never do.
	l := &load{c: c, base: base, answers: answers, url: sc.Base,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: c.tasks}}}
	queues := make([]chan struct{}, c.tasks)
	var workers sync.WaitGroup
	for t := range queues {
		queues[t] = make(chan struct{}, 8)
		workers.Go(func() {
			for range queues[t] {
				l.pair(t)
			}
		})
	}
	var xacts0 float64
	if pg != nil {
		// Backends report their counts to pg_stat_database about once a
		// second when busy, but an idle one within 10 s, and a busy one
		// may defer its report when the statistics are in use: count from a
		// quiet moment to another, around the whole load.
		time.Sleep(pgStatsSettle)
		if xacts0, err = pgXacts(pg); err != nil {
			return false, err
		}
	}
	loadStart := time.Now()
	dispatched := make(chan struct{})
	go func() {
		// Each tick hands out the pairs due by then, so that the rate
		// holds on average even when a busy machine delays or drops ticks.
		defer close(dispatched)
		tick := time.NewTicker(time.Second / time.Duration(c.rate))
		defer tick.Stop()
		for k := 0; k < c.pairs; {
			<-tick.C
			due := min(c.pairs, int(time.Since(loadStart).Seconds()*float64(c.rate)))
			for ; k < due; k++ {
				queues[k%c.tasks] <- struct{}{}
			}
		}
	}()
	// The window is sampled while the load runs.
	time.Sleep(time.Until(loadStart.Add(c.warmup)))
	m0, err := takeSample(sc)
	if err != nil {
		return false, err
	}
	time.Sleep(time.Until(m0.at.Add(c.duration)))
	m1, err := takeSample(sc)
	if err != nil {
		return false, err
	}
	<-dispatched
	for _, q := range queues {
		close(q)
	}
	workers.Wait()
	loadTime := time.Since(loadStart)
	if e := l.errors.Load(); e > 0 {
		return false, fmt.Errorf("%d claims or releases failed: %v", e, l.firstErr.Load())
	}

	// Drain: every watcher should now receive what is left.
	expected := 0
	for i := range answers {
		if answers[i].Load() != 0 {
			expected++
		}
	}
	deadline := time.Now().Add(c.drain)
	for time.Now().Before(deadline) {
		done := true
		for _, w := range ws {
			if w.received.Load() < int64(expected) && !w.ended.Load() {
				done = false
				break
			}
		}
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	end, err := takeSample(sc)
	if err != nil {
		return false, err
	}
	var xacts float64
	if pg != nil {
		time.Sleep(time.Until(loadStart.Add(loadTime + pgStatsSettle)))
		x, err := pgXacts(pg)
		if err != nil {
			return false, err
		}
		xacts = x - xacts0
	}
	cancel()
	for _, w := range ws {
		w.closeBody()
	}
	running.Wait()

	// Tally.
	var missed, extra int64
	lat := make([]int64, 0, n*expected)
	for _, w := range ws {
		extra += w.extra.Load()
		for k := range answers {
			a := answers[k].Load()
			switch got := w.arrived[k]; {
			case a == 0 && got != 0:
				extra++ // not a pair the load saw answered
			case a != 0 && got == 0:
				missed++
			case a != 0:
				lat = append(lat, got-a)
			}
		}
	}
	slices.Sort(lat)
	window := m1.at.Sub(m0.at).Seconds()
	name := fmt.Sprintf("BenchmarkWatch/store=%s/watchers=%d", c.store, n)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\t1\t%d ns/op\t%d missed", name, int64(window*1e9), missed+extra)
	fmt.Fprintf(&b, "\t%.1f pairs/s", (m1.ops["claim"]-m0.ops["claim"])/window)
	rssDelta := connected.rssMB - before.rssMB
	fmt.Fprintf(&b, "\t%.2f MB-rss-delta", rssDelta)
	if n > 0 {
		var received int64
		from, to := int64(m0.at.Sub(base)), int64(m1.at.Sub(base))
		for _, w := range ws {
			for _, at := range w.arrived {
				if at >= from && at < to {
					received++
				}
			}
		}
		perW := func(mb float64) float64 { return mb * 1024 / float64(n) }
		fmt.Fprintf(&b, "\t%.1f events/s/watcher", float64(received)/float64(n)/window)
		fmt.Fprintf(&b, "\t%.1f KB-rss/watcher\t%.1f KB-heap/watcher\t%.1f KB-rss/watcher-loaded\t%.1f KB-heap/watcher-loaded",
			perW(rssDelta), perW(connected.heapMB-before.heapMB), perW(m1.rssMB-before.rssMB), perW(m1.heapMB-before.heapMB))
	}
	var watchCalls float64
	for _, op := range watchOps {
		r := (m1.ops[op] - m0.ops[op]) / window
		watchCalls += r
		fmt.Fprintf(&b, "\t%.2f %s/s", r, op)
	}
	fmt.Fprintf(&b, "\t%.2f watch-calls/s", watchCalls)
	if pg != nil {
		fmt.Fprintf(&b, "\t%.1f pg-xact/s", xacts/loadTime.Seconds())
	}
	if len(lat) > 0 {
		fmt.Fprintf(&b, "\t%.3f ms-p50\t%.3f ms-p99", pct(lat, 0.50), pct(lat, 0.99))
	}
	fmt.Fprintf(&b, "\t%.3f cpu-cores", (m1.cpuSeconds-m0.cpuSeconds)/window)
	fmt.Println(b.String())

	var others []string
	for op, v := range m1.ops {
		if d := v - m0.ops[op]; d > 0 && !slices.Contains(watchOps, op) {
			others = append(others, fmt.Sprintf("%s %.1f/s", op, d/window))
		}
	}
	slices.Sort(others)
	fmt.Fprintf(os.Stderr, "watchbench: store=%s watchers=%d: other store calls: %s; after the load: RSS %+.1f MB, heap %+.1f MB, %.0f goroutines (from before the watchers)\n",
		c.store, n, strings.Join(others, ", "), end.rssMB-before.rssMB, end.heapMB-before.heapMB, end.goroutines)
	if missed+extra > 0 {
		var ended int
		for _, w := range ws {
			if w.ended.Load() {
				ended++
			}
		}
		fmt.Fprintf(os.Stderr, "watchbench: store=%s watchers=%d: FAIL: %d events missed, %d unexpected or repeated, %d streams ended early (%d events expected per watcher)\n",
			c.store, n, missed, extra, ended, expected)
		return false, nil
	}
	return true, nil
}

// pct is the q-quantile of sorted nanoseconds, in milliseconds.
func pct(sorted []int64, q float64) float64 {
	i := int(q * float64(len(sorted)-1))
	return float64(sorted[i]) / 1e6
}

// load drives the claims and releases and notes when each was answered.
type load struct {
	c        *config
	base     time.Time
	answers  []atomic.Int64
	client   *http.Client
	url      string
	pairs    atomic.Int64
	errors   atomic.Int64
	firstErr atomic.Value
}

func (l *load) fail(err error) {
	l.errors.Add(1)
	l.firstErr.CompareAndSwap(nil, err)
}

// pair claims task t and releases it.
func (l *load) pair(t int) {
	task := fmt.Sprintf("%s%03d", l.c.taskPrefix, t)
	var claimed struct {
		Acquired bool `json:"acquired"`
		Lease    struct {
			Token int64 `json:"token"`
		} `json:"lease"`
	}
	if err := l.post(task, "claim", map[string]any{"owner": l.c.owner, "ttl_ms": l.c.leaseTTL.Milliseconds()}, &claimed); err != nil {
		l.fail(err)
		return
	}
	at := int64(time.Since(l.base))
	if !claimed.Acquired {
		l.fail(fmt.Errorf("claim %s: not acquired", task))
		return
	}
	k, ok := l.c.key(0, t, claimed.Lease.Token)
	if !ok {
		l.fail(fmt.Errorf("claim %s: token %d is beyond the tokens this load expects", task, claimed.Lease.Token))
		return
	}
	l.answers[k].Store(at)
	var released struct {
		Released bool `json:"released"`
	}
	if err := l.post(task, "release", map[string]any{"owner": l.c.owner, "token": claimed.Lease.Token}, &released); err != nil {
		l.fail(err)
		return
	}
	at = int64(time.Since(l.base))
	if !released.Released {
		l.fail(fmt.Errorf("release %s: not released", task))
		return
	}
	k, _ = l.c.key(1, t, claimed.Lease.Token)
	l.answers[k].Store(at)
	l.pairs.Add(1)
}

func (l *load) post(task, verb string, body, into any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := l.client.Post(l.url+"/v1/leases/"+task+"/"+verb, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", verb, task, resp.Status, data)
	}
	return json.Unmarshal(data, into)
}

// watcher is one watch stream and what it received.
type watcher struct {
	c        *config
	base     time.Time
	arrived  []int64 // by key: ns after base when the event arrived; 0: not yet
	received atomic.Int64
	extra    atomic.Int64 // events not made by the load, repeated, or unreadable
	ended    atomic.Bool  // the stream ended before the bench closed it
	mu       sync.Mutex
	body     io.Closer
}

func (w *watcher) closeBody() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.body != nil {
		w.body.Close()
	}
}

// watch opens the stream and reads it until ctx ends; ready receives nil
// after the ready event, or the reason the stream did not get there.
//
// The events' data is picked apart by hand rather than with encoding/json:
// 1,000 watchers hearing 200 events a second are 200,000 events a second to
// parse on the machine that also runs the sidecar.
func (w *watcher) watch(ctx context.Context, client *http.Client, base string, ready chan<- error) {
	resp, err := benchproc.OpenStream(ctx, client, base+"/v1/watch")
	if err != nil {
		ready <- fmt.Errorf("watch: %w", err)
		return
	}
	w.mu.Lock()
	w.body = resp.Body
	w.mu.Unlock()
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 16<<10)
	isReady := false
	kind := ""
	var lastID int64
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			break
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		switch {
		case bytes.HasPrefix(line, []byte("event: ")):
			kind = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			data := line[len("data: "):]
			switch kind {
			case "ready":
				isReady = true
				ready <- nil
			case "end":
				fmt.Fprintf(os.Stderr, "watchbench: a watch stream ended: %s\n", data)
			case "acquired", "released", "expired", "taken_over", "lost":
				at := int64(time.Since(w.base))
				id, ok1 := jsonInt(data, "id")
				token, ok2 := jsonInt(data, "token")
				task, ok3 := jsonString(data, "task")
				if ok3 && !strings.HasPrefix(task, w.c.taskPrefix) {
					// The sidecar's own leases (its prune job's): not the load's.
					continue
				}
				t, err := strconv.Atoi(strings.TrimPrefix(task, w.c.taskPrefix))
				kindIdx := 0
				if kind == "released" {
					kindIdx = 1
				}
				k, ok4 := w.c.key(kindIdx, t, token)
				if kind != "acquired" && kind != "released" || !ok1 || !ok2 || !ok3 || err != nil || !ok4 || id <= lastID || w.arrived[k] != 0 {
					w.extra.Add(1)
					continue
				}
				lastID = id
				w.arrived[k] = at
				w.received.Add(1)
			default:
				w.extra.Add(1)
			}
		}
	}
	if ctx.Err() == nil {
		w.ended.Store(true)
	}
	if !isReady {
		ready <- errors.New("the watch stream ended before its ready event")
	}
}

// jsonInt finds "name":N in a flat JSON object.
func jsonInt(data []byte, name string) (int64, bool) {
	i := bytes.Index(data, []byte(`"`+name+`":`))
	if i < 0 {
		return 0, false
	}
	rest := data[i+len(name)+3:]
	j := bytes.IndexAny(rest, ",}")
	if j < 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return v, err == nil
}

// jsonString finds "name":"S" in a flat JSON object (S without escapes, as
// the bench's task names are).
func jsonString(data []byte, name string) (string, bool) {
	i := bytes.Index(data, []byte(`"`+name+`":"`))
	if i < 0 {
		return "", false
	}
	rest := data[i+len(name)+4:]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return "", false
	}
	return string(rest[:j]), true
}

// sample is what the sidecar's counters, /proc and PostgreSQL say at one
// moment.
type sample struct {
	at                 time.Time
	ops                map[string]float64 // store calls so far, by operation
	cpuSeconds         float64
	rssMB              float64
	heapMB, goroutines float64
}

var opCountRE = regexp.MustCompile(`(?m)^leasehold_store_operation_duration_seconds_count\{operation="([a-z_]+)"\} (\S+)$`)

func takeSample(sc *benchproc.Sidecar) (sample, error) {
	out := sample{at: time.Now(), ops: map[string]float64{}}
	text, err := sc.Metrics()
	if err != nil {
		return out, err
	}
	// The watch's operations have no series until their first call.
	for _, m := range opCountRE.FindAllStringSubmatch(text, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return out, err
		}
		out.ops[m[1]] = v
	}
	if len(out.ops) == 0 {
		return out, errors.New("the sidecar's /metrics has no leasehold_store_operation_duration_seconds_count")
	}
	heap, err := benchproc.Metric(text, "go_memstats_heap_inuse_bytes")
	if err != nil {
		return out, err
	}
	out.heapMB = heap / (1 << 20)
	if out.goroutines, err = benchproc.Metric(text, "go_goroutines"); err != nil {
		return out, err
	}
	out.cpuSeconds, out.rssMB, err = sc.Usage("VmRSS")
	return out, err
}

// pgXacts is PostgreSQL's count of committed transactions in the bench's
// database.
func pgXacts(pg *pgx.Conn) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var x int64
	if err := pg.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").Scan(&x); err != nil {
		return 0, fmt.Errorf("read pg_stat_database: %w", err)
	}
	return float64(x), nil
}
