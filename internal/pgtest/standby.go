package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
)

// StartStandby makes a base backup of s (pg_basebackup, WAL streamed) and
// starts it as a streaming hot standby of s on a port of its own, with name
// as its application_name: the name the primary's synchronous_standby_names
// refers to. Start the primary with
// WithSetting("synchronous_standby_names", name) for synchronous
// replication: every commit the primary acknowledges is then on the standby
// too. It returns once the standby accepts (read-only) connections; like s,
// it is stopped and removed when the test ends.
func (s *Server) StartStandby(name string) *Server {
	s.t.Helper()
	sb := newServer(s.t, nil)
	if err := sb.run("basebackup.log", "pg_basebackup", "--host=127.0.0.1", fmt.Sprintf("--port=%d", s.port),
		"--username=postgres", "--pgdata="+sb.data(), "--wal-method=stream", "--checkpoint=fast",
		"--write-recovery-conf"); err != nil {
		s.t.Fatalf("pg_basebackup of 127.0.0.1:%d: %v\n%s", s.port, err, tail(filepath.Join(sb.dir, "basebackup.log")))
	}
	// --write-recovery-conf wrote standby.signal and a primary_conninfo
	// without an application_name; this later line overrides it.
	conninfo := fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=%s'\n", s.port, name)
	f, err := os.OpenFile(filepath.Join(sb.data(), "postgresql.auto.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.WriteString(conninfo)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		s.t.Fatalf("configure the standby's primary_conninfo: %v", err)
	}
	sb.listen()
	return sb
}

// Kill stops the server the way a crash does (immediate mode: no
// checkpoint, sessions cut) and returns once it no longer accepts
// connections. Start brings it back, with crash recovery.
func (s *Server) Kill() {
	s.t.Helper()
	if err := s.kill(); err != nil {
		s.t.Fatal(err)
	}
}

// Promote turns a standby into a primary and returns once it accepts
// writes.
func (s *Server) Promote() {
	s.t.Helper()
	if err := s.promote(); err != nil {
		s.t.Fatal(err)
	}
}

// Failover kills primary and promotes standby, as a failover manager would
// after losing the primary. Unlike Kill and Promote it reports failure as
// an error, so that a fault injector may call it from a goroutine of its
// own.
func Failover(primary, standby *Server) error {
	if err := primary.kill(); err != nil {
		return err
	}
	return standby.promote()
}

func (s *Server) kill() error {
	if err := s.run("pg_ctl.log", "pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "-t", pgctlTimeout, "stop"); err != nil {
		return fmt.Errorf("kill PostgreSQL on 127.0.0.1:%d: %w\n%s", s.port, err, s.logs())
	}
	return nil
}

func (s *Server) promote() error {
	if err := s.run("pg_ctl.log", "pg_ctl", "-D", s.data(), "-w", "-t", pgctlTimeout, "promote"); err != nil {
		return fmt.Errorf("promote PostgreSQL on 127.0.0.1:%d: %w\n%s", s.port, err, s.logs())
	}
	return nil
}

// HostPort returns "127.0.0.1:PORT", for multi-host URLs
// (postgres://postgres@H1:P1,H2:P2/postgres?target_session_attrs=read-write).
func (s *Server) HostPort() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }
