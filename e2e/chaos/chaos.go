// Package chaos runs a lease load against a set of sidecars while faults
// are injected, and records every operation for e2e/leasecheck.
//
// Clients, in Go and in python3's standard library (a script of its own,
// e2e/testdata/chaos_client.py, so part of the load does not go through
// any Go HTTP code), pick tasks at random from a shared pool and behave as
// lease users do: claim with a short ttl, renew a few times with their
// token, then release, or abandon the lease (stop renewing without
// releasing), sometimes renewing once more after it must have expired. Requests time out quickly, so a fault
// turns into indeterminate ops rather than a stalled run; a client never
// takes a lost answer as a fact (it may hold a lease it thinks it does
// not), which is the checker's business, not the client's.
//
// Faults are values (Fault) that do their damage and their repair in
// Inject; Run injects them one after another, in turn, with a gap between
// them, for as long as the load runs. A test builds its faults from what it
// controls (processes, a database, a faultproxy.Proxy) and gets back the
// history and a log of the faults.
//
// How long the load runs is not a fixed time, so that a slow machine makes
// a run longer rather than a test fail: it runs for at least Duration, and
// then until it has seen MinGrants grants and every fault has been injected
// once, but no longer than MaxDuration; a run stopped there says so in
// Result.Unfinished.
package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/e2e/leasecheck"
	"github.com/leasehold/leasehold/internal/harness/faultproxy"
)

// Fault is one kind of damage. Inject does it and repairs it before
// returning (a frozen process is resumed, a cut link restored); it should
// finish its repair even when ctx ends meanwhile.
type Fault interface {
	Name() string
	Inject(ctx context.Context) error
}

type funcFault struct {
	name string
	fn   func(context.Context) error
}

func (f funcFault) Name() string                     { return f.name }
func (f funcFault) Inject(ctx context.Context) error { return f.fn(ctx) }

// NewFault makes a Fault of a function.
func NewFault(name string, inject func(ctx context.Context) error) Fault {
	return funcFault{name: name, fn: inject}
}

// Freeze stops the process pid() with SIGSTOP, waits hold, and resumes it
// with SIGCONT. pid is called at each injection, so it may follow a process
// that another fault restarted.
func Freeze(name string, pid func() int, hold time.Duration) Fault {
	return NewFault(name, func(context.Context) error {
		p := pid()
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("SIGSTOP %d: %w", p, err)
		}
		time.Sleep(hold) // the fault is the pause itself
		if err := syscall.Kill(p, syscall.SIGCONT); err != nil {
			return fmt.Errorf("SIGCONT %d: %w", p, err)
		}
		return nil
	})
}

// CutLink cuts the proxy's links for hold, then restores it.
func CutLink(name string, p *faultproxy.Proxy, hold time.Duration) Fault {
	return NewFault(name, func(context.Context) error {
		p.Cut()
		time.Sleep(hold) // the fault is the outage itself
		p.Restore()
		return nil
	})
}

// FaultEvent is one injection.
type FaultEvent struct {
	Name       string
	Start, End time.Time
	Err        error
}

// Config describes a run.
type Config struct {
	// URLs are the sidecars' base URLs (http://127.0.0.1:PORT). Each
	// operation goes to one of them at random; a sidecar restarted by a
	// fault must come back at the same URL.
	URLs []string
	// GoClients and PythonClients are how many clients of each kind run.
	GoClients, PythonClients int
	// PythonScript is the path of the python3 client (chaos_client.py);
	// Python the interpreter (default python3).
	PythonScript, Python string
	// Tasks is the size of the task pool, named TaskPrefix + number.
	Tasks      int
	TaskPrefix string
	// Duration is how long the load runs at least. It goes on until
	// MinGrants claims have been answered with a new grant and every fault
	// has been injected once, and stops at MaxDuration (default Duration)
	// even if not.
	Duration, MaxDuration time.Duration
	MinGrants             int
	// MinTTL and MaxTTL bound each lease's ttl (default 300 and 800 ms).
	MinTTL, MaxTTL time.Duration
	// RequestTimeout bounds each request (default 1 s).
	RequestTimeout time.Duration
	// Faults are injected in turn, each FaultGap after the previous one
	// ended (default 2 s), until the load ends, or, when Rounds is
	// positive, until each has been injected Rounds times.
	Faults   []Fault
	FaultGap time.Duration
	Rounds   int
	// Logf, when set, gets a line per fault as it happens.
	Logf func(format string, args ...any)
}

