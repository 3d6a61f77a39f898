package pgtest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Server is a PostgreSQL server that belongs to one test, which may stop and
// start it: the shared server of LEASEHOLD_TEST_POSTGRES_URL serves every
// test at once and must never go down. Its data, Unix socket and logs live in
// a directory of its own under /tmp, and it listens on 127.0.0.1 only, on a
// port that stays the same across restarts, so URL never changes.
//
// Its methods fail the test on error and, like t.Fatal, must be called from
// the test's goroutine.
type Server struct {
	t     testing.TB
	bin   string   // directory holding initdb, pg_ctl and postgres
	dir   string   // the server's directory: data/, the socket, the logs
	asPG  []string // runs a command as the postgres user (when we are root), or empty
	port  int
	start int64 // size of the server log when the last start began

	quoted bool // a failure message has quoted the logs already
}

// maxPortAttempts bounds how many free ports StartServer tries when another
// process binds the one it picked first (a race on a shared machine).
const maxPortAttempts = 8

// pgctlTimeout is pg_ctl's -t: how long it waits for a start or stop, in
// seconds.
const pgctlTimeout = "60"

// logTail is how much of a log a failure message quotes.
const logTail = 8 << 10

// StartServer runs initdb and starts a new PostgreSQL server on 127.0.0.1 at
// a free port (trust authentication, superuser postgres), and registers its
// immediate shutdown and the removal of its files for the end of the test.
// The binaries are found as scripts/with-postgres.sh finds them: $PGBIN,
// /usr/lib/postgresql/15/bin, /usr/lib/postgresql/*/bin, then PATH. Without
// them the test is skipped with instructions, or fails if CI is set. Run as
// root, the server runs as the postgres user, since initdb refuses root.
func StartServer(t testing.TB) *Server {
	t.Helper()
	s := newServer(t)
	if err := s.run("initdb.log", "initdb", "-D", s.data(), "--auth=trust", "--username=postgres",
		"--encoding=UTF8", "--no-locale"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, tail(filepath.Join(s.dir, "initdb.log")))
	}

	s.startOnFreePort()
	return s
}

// startOnFreePort starts the server at a free port, trying another when a
// process took the one picked first.
func (s *Server) startOnFreePort() {
	s.t.Helper()
	for attempt := 1; ; attempt++ {
		s.port = freePort(s.t)
		err := s.pgctlStart()
		if err == nil {
			return
		}
		if attempt == maxPortAttempts || !s.bindFailed() {
			s.t.Fatalf("start PostgreSQL on 127.0.0.1:%d (attempt %d): %v\n%s", s.port, attempt, err, s.logs())
		}
	}
}

// newServer makes the directory of a server that is not initialised yet,
// owned by the postgres user when we are root, and registers its cleanup.
func newServer(t testing.TB) *Server {
	t.Helper()
	bin := findBinaries()
	if d := os.Getenv("PGBIN"); d != "" && !executable(filepath.Join(d, "initdb")) {
		t.Fatalf("PGBIN is %s, which holds no executable initdb", d)
	}
	if bin == "" {
		skipOrFail(t, "PostgreSQL binaries not found ($PGBIN, /usr/lib/postgresql/*/bin, PATH): install postgresql-15 or set PGBIN")
	}
	var asPG []string
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			skipOrFail(t, "running as root and there is no postgres user to run PostgreSQL as (initdb refuses root): install postgresql-15, which creates it")
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			t.Fatalf("running as root, and runuser (to run PostgreSQL as the postgres user) is not in PATH: %v", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		asPG = []string{runuser, "-u", "postgres", "--"}
	}

	// Not t.TempDir: its parent directories are private to us, and the
	// postgres user must reach this one. The path must also stay short, as
	// it holds the Unix socket (about 100 bytes at most).
	dir, err := os.MkdirTemp("/tmp", "leasehold-pgserver-")
	if err != nil {
		t.Fatalf("create the server's directory: %v", err)
	}
	s := &Server{t: t, bin: bin, dir: dir, asPG: asPG}
	t.Cleanup(s.cleanup)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("chmod %s: %v", dir, err)
	}
	if uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("chown %s to postgres: %v", dir, err)
		}
	}
	return s
}

// URL returns the server's postgres:// URL, the same before and after a
// restart: postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Stop shuts the server down the way an operator's restart does (fast
// mode: sessions are ended, then a checkpoint) and returns once it no longer
// accepts connections.
func (s *Server) Stop() {
	s.t.Helper()
	if err := s.run("pg_ctl.log", "pg_ctl", "-D", s.data(), "-m", "fast", "-w", "-t", pgctlTimeout, "stop"); err != nil {
		s.t.Fatalf("stop PostgreSQL on 127.0.0.1:%d: %v\n%s", s.port, err, s.logs())
	}
}

// Start starts the stopped server again, on the same port with the same
// options, and returns once it accepts connections. It fails the test if the
// port was taken in the meantime.
func (s *Server) Start() {
	s.t.Helper()
	if err := s.pgctlStart(); err != nil {
		s.t.Fatalf("start PostgreSQL again on 127.0.0.1:%d: %v\n%s", s.port, err, s.logs())
	}
}

// Restart is Stop then Start: the server is unreachable in between, and
// every session open before it is gone after it.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.Start()
}

