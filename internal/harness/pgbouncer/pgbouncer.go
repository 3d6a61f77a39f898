// Package pgbouncer runs PgBouncer in transaction mode in front of a
// PostgreSQL server, for the tests and benchmarks that put a fleet of
// sidecars behind one (e2e's TestFleetThroughPgBouncer, make bench-fleet).
// It needs Debian's pgbouncer package; Path says where it is.
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
)

// URLParams is what a store URL through PgBouncer in transaction mode
// needs: a query exec mode that prepares no named statements (docs/stores.md,
// "A fleet on one PostgreSQL").
const URLParams = "default_query_exec_mode=exec"

// ErrNotInstalled: no pgbouncer executable on PATH or where Debian's
// package puts it.
var ErrNotInstalled = errors.New("pgbouncer not found: install Debian's pgbouncer package (apt-get install pgbouncer)")

// Path finds PgBouncer: on PATH, or where Debian's package puts it.
func Path() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/pgbouncer"
	if fi, err := os.Stat(debian); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return debian, nil
	}
	return "", ErrNotInstalled
}

// Config is a PgBouncer's pool.
type Config struct {
	// ServerConns is the most server connections it opens to each database
	// (default_pool_size and max_db_connections).
	ServerConns int
	// MaxClients is the most client connections it accepts (max_client_conn);
	// 0 means 1,000.
	MaxClients int
	// LoginRetry is how long PgBouncer waits to connect to the server
	// again after a connection failed (server_login_retry, whole seconds);
	// 0 keeps PgBouncer's default, 15 s. Meanwhile its clients are refused
	// at once, so after a server restart it is part of the fleet's outage.
	LoginRetry time.Duration
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	// URL is dbURL (the URL given to Start) through PgBouncer, with
	// URLParams added.
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
	logs *lockedbuf.Buffer
	dir  string
}

// Start runs PgBouncer in transaction mode on a free loopback port, in
// front of the server that dbURL names (every database on it, as dbURL's
// user, trusted), and returns once a statement goes through it.
func Start(dbURL string, cfg Config) (*Bouncer, error) {
	bin, err := Path()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, err
	}
	if cfg.ServerConns < 1 {
		return nil, fmt.Errorf("pgbouncer: ServerConns must be at least 1, not %d", cfg.ServerConns)
	}
	if cfg.MaxClients == 0 {
		cfg.MaxClients = 1000
	}
	dir, err := os.MkdirTemp("", "leasehold-pgbouncer-")
	if err != nil {
		return nil, err
	}
	var args []string
	if os.Getuid() == 0 {
		// PgBouncer refuses to run as root: it reads its files as root, then
		// becomes the postgres user (who runs the test server as well).
		args = append(args, "-u", "postgres")
		if err := os.Chmod(dir, 0o755); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	users := filepath.Join(dir, "users.txt")
	if err := os.WriteFile(users, fmt.Appendf(nil, "%q \"\"\n", u.User.Username()), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		conf := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_db_connections = %d
max_client_conn = %d
`, u.Hostname(), u.Port(), port, users, cfg.ServerConns, cfg.ServerConns, cfg.MaxClients)
		if cfg.LoginRetry > 0 {
			conf += fmt.Sprintf("server_login_retry = %d\n", max(1, int(cfg.LoginRetry.Round(time.Second)/time.Second)))
		}
		ini := filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		b := &Bouncer{cmd: exec.Command(bin, append(args, ini)...), done: make(chan struct{}), logs: &lockedbuf.Buffer{}, dir: dir}
		b.cmd.Stdout, b.cmd.Stderr = b.logs, b.logs
		if err := b.cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("start pgbouncer: %w", err)
		}
		go func() { _ = b.cmd.Wait(); close(b.done) }()
		through := *u
		through.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		through.RawQuery = strings.TrimPrefix(u.RawQuery+"&"+URLParams, "&")
		b.URL = through.String()
		if err := b.await(); err != nil {
			b.kill()
			if attempt < 3 && strings.Contains(b.logs.String(), "in use") {
				continue // lost the port to another process: try another
			}
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer: %w\n%s", err, b.logs.String())
		}
		return b, nil
	}
}

// PID is the PgBouncer process's.
func (b *Bouncer) PID() int { return b.cmd.Process.Pid }

// Logs is what PgBouncer has printed.
func (b *Bouncer) Logs() string { return b.logs.String() }

// Exited reports whether the PgBouncer process has ended (it exits on a
// FATAL of its own, for one).
func (b *Bouncer) Exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// Stop ends PgBouncer and removes its files.
func (b *Bouncer) Stop() {
	b.kill()
	os.RemoveAll(b.dir)
}

func (b *Bouncer) kill() {
	_ = b.cmd.Process.Kill()
	<-b.done
}

// await polls b.URL with SELECT 1 until it answers, the process ends or
// 30 s pass.
func (b *Bouncer) await() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, b.URL)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-b.done:
			return fmt.Errorf("exited: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within 30s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
