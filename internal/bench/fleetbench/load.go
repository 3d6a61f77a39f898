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
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/bench/benchproc"
	"github.com/leasehold/leasehold/internal/sse"
)

// loadResult is what `fleetbench load` prints as its last line.
type loadResult struct {
	Grants       int64   `json:"grants"` // claims answered 200 with a new grant
	Errors       int64   `json:"errors"` // claims that were not
	FirstError   string  `json:"first_error,omitempty"`
	Seconds      float64 `json:"seconds"` // the claim window, first start to last answer
	P50US        float64 `json:"p50_us"`  // over every claim of the fleet
	P99US        float64 `json:"p99_us"`
	Renewals     int64   `json:"renewals"`      // renewed events during the claim window
	StreamErrors int64   `json:"stream_errors"` // streams and watchers that failed, ended early or lost their lease
	FirstStream  string  `json:"first_stream,omitempty"`
	StoreGrants  int64   `json:"store_grants"` // acquired history rows of the claimed tasks
	WatchEvents  []int   `json:"watch_events"` // acquired events of the claimed tasks each watcher received
	WatchCheck   string  `json:"watch_check,omitempty"`
	Error        string  `json:"error,omitempty"`
}

// loadConfig is `fleetbench load`'s flags.
type loadConfig struct {
	sidecars  []string // base URLs
	conns     int      // claim connections per sidecar
	watchers  int
	streams   int
	streamTTL time.Duration
	duration  time.Duration
	drain     time.Duration
	prefix    string
	db        string // the store's database, reached directly, to check it
}

// claimTTL is the claimed leases' ttl: longer than any point, so that no
// claimed lease expires (an expired event) while the watchers are counted.
const claimTTL = 10 * time.Minute

