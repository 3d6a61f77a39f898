// Package benchproc is what the sidecar benchmarks (streambench,
// watchbench, httpbench, fleetbench, fleetsim) share to measure a `leasehold serve`
// process from outside: start it on a loopback port of its own and wait
// until it is ready, open event streams to it, stop it, read its /metrics
// and its CPU and memory from /proc, give it a fresh store (a SQLite file,
// or a PostgreSQL database of its own), and raise the bench's open-file
// limit for many connections; and, for PostgreSQL, the server's CPU (its
// postmaster's process tree) and the raw lone-claim load that the
// sidecar's figures are compared with.
//
// Each function takes the bench's name (tool), which prefixes what it
// prints and names its temporary files and databases.
package benchproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/procstat"
	"github.com/leasehold/leasehold/internal/harness/serveproc"
)

// Sidecar is a `leasehold serve` process under test.
type Sidecar struct {
	// Base is the sidecar's URL, http://127.0.0.1:PORT.
	Base string
	proc *serveproc.Process
	logs *os.File
}

// StartSidecar runs `bin serve` on a free loopback port with the store at
// storeURL and any further flags (serveproc.Start), and returns once
// /readyz answers 200. The log goes to a temporary file, which the errors
// name and Stop removes.
func StartSidecar(tool, bin, storeURL string, flags ...string) (*Sidecar, error) {
	logs, err := os.CreateTemp("", tool+"-sidecar-*.log")
	if err != nil {
		return nil, err
	}
	p, err := serveproc.Start(serveproc.Options{Bin: bin, Args: append([]string{"--store", storeURL}, flags...), Output: logs})
	if err != nil {
		logs.Close()
		return nil, fmt.Errorf("%w (log: %s)", err, logs.Name())
	}
	s := &Sidecar{Base: p.Endpoint.Base(), proc: p, logs: logs}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.Base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("the sidecar was not ready in 60s (log: %s)", logs.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the sidecar with SIGTERM (SIGKILL after 30 s), waits for it and
// removes its log.
func (s *Sidecar) Stop() {
	s.proc.Stop(30 * time.Second)
	s.logs.Close()
	_ = os.Remove(s.logs.Name())
}

// OpenStream starts a GET of the event stream at url: the response when
// the server answers 200, else an error with the status and the start of
// what it said.
func OpenStream(ctx context.Context, client *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	return resp, nil
}

// Dump asks the sidecar's Go runtime for every goroutine's stack (SIGQUIT,
// which also ends the process), gives it two seconds to write them and
// copies its log to a file that Stop does not remove, whose name it returns.
func (s *Sidecar) Dump() (string, error) {
	if err := s.proc.Signal(syscall.SIGQUIT); err != nil {
		return "", err
	}
	time.Sleep(2 * time.Second)
	b, err := os.ReadFile(s.logs.Name())
	if err != nil {
		return "", err
	}
	name := strings.TrimSuffix(s.logs.Name(), ".log") + "-dump.log"
	return name, os.WriteFile(name, b, 0o644)
}

// PID is the sidecar process's.
func (s *Sidecar) PID() int { return s.proc.PID() }

// Metrics is the text of the sidecar's /metrics.
func (s *Sidecar) Metrics() (string, error) {
	resp, err := http.Get(s.Base + "/metrics")
	if err != nil {
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(body), err
}

// Metric is the value of one series (name and labels, as written) in
// /metrics text.
func Metric(text, series string) (float64, error) {
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("the sidecar's /metrics has no %s", series)
}

// Usage is the sidecar's CPU time so far (user + system), in seconds, and
// one memory field of its /proc/PID/status, such as VmRSS or VmHWM, in MB
// (0 when the field is not there).
func (s *Sidecar) Usage(memField string) (cpuSeconds, memMB float64, err error) {
	pid := s.proc.PID()
	cpu, err := procstat.ProcessCPU(pid)
	if err != nil {
		return 0, 0, err
	}
	cpuSeconds = cpu.Seconds()
	if memMB, err = statusMB(pid, memField); err != nil {
		return 0, 0, err
	}
	return cpuSeconds, memMB, nil
}

// statusMB is a memory field of /proc/PID/status in MB; 0 when the field
// is not there.
func statusMB(pid int, field string) (float64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	var mb float64
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			mb = kb / 1024
		}
	}
	return mb, nil
}

// RaiseFileLimit lifts this process's soft open-file limit to the hard
// limit, and fails when even that cannot hold n connections; what names
// them in the error ("streams", "watchers").
func RaiseFileLimit(tool string, n int, what string) error {
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
		fmt.Fprintf(os.Stderr, "%s: raised the open-file limit from %d to %d\n", tool, old, lim.Cur)
	}
	if need := uint64(n) + 256; lim.Cur < need {
		return fmt.Errorf("%d %s need about %d open files; the hard limit is %d (raise it with ulimit -Hn as root)", n, what, need, lim.Cur)
	}
	return nil
}

// NewStore returns the store URL for a sidecar and how to remove the store:
// kind sqlite is a file in a new temporary directory; kind postgres a new
// database on LEASEHOLD_TEST_POSTGRES_URL's server.
func NewStore(tool, kind string) (string, func(), error) {
	switch kind {
	case "sqlite":
		dir, err := os.MkdirTemp("", tool+"-")
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
		name := tool + "_" + hex.EncodeToString(b[:])
		if err := admin(server, "CREATE DATABASE "+name); err != nil {
			return "", nil, fmt.Errorf("create database: %w", err)
		}
		u.Path = "/" + name
		return u.String(), func() { _ = admin(server, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") }, nil
	}
	return "", nil, fmt.Errorf("-store %q: want sqlite or postgres", kind)
}

// admin runs one statement on the server's own database (CREATE and DROP
// DATABASE cannot run in a transaction).
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

// NewDatabase creates an empty database named after prefix (lower case,
// '-' as '_') on the server at serverURL, through admin (a connection to
// that server), and returns the database's URL and a function that drops it.
func NewDatabase(ctx context.Context, admin *pgx.Conn, serverURL, prefix string) (string, func(), error) {
	name := strings.ToLower(strings.ReplaceAll(prefix, "-", "_"))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}
