package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// replicationTimeout bounds the waits for a standby to stream and for a
// promotion to accept writes.
const replicationTimeout = 60 * time.Second

// StartStandby makes a streaming standby of s, which must be running: a
// pg_basebackup of s (-R: standby.signal and primary_conninfo), started on
// 127.0.0.1 at a free port of its own, with its own directory and the same
// cleanup as StartServer's. It returns once s reports the standby streaming.
//
// With sync set, s is then made to wait for the standby: synchronous_standby_names
// is '*' and synchronous_commit on, so a commit on s returns only once the
// standby has flushed it. The setting is made on s after the copy, so the
// standby does not inherit it: once promoted it commits alone.
//
// Standby methods: URL, Stop, Start, Restart and Kill work as on a primary;
// Promote ends recovery.
func (s *Server) StartStandby(sync bool) *Server {
	s.t.Helper()
	sb := newServer(s.t)
	if err := sb.run("basebackup.log", "pg_basebackup", "-h", "127.0.0.1", "-p", fmt.Sprint(s.port), "-U", "postgres",
		"-D", sb.data(), "-R", "-X", "stream", "--checkpoint=fast"); err != nil {
		s.t.Fatalf("pg_basebackup of 127.0.0.1:%d: %v\n%s", s.port, err, tail(filepath.Join(sb.dir, "basebackup.log")))
	}
	// The copy carries the primary's postgresql.auto.conf; a standby that
	// is promoted must not wait for a standby of its own.
	auto := filepath.Join(sb.data(), "postgresql.auto.conf")
	f, err := os.OpenFile(auto, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		s.t.Fatalf("open %s: %v", auto, err)
	}
	_, err = fmt.Fprintf(f, "synchronous_standby_names = ''\nhot_standby = on\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.t.Fatalf("write %s: %v", auto, err)
	}
	sb.startOnFreePort()

	if sync {
		s.exec(`ALTER SYSTEM SET synchronous_standby_names = '*'`)
		s.exec(`ALTER SYSTEM SET synchronous_commit = 'on'`)
		s.exec(`SELECT pg_reload_conf()`)
	}
	want := "async"
	if sync {
		want = "sync"
	}
	s.poll("the standby streaming", func(conn *pgx.Conn) (bool, error) {
		var n int
		err := conn.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1`, want).Scan(&n)
		return n > 0, err
	})
	return sb
}

// Promote ends the standby's recovery (pg_ctl promote) and returns once it
// accepts writes.
func (s *Server) Promote() {
	s.t.Helper()
	if err := s.promote(); err != nil {
		s.t.Fatalf("%v\n%s", err, s.logs())
	}
	s.poll("the promoted standby accepting writes", func(conn *pgx.Conn) (bool, error) {
		var recovering bool
		err := conn.QueryRow(context.Background(), `SELECT pg_is_in_recovery()`).Scan(&recovering)
		return !recovering, err
	})
}

// Kill stops the server at once, as a crash would (pg_ctl -m immediate:
// no checkpoint, sessions cut), and returns once it no longer accepts
// connections.
func (s *Server) Kill() {
	s.t.Helper()
	if err := s.kill(); err != nil {
		s.t.Fatalf("%v\n%s", err, s.logs())
	}
}

// MultiHostURL is the postgres:// URL that lists every server, in order,
// with target_session_attrs=read-write, so that a client connects to the
// one that accepts writes: the primary, and after a failover the promoted
// standby.
func MultiHostURL(servers ...*Server) string {
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", s.port)
	}
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&target_session_attrs=read-write", strings.Join(hosts, ","))
}

// exec runs one statement on the server's postgres database.
func (s *Server) exec(sql string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), replicationTimeout)
	defer cancel()
	if err := admin(ctx, s.URL(), sql); err != nil {
		s.t.Fatalf("%s on 127.0.0.1:%d: %v", sql, s.port, err)
	}
}

// poll asks cond, over a connection to the server, until it is true, for up
// to replicationTimeout.
func (s *Server) poll(what string, cond func(*pgx.Conn) (bool, error)) {
	s.t.Helper()
	deadline := time.Now().Add(replicationTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, s.URL())
		if err == nil {
			var ok bool
			ok, err = cond(conn)
			conn.Close(context.Background())
			if err == nil && ok {
				cancel()
				return
			}
		}
		cancel()
		last = err
		if time.Now().After(deadline) {
			s.t.Fatalf("waited %s for %s on 127.0.0.1:%d (last error: %v)\n%s", replicationTimeout, what, s.port, last, s.logs())
		}
		<-tick.C
	}
}

// Failover kills primary and promotes standby, as a failover manager would
// after losing the primary. Unlike Kill and Promote it reports failure as
// an error, so that a fault injector may call it from a goroutine of its
// own; the test must not use either server meanwhile. pg_ctl promote -w
// returns once the standby has left recovery.
func Failover(primary, standby *Server) error {
	if err := primary.kill(); err != nil {
		return err
	}
	return standby.promote()
}

// kill is pg_ctl -m immediate stop.
func (s *Server) kill() error {
	if err := s.run("pg_ctl.log", "pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "-t", pgctlTimeout, "stop"); err != nil {
		return fmt.Errorf("kill PostgreSQL on 127.0.0.1:%d: %w", s.port, err)
	}
	return nil
}

// promote is pg_ctl promote -w, which returns once the server has left
// recovery.
func (s *Server) promote() error {
	if err := s.run("pg_ctl.log", "pg_ctl", "-D", s.data(), "-w", "-t", pgctlTimeout, "promote"); err != nil {
		return fmt.Errorf("promote the standby on 127.0.0.1:%d: %w", s.port, err)
	}
	return nil
}