// loadMain is `fleetbench load`: the fleet's outside clients in one process
// of their own. It holds the keepalive streams and the watchers, prints
// "ready" once every stream holds its lease and every watcher is ready,
// waits for a line on stdin, runs the claim clients for -duration (claims
// started before the end are answered, so the count is exact), prints
// "stopped", lets the watchers catch up, checks them and the grants against
// the store, and prints a loadResult line.
func loadMain(args []string) int {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	var c loadConfig
	sidecars := fs.String("sidecars", "", "the sidecars' base URLs, comma separated")
	fs.IntVar(&c.conns, "conns", 2, "claim connections per sidecar")
	fs.IntVar(&c.watchers, "watchers", 0, "watch streams, spread over the sidecars")
	fs.IntVar(&c.streams, "streams", 0, "keepalive streams, spread over the sidecars")
	fs.DurationVar(&c.streamTTL, "stream-ttl", 3*time.Second, "the keepalive streams' ttl")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to start claims")
	fs.DurationVar(&c.drain, "drain", 30*time.Second, "how long the watchers may take to catch up after the claims")
	fs.StringVar(&c.prefix, "prefix", "fleet", "task name prefix, unique per point")
	fs.StringVar(&c.db, "db", "", "the store's database, reached directly, to count its grants")
	_ = fs.Parse(args)
	c.sidecars = strings.Split(*sidecars, ",")
	res, err := runLoad(c, os.Stdin, os.Stdout)
	if err != nil {
		res.Error = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
	if err != nil {
		return 1
	}
	return 0
}

func runLoad(c loadConfig, in io.Reader, out io.Writer) (loadResult, error) {
	var res loadResult
	if err := benchproc.RaiseFileLimit("fleetbench load", len(c.sidecars)*c.conns+c.watchers+c.streams, "connections"); err != nil {
		return res, err
	}
	claimPrefix, streamPrefix := c.prefix+"-c", c.prefix+"-k"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var closing atomic.Bool // set before cancel: a stream ending after it is no error
	streamClient := &http.Client{Transport: &http.Transport{
		// One connection per stream, none reused.
		MaxIdleConnsPerHost: -1,
		DisableKeepAlives:   true,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	}}
	var (
		held       sync.WaitGroup
		streamErrs atomic.Int64
		firstErr   atomic.Value
		measuring  atomic.Bool
		renewals   atomic.Int64
	)
	streamFail := func(err error) {
		if closing.Load() {
			return
		}
		streamErrs.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	}

	// Keepalive streams and watchers, each waited for.
	var opened sync.WaitGroup
	for i := range c.streams {
		base := c.sidecars[i%len(c.sidecars)]
		u := fmt.Sprintf("%s/v1/leases/%s-%d/keepalive?owner=fleetbench&ttl_ms=%d", base, streamPrefix, i, c.streamTTL.Milliseconds())
		opened.Add(1)
		held.Go(func() {
			keepalive(ctx, streamClient, u, opened.Done, &measuring, &renewals, streamFail)
		})
	}
	ws := make([]*watcher, c.watchers)
	for i := range ws {
		base := c.sidecars[watcherSidecar(i, len(c.sidecars), c.watchers)]
		ws[i] = &watcher{url: base + "/v1/watch?prefix=" + url.QueryEscape(claimPrefix+"-")}
		opened.Add(1)
		held.Go(func() { ws[i].watch(ctx, streamClient, opened.Done, streamFail) })
	}
	opened.Wait()
	if n := streamErrs.Load(); n > 0 {
		return res, fmt.Errorf("%d streams or watchers did not start: %v", n, firstErr.Load())
	}
	clients := make([]*claimClient, 0, len(c.sidecars)*c.conns)
	for s, base := range c.sidecars {
		for k := range c.conns {
			cl, err := newClaimClient(base, fmt.Sprintf("%s-%d-%d", claimPrefix, s, k))
			if err != nil {
				return res, err
			}
			defer cl.close()
			clients = append(clients, cl)
		}
	}
	fmt.Fprintln(out, "ready")
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return res, fmt.Errorf("waiting for the go line: %w", err)
	}

	// The claims.
	measuring.Store(true)
	start := time.Now()
	end := start.Add(c.duration)
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Go(func() { cl.run(end) })
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	measuring.Store(false)
	fmt.Fprintln(out, "stopped")
	res.Renewals = renewals.Load()
	lat := make([][]time.Duration, 0, len(clients))
	for _, cl := range clients {
		res.Grants += cl.grants
		res.Errors += cl.errors
		if res.FirstError == "" && cl.firstErr != nil {
			res.FirstError = cl.firstErr.Error()
		}
		lat = append(lat, cl.latencies)
	}
	all := benchproc.MergeLatencies(lat)
	res.P50US = float64(benchproc.Quantile(all, 0.50).Nanoseconds()) / 1e3
	res.P99US = float64(benchproc.Quantile(all, 0.99).Nanoseconds()) / 1e3

	// The store, then the watchers: every acquired event of the claimed
	// tasks, in id order, once.
	ids, err := storeGrantIDs(c.db, claimPrefix)
	if err != nil {
		return res, fmt.Errorf("read the store's grants: %w", err)
	}
	res.StoreGrants = int64(len(ids))
	for deadline := time.Now().Add(c.drain); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		caught := true
		for _, w := range ws {
			if w.count.Load() < int64(len(ids)) && !w.ended.Load() {
				caught = false
				break
			}
		}
		if caught {
			break
		}
	}
	// Let a watcher that got ahead of the count show an event too many.
	time.Sleep(200 * time.Millisecond)
	closing.Store(true)
	cancel()
	held.Wait()
	var checks []string
	for i, w := range ws {
		res.WatchEvents = append(res.WatchEvents, len(w.ids))
		if msg := compareIDs(ids, w.ids); msg != "" {
			checks = append(checks, fmt.Sprintf("watcher %d: %s", i, msg))
		}
	}
	res.WatchCheck = strings.Join(checks, "; ")
	res.StreamErrors = streamErrs.Load()
	if v, ok := firstErr.Load().(string); ok {
		res.FirstStream = v
	}
	return res, nil
}