// Result is a run's history and fault log.
type Result struct {
	Ops    []leasecheck.Op
	Faults []FaultEvent
	// Errors are the harness's own troubles: answers outside the contract,
	// python clients that failed. A sound run has none.
	Errors []string
	Took   time.Duration
	// Grants counts the claims answered with a new grant.
	Grants int
	// Unfinished, when not empty, says what the load had not reached when
	// MaxDuration stopped it.
	Unfinished string
}

// OpsByClientKind counts the ops of the Go clients ("go") and of the
// python3 clients ("python").
func (r *Result) OpsByClientKind() map[string]int {
	m := map[string]int{}
	for _, op := range r.Ops {
		if strings.HasPrefix(op.Client, "py-") {
			m["python"]++
		} else {
			m["go"]++
		}
	}
	return m
}

// IndeterminateCauses counts the indeterminate ops by what made them so:
// timeout, refused, broken (reset, EOF), HTTP status (503 unavailable; any
// other is also in Errors), or other.
func (r *Result) IndeterminateCauses() map[string]int {
	m := map[string]int{}
	for _, op := range r.Ops {
		if op.Out != leasecheck.Indeterminate {
			continue
		}
		why := strings.ToLower(op.Reason)
		switch {
		case strings.Contains(why, "timeout") || strings.Contains(why, "timed out") || strings.Contains(why, "deadline"):
			m["timeout"]++
		case strings.Contains(why, "refused"):
			m["refused"]++
		case strings.Contains(why, "reset") || strings.Contains(why, "eof") || strings.Contains(why, "broken") ||
			strings.Contains(why, "closed") || strings.Contains(why, "disconnect"):
			m["broken"]++
		case strings.HasPrefix(why, "http "):
			m[why]++
		default:
			m["other"]++
		}
	}
	return m
}

// FaultsByKind counts the injections that succeeded, by fault name.
func (r *Result) FaultsByKind() map[string]int {
	m := map[string]int{}
	for _, f := range r.Faults {
		if f.Err == nil {
			m[f.Name]++
		}
	}
	return m
}

// FaultSummary is FaultsByKind on one line, in a stable order.
func (r *Result) FaultSummary() string {
	m := r.FaultsByKind()
	var names []string
	for _, f := range r.Faults {
		if _, ok := m[f.Name]; ok && !contains(names, f.Name) {
			names = append(names, f.Name)
		}
	}
	var parts []string
	total := 0
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d", n, m[n]))
		total += m[n]
	}
	failed := len(r.Faults) - total
	return fmt.Sprintf("faults injected %d (%s), failed %d", total, strings.Join(parts, ", "), failed)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Run runs the load and the faults (see the package doc for how long) and
