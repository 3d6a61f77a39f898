package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/bench/benchproc"
	"github.com/leasehold/leasehold/internal/harness/procstat"
)

// server is the PostgreSQL server the fleet uses, watched through a
// connection to its own maintenance database (so that the watching is not
// counted in the fleet database's statistics).
type server struct {
	url        string
	conn       *pgx.Conn
	postmaster int // 0 when its processes are not visible here
	dataDir    string
}

func openServer(ctx context.Context, url string) (*server, error) {
	s := &server{url: url}
	if err := s.connect(ctx); err != nil {
		return nil, err
	}
	if err := s.conn.QueryRow(ctx, `SHOW data_directory`).Scan(&s.dataDir); err != nil {
		s.conn.Close(ctx)
		return nil, fmt.Errorf("SHOW data_directory: %w", err)
	}
	return s, nil
}

func (s *server) connect(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	s.conn = conn
	s.postmaster = benchproc.FindPostmaster(ctx, conn)
	return nil
}

func (s *server) close() { _ = s.conn.Close(context.Background()) }

// pgSample is what the server says about the fleet's database at one
// moment.
type pgSample struct {
	at         time.Time
	xactCommit float64       // pg_stat_database.xact_commit of the database
	walBytes   float64       // pg_current_wal_lsn() in bytes
	cpu        time.Duration // the postmaster tree's CPU; 0 when not visible
	backends   int           // client connections to the database (pg_stat_activity)
}

// sample reads the counters; PostgreSQL's backends report their
// transaction counts a little late (within a second while busy), which the
// steady window's length makes small.
func (s *server) sample(ctx context.Context, db string) (pgSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := pgSample{at: time.Now()}
	var lsn int64
	err := s.conn.QueryRow(ctx, `SELECT
	    (SELECT coalesce(xact_commit, 0) FROM pg_stat_database WHERE datname = $1),
	    pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
	    (SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend')`, db).
		Scan(&out.xactCommit, &lsn, &out.backends)
	if err != nil {
		return out, fmt.Errorf("sample PostgreSQL: %w", err)
	}
	out.walBytes = float64(lsn)
	if s.postmaster != 0 {
		if cpu, err := procstat.TreeCPU(s.postmaster); err == nil {
			out.cpu = cpu
		}
	}
	return out, nil
}

// pgCtl runs pg_ctl on the server's data directory with args, as the
// postgres user when this process is root (the server runs as postgres
// then: scripts/with-postgres.sh). The server's log goes to server.log
// beside the data directory, where with-postgres.sh keeps it.
func (s *server) pgCtl(args ...string) error {
	bin, err := pgCtlPath()
	if err != nil {
		return err
	}
	logFile := filepath.Join(filepath.Dir(s.dataDir), "server.log")
	full := append([]string{bin, "-D", s.dataDir, "-l", logFile, "-w", "-t", "60"}, args...)
	if os.Getuid() == 0 {
		full = append([]string{"runuser", "-u", "postgres", "--"}, full...)
	}
	out, err := os.CreateTemp("", tool+"-pgctl-*.log")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := exec.Command(full[0], full[1:]...)
	// A file, not a pipe: the server pg_ctl starts must not hold this
	// process's pipe open.
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(out.Name())
		return fmt.Errorf("pg_ctl %s: %w: %s", strings.Join(args, " "), err, b)
	}
	return nil
}

// pgCtlPath finds pg_ctl: PostgreSQL 15's, as with-postgres.sh prefers,
// else on PATH.
func pgCtlPath() (string, error) {
	const pg15 = "/usr/lib/postgresql/15/bin/pg_ctl"
	if _, err := os.Stat(pg15); err == nil {
		return pg15, nil
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no pg_ctl at %s or on PATH", pg15)
}

// restart stops the server (fast: connections are cut), waits down for
// outage (0: restart at once), and starts it again with the options it
// ran with (pg_ctl restart reads them from postmaster.opts even when the
// server is down); then it reconnects.
func (s *server) restart(ctx context.Context, outage time.Duration) error {
	s.close()
	if outage > 0 {
		if err := s.pgCtl("stop", "-m", "fast"); err != nil {
			return err
		}
		time.Sleep(outage)
	}
	if err := s.pgCtl("restart", "-m", "fast"); err != nil {
		return err
	}
	return s.connect(ctx)
}