// storeGrantIDs is the ids of the acquired events of tasks named
// PREFIX-..., in order.
func storeGrantIDs(dbURL, prefix string) ([]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT id FROM leasehold_history WHERE kind = 'acquired' AND task LIKE $1 ORDER BY id`, benchproc.TasksLike(prefix))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// compareIDs says how a watcher's acquired event ids (got, in the order
// received) differ from the store's (want, ascending); "" when they are
// the same list.
func compareIDs(want, got []int64) string {
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			return fmt.Sprintf("event %d (id %d) came after id %d: out of order or repeated", i, got[i], got[i-1])
		}
	}
	if slices.Equal(want, got) {
		return ""
	}
	missing, extra := 0, 0
	i, j := 0, 0
	for i < len(want) || j < len(got) {
		switch {
		case j == len(got) || i < len(want) && want[i] < got[j]:
			missing++
			i++
		case i == len(want) || got[j] < want[i]:
			extra++
			j++
		default:
			i++
			j++
		}
	}
	return fmt.Sprintf("%d acquired events for the store's %d: %d missing, %d not in the store", len(got), len(want), missing, extra)
}

// keepalive holds one keepalive stream until ctx ends: acquired is called
// once the lease is held (or the stream failed), renewals counts the
// renewed events while measuring is set, and fail hears of a stream that
// did not start, ended early or lost its lease.
func keepalive(ctx context.Context, client *http.Client, u string, acquired func(), measuring *atomic.Bool, renewals *atomic.Int64, fail func(error)) {
	once := sync.OnceFunc(acquired)
	defer once()
	resp, err := benchproc.OpenStream(ctx, client, u)
	if err != nil {
		fail(fmt.Errorf("keepalive: %w", err))
		return
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body)
	for {
		ev, err := r.Next()
		if err != nil {
			fail(fmt.Errorf("keepalive stream %s ended: %v", u, err))
			return
		}
		switch ev.Name {
		case "acquired":
			once()
		case "renewed":
			if measuring.Load() {
				renewals.Add(1)
			}
		default:
			fail(fmt.Errorf("keepalive stream %s: %s: %s", u, ev.Name, ev.Data))
			return
		}
	}
}

// watcher is one watch stream and the acquired events it received.
type watcher struct {
	url   string
	ids   []int64 // read once the stream's goroutine has returned
	count atomic.Int64
	ended atomic.Bool
}

// watch reads the stream until ctx ends; ready is called once it is ready
// (or failed), fail hears of anything but acquired events once ready.
func (w *watcher) watch(ctx context.Context, client *http.Client, ready func(), fail func(error)) {
	once := sync.OnceFunc(ready)
	defer once()
	defer w.ended.Store(true)
	resp, err := benchproc.OpenStream(ctx, client, w.url)
	if err != nil {
		fail(fmt.Errorf("watch: %w", err))
		return
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body)
	for {
		ev, err := r.Next()
		if err != nil {
			fail(fmt.Errorf("watch stream %s ended: %v", w.url, err))
			return
		}
		switch ev.Name {
		case "ready":
			once()
		case "acquired":
			id, err := strconv.ParseInt(ev.ID, 10, 64)
			if err != nil {
				fail(fmt.Errorf("watch stream %s: acquired event with id %q", w.url, ev.ID))
				return
			}
			w.ids = append(w.ids, id)
			w.count.Add(1)
		default:
			fail(fmt.Errorf("watch stream %s: %s: %s", w.url, ev.Name, ev.Data))
			return
		}
	}
}

// claimClient is one keep-alive HTTP/1.1 connection to a sidecar that
// claims a new task per request. It writes requests and reads answers on
// the connection itself (http.ReadResponse) rather than through
// net/http's client, whose per-request cost is several times wrk's: on a
// 2-core machine the clients' CPU is taken from the sidecars and
// PostgreSQL.
type claimClient struct {
	addr, host string
	owner      string
	prefix     string
	conn       net.Conn
	br         *bufio.Reader
	buf        []byte
	n          int

	grants, errors int64
	firstErr       error
	latencies      []time.Duration
}

func newClaimClient(base, prefix string) (*claimClient, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	c := &claimClient{addr: u.Host, host: u.Host, prefix: prefix, owner: "fleetbench-" + prefix[strings.LastIndexByte(prefix, '-')+1:]}
	if err := c.dial(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *claimClient) dial() error {
	conn, err := net.DialTimeout("tcp", c.addr, 10*time.Second)
	if err != nil {
		return err
	}
	c.conn, c.br = conn, bufio.NewReaderSize(conn, 4096)
	return nil
}

func (c *claimClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

var acquiredTrue = []byte(`"acquired":true`)

// run claims new tasks until end; a claim started before end is answered.
func (c *claimClient) run(end time.Time) {
	body := fmt.Sprintf(`{"owner":%q,"ttl_ms":%d}`, c.owner, claimTTL.Milliseconds())
	for time.Now().Before(end) {
		c.n++
		c.buf = fmt.Appendf(c.buf[:0], "POST /v1/leases/%s-%d/claim HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			c.prefix, c.n, c.host, len(body), body)
		start := time.Now()
		answer, err := c.roundTrip()
		lat := time.Since(start)
		if err == nil && !bytes.Contains(answer, acquiredTrue) {
			err = fmt.Errorf("claim %s-%d: not a new grant: %s", c.prefix, c.n, answer)
		}
		if err != nil {
			c.errors++
			if c.firstErr == nil {
				c.firstErr = err
			}
			c.close()
			if c.dial() != nil {
				time.Sleep(100 * time.Millisecond) // and try again: each failure is counted
			}
			continue
		}
		c.grants++
		c.latencies = append(c.latencies, lat)
	}
}

// roundTrip sends the request in c.buf and reads the answer, which must be
// 200; the connection stays open unless the sidecar closes it.
func (c *claimClient) roundTrip() ([]byte, error) {
	if c.conn == nil {
		return nil, errors.New("not connected")
	}
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.conn.Write(c.buf); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, err
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("claim: %s: %s", resp.Status, answer)
	}
	if resp.Close {
		c.close()
		if err := c.dial(); err != nil {
			return answer, err
		}
	}
	return answer, nil
}