// returns what happened. It returns an error only when the run could not
// start.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if len(cfg.URLs) == 0 || cfg.Tasks <= 0 || cfg.Duration <= 0 || cfg.GoClients+cfg.PythonClients <= 0 {
		return nil, errors.New("chaos: Config needs URLs, Tasks, Duration and clients")
	}
	if cfg.PythonClients > 0 && cfg.PythonScript == "" {
		return nil, errors.New("chaos: PythonClients needs PythonScript")
	}
	if cfg.MinTTL <= 0 {
		cfg.MinTTL = 300 * time.Millisecond
	}
	if cfg.MaxTTL < cfg.MinTTL {
		cfg.MaxTTL = max(cfg.MinTTL, 800*time.Millisecond)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = time.Second
	}
	if cfg.FaultGap <= 0 {
		cfg.FaultGap = 2 * time.Second
	}
	if cfg.MaxDuration < cfg.Duration {
		cfg.MaxDuration = cfg.Duration
	}
	if cfg.Python == "" {
		cfg.Python = "python3"
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}

	res := &Result{}
	var mu sync.Mutex
	record := func(op leasecheck.Op, err error) {
		mu.Lock()
		defer mu.Unlock()
		res.Ops = append(res.Ops, op)
		if op.Out == leasecheck.Acquired && op.Lease != nil && op.Lease.RenewCount == 0 {
			res.Grants++
		}
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
		}
	}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		res.Errors = append(res.Errors, err.Error())
	}

	start := time.Now()
	load, stop := context.WithTimeout(ctx, cfg.MaxDuration)
	defer stop()
	var wg sync.WaitGroup

	// Python clients first: the interpreter takes a moment to start. They
	// stop when their stdin is closed, which the load's end does.
	for i := range cfg.PythonClients {
		cmd, in, out, err := startPython(ctx, cfg, i)
		if err != nil {
			stop()
			wg.Wait()
			return nil, err
		}
		wg.Go(func() {
			<-load.Done()
			in.Close()
		})
		wg.Go(func() { readPython(fmt.Sprintf("py-%d", i), cmd, out, record, fail) })
	}

	// The load ends once it has run Duration and reached its targets, or
	// at MaxDuration.
	wg.Go(func() {
		if !sleep(load, cfg.Duration) {
			return
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			mu.Lock()
			done := res.Grants >= cfg.MinGrants && len(res.Faults) >= len(cfg.Faults)
			mu.Unlock()
			if done {
				stop()
				return
			}
			select {
			case <-load.Done():
				return
			case <-tick.C:
			}
		}
	})

	transport := &http.Transport{MaxIdleConnsPerHost: 4 * (cfg.GoClients + 1), IdleConnTimeout: 30 * time.Second}
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: transport, Timeout: cfg.RequestTimeout}
	for i := range cfg.GoClients {
		c := &client{cfg: cfg, hc: hc, name: fmt.Sprintf("go-%d", i), rng: rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano()))), record: record}
		wg.Go(func() { c.run(load) })
	}

	wg.Go(func() {
		for i := 0; len(cfg.Faults) > 0 && (cfg.Rounds <= 0 || i < cfg.Rounds*len(cfg.Faults)); i++ {
			if !sleep(load, cfg.FaultGap) {
				return
			}
			f := cfg.Faults[i%len(cfg.Faults)]
			ev := FaultEvent{Name: f.Name(), Start: time.Now()}
			ev.Err = f.Inject(ctx)
			ev.End = time.Now()
			if ev.Err != nil {
				cfg.Logf("fault %s at +%s failed: %v", ev.Name, ev.Start.Sub(start).Round(time.Millisecond), ev.Err)
			} else {
				cfg.Logf("fault %s at +%s for %s", ev.Name, ev.Start.Sub(start).Round(time.Millisecond), ev.End.Sub(ev.Start).Round(time.Millisecond))
			}
			mu.Lock()
			res.Faults = append(res.Faults, ev)
			mu.Unlock()
		}
	})
	wg.Wait()
	res.Took = time.Since(start)
	if ctx.Err() == nil && errors.Is(load.Err(), context.DeadlineExceeded) {
		var missed []string
		if res.Grants < cfg.MinGrants {
			missed = append(missed, fmt.Sprintf("%d grants of %d", res.Grants, cfg.MinGrants))
		}
		if len(res.Faults) < len(cfg.Faults) {
			missed = append(missed, fmt.Sprintf("%d faults injected of %d", len(res.Faults), len(cfg.Faults)))
		}
		res.Unfinished = strings.Join(missed, ", ")
	}
	return res, nil
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// client is one Go client: one owner, one operation at a time.
type client struct {
	cfg    Config
	hc     *http.Client
	name   string
	rng    *rand.Rand
	record func(leasecheck.Op, error)
}

func (c *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		task := c.cfg.TaskPrefix + strconv.Itoa(c.rng.IntN(c.cfg.Tasks))
		ttl := c.cfg.MinTTL + time.Duration(c.rng.Int64N(int64(c.cfg.MaxTTL-c.cfg.MinTTL)+1))
		ttl = ttl.Truncate(time.Millisecond)
		claim := c.do(ctx, leasecheck.Claim, task, 0, ttl)
		if claim.Out != leasecheck.Acquired {
			sleep(ctx, time.Duration(5+c.rng.IntN(25))*time.Millisecond)
			continue
		}
		c.hold(ctx, task, claim.Lease.Token, ttl)
	}
}

// hold renews a lease a few times, then releases or abandons it.
func (c *client) hold(ctx context.Context, task string, token int64, ttl time.Duration) {
	for range c.rng.IntN(3) {
		if !sleep(ctx, ttl/5+time.Duration(c.rng.Int64N(int64(ttl/5)))) {
			return
		}
		if r := c.do(ctx, leasecheck.Renew, task, token, ttl); r.Out == leasecheck.Lost {
			return
		}
		// Renewed, or unknown: go on as if it still held the lease; the
		// next answer tells.
	}
	switch p := c.rng.Float64(); {
	case p < 0.65:
		c.do(ctx, leasecheck.Release, task, token, 0)
	case p < 0.85:
		// Abandoned: the lease runs out on its own.
	default:
		// Abandoned, then a renewal that comes too late.
		if sleep(ctx, ttl+time.Duration(20+c.rng.IntN(80))*time.Millisecond) {
			c.do(ctx, leasecheck.Renew, task, token, ttl)
		}
	}
}