// Bounce stops the server in pg_ctl's mode ("fast", or "immediate": no
// checkpoint, the next start recovers from the WAL as after a crash) and
// starts it again on the same port. Unlike Restart it reports failure as an
// error instead of failing the test, so that a fault injector may call it
// from a goroutine of its own; the test must not use the server's other
// methods meanwhile.
func (s *Server) Bounce(mode string) error {
	if mode != "fast" && mode != "immediate" {
		return fmt.Errorf("pgtest: stop mode %q, want fast or immediate", mode)
	}
	if err := s.run("pg_ctl.log", "pg_ctl", "-D", s.data(), "-m", mode, "-w", "-t", pgctlTimeout, "stop"); err != nil {
		return fmt.Errorf("stop PostgreSQL on 127.0.0.1:%d (%s): %w", s.port, mode, err)
	}
	if err := s.pgctlStart(); err != nil {
		return fmt.Errorf("start PostgreSQL again on 127.0.0.1:%d: %w", s.port, err)
	}
	return nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) serverLog() string { return filepath.Join(s.dir, "server.log") }

func (s *Server) pgctlStart() error {
	if fi, err := os.Stat(s.serverLog()); err == nil {
		s.start = fi.Size()
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -c unix_socket_directories=%s", s.port, s.dir)
	return s.run("pg_ctl.log", "pg_ctl", "-D", s.data(), "-l", s.serverLog(), "-w", "-t", pgctlTimeout,
		"-o", opts, "start")
}

// bindFailed reports whether the last start failed because the port was
// taken.
func (s *Server) bindFailed() bool {
	f, err := os.Open(s.serverLog())
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(s.start, io.SeekStart); err != nil {
		return false
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return false
	}
	return strings.Contains(string(b), "could not bind") || strings.Contains(string(b), "Address already in use")
}

// run runs one of the server's programs (as the postgres user when we are
// root) in the server's directory, appending its output to the named log.
func (s *Server) run(logName, prog string, args ...string) error {
	out, err := os.OpenFile(filepath.Join(s.dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	argv := append(append(append([]string{}, s.asPG...), filepath.Join(s.bin, prog)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.dir // the postgres user may not be allowed into ours
	cmd.Env = serverEnv()
	// A file, not a pipe: the server that pg_ctl leaves running must not
	// hold anything that Wait waits for.
	cmd.Stdout, cmd.Stderr = out, out
	return cmd.Run()
}

// logs quotes the ends of pg_ctl's output and of the server log.
func (s *Server) logs() string {
	s.quoted = true
	return "pg_ctl output:\n" + tail(filepath.Join(s.dir, "pg_ctl.log")) +
		"\nserver log:\n" + tail(s.serverLog())
}

// cleanup stops the server at once, whatever state the test left it in,
// and removes its files.
func (s *Server) cleanup() {
	if _, err := os.Stat(filepath.Join(s.data(), "postmaster.pid")); err == nil {
		if err := s.run("pg_ctl.log", "pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "-t", pgctlTimeout, "stop"); err != nil {
			s.t.Errorf("stop PostgreSQL on 127.0.0.1:%d at cleanup: %v\n%s", s.port, err, s.logs())
		}
	}
	if s.t.Failed() && !s.quoted {
		s.t.Logf("PostgreSQL on 127.0.0.1:%d:\n%s", s.port, s.logs())
	}
	if err := os.RemoveAll(s.dir); err != nil {
		s.t.Errorf("remove %s: %v", s.dir, err)
	}
}

// Tool returns the path of one of PostgreSQL's client programs (pg_dump,
// psql), from the directory StartServer takes initdb from. Without it the
// test is skipped with instructions, or fails if CI is set.
func Tool(t testing.TB, name string) string {
	t.Helper()
	bin := findBinaries()
	if bin == "" || !executable(filepath.Join(bin, name)) {
		skipOrFail(t, name+" not found ($PGBIN, /usr/lib/postgresql/*/bin, PATH): install postgresql-15 or set PGBIN")
	}
	return filepath.Join(bin, name)
}

// findBinaries returns the directory of initdb as scripts/with-postgres.sh
// finds it, or "".
func findBinaries() string {
	if d := os.Getenv("PGBIN"); d != "" {
		return d
	}
	candidates := []string{"/usr/lib/postgresql/15/bin"}
	if more, err := filepath.Glob("/usr/lib/postgresql/*/bin"); err == nil {
		candidates = append(candidates, more...)
	}
	for _, d := range candidates {
		if executable(filepath.Join(d, "initdb")) {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// serverEnv is our environment without the PG* variables, which could point
// pg_ctl or the server somewhere else.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// freePort returns a port of 127.0.0.1 on which nothing listened a moment
// ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatalf("free port %d: %v", port, err)
	}
	return port
}

// tail returns the last logTail bytes of a file, or why it cannot.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "(none)"
	}
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", path, err)
	}
	if len(b) > logTail {
		b = append([]byte("…"), b[len(b)-logTail:]...)
	}
	return string(b)
}

// skipOrFail skips the test with msg, or fails it when CI is set: the rule
// ServerURL follows for a missing server.
func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set, so this is a failure, not a skip)")
	}
	t.Skip(msg)
}