// do sends one operation to a sidecar picked at random and records it.
func (c *client) do(ctx context.Context, kind leasecheck.Kind, task string, token int64, ttl time.Duration) leasecheck.Op {
	op := leasecheck.Op{Client: c.name, Kind: kind, Task: task, Owner: c.name, Token: token, TTLMs: ttl.Milliseconds()}
	body := map[string]any{"owner": c.name}
	if token != 0 {
		body["token"] = token
	}
	if ttl > 0 {
		body["ttl_ms"] = ttl.Milliseconds()
	}
	b, _ := json.Marshal(body)
	base := c.cfg.URLs[c.rng.IntN(len(c.cfg.URLs))]
	u := base + "/v1/leases/" + url.PathEscape(task) + "/" + string(kind)
	// Not the load's context: an op the load's end would cancel would
	// only add indeterminate ops.
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		c.record(op, err)
		return op
	}
	req.Header.Set("Content-Type", "application/json")
	var (
		status int
		ctype  string
		raw    []byte
	)
	op.Call = time.Now().UnixNano()
	resp, err := c.hc.Do(req)
	if err == nil {
		status, ctype = resp.StatusCode, resp.Header.Get("Content-Type")
		raw, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	op.Return = time.Now().UnixNano()
	c.record(op, classify(&op, status, ctype, raw, err))
	return op
}

// pythonLine is one op as chaos_client.py prints it.
type pythonLine struct {
	Client string `json:"client"`
	Kind   string `json:"kind"`
	Task   string `json:"task"`
	Owner  string `json:"owner"`
	Token  int64  `json:"token"`
	TTLMs  int64  `json:"ttl_ms"`
	Call   int64  `json:"call_ns"`
	Return int64  `json:"return_ns"`
	Status int    `json:"status"`
	CType  string `json:"content_type"`
	Body   string `json:"body"`
	Error  string `json:"error"`
}

func startPython(ctx context.Context, cfg Config, i int) (*exec.Cmd, io.WriteCloser, io.Reader, error) {
	name := fmt.Sprintf("py-%d", i)
	// Python stops when its stdin is closed, or on its own after the
	// longest load; WaitDelay lets its last request end (or time out)
	// before it is killed.
	cmd := exec.CommandContext(ctx, cfg.Python, cfg.PythonScript,
		"--urls", strings.Join(cfg.URLs, ","), "--task-prefix", cfg.TaskPrefix, "--tasks", strconv.Itoa(cfg.Tasks),
		"--owner", name, "--seed", strconv.Itoa(i), "--duration", strconv.FormatFloat(cfg.MaxDuration.Seconds(), 'f', 3, 64),
		"--min-ttl-ms", strconv.FormatInt(cfg.MinTTL.Milliseconds(), 10), "--max-ttl-ms", strconv.FormatInt(cfg.MaxTTL.Milliseconds(), 10),
		"--timeout", strconv.FormatFloat(cfg.RequestTimeout.Seconds(), 'f', 3, 64))
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd.Stderr = &bytes.Buffer{}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("start %s %s: %w", cfg.Python, cfg.PythonScript, err)
	}
	return cmd, in, out, nil
}

func readPython(name string, cmd *exec.Cmd, out io.Reader, record func(leasecheck.Op, error), fail func(error)) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l pythonLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			fail(fmt.Errorf("python client printed %q: %w", sc.Text(), err))
			continue
		}
		op := leasecheck.Op{Client: l.Client, Kind: leasecheck.Kind(l.Kind), Task: l.Task, Owner: l.Owner, Token: l.Token,
			TTLMs: l.TTLMs, Call: l.Call, Return: l.Return}
		var terr error
		if l.Error != "" {
			terr = errors.New(l.Error)
		}
		record(op, classify(&op, l.Status, l.CType, []byte(l.Body), terr))
	}
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		fail(fmt.Errorf("python client %s: %v: %s", name, err, cmd.Stderr.(*bytes.Buffer).String()))
	}
}
