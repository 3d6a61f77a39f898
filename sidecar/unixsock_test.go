package sidecar

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/internal/harness/readonly"
)

// socketDir is a new directory with a short path, removed when t ends: a
// Unix socket's path must fit in about 100 bytes, which t.TempDir's long
// names can exceed.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// sqliteStoreURL is a new SQLite store's URL, in a directory of its own.
func sqliteStoreURL(t *testing.T) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db")
}

// socketClient asks the sidecar at addr (unix:PATH) over its socket.
func socketClient(t *testing.T, addr string) (endpoint.Endpoint, *http.Client) {
	t.Helper()
	ep, err := endpoint.Parse(addr)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: ep.Transport(), Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	return ep, hc
}

func socketAnswer(t *testing.T, hc *http.Client, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// serveUntilStopped runs Serve like serving does, and also returns what
// stops it and waits for its result.
func serveUntilStopped(t *testing.T, cfg Config) (addr string, logs *lockedbuf.Buffer, stop func() error) {
	t.Helper()
	logs = new(lockedbuf.Buffer)
	log, err := cli.NewLogger(cfg.LogFormat, logs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- Serve(ctx, cfg, log) }()
	var once sync.Once
	var serveErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			serveErr = <-result
		})
		return serveErr
	}
	t.Cleanup(func() { _ = stop() })
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, line := range strings.Split(logs.String(), "\n") {
			if _, rest, ok := strings.Cut(line, `msg="leasehold listening" addr=`); ok {
				addr, _, _ = strings.Cut(rest, " ")
				return addr, logs, stop
			}
		}
		select {
		case err := <-result:
			result <- err // for stop, which the cleanup calls
			t.Fatalf("Serve returned before listening: %v\n%s", err, logs.String())
		case <-deadline:
			t.Fatalf("Serve did not listen within 30 s:\n%s", logs.String())
		case <-tick.C:
		}
	}
}

// serveErr runs Serve, which must fail before listening, and returns its
// log and error.
func serveErr(t *testing.T, cfg Config) (string, error) {
	t.Helper()
	var logs lockedbuf.Buffer
	log, _ := cli.NewLogger("text", &logs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := Serve(ctx, cfg, log)
	if err == nil {
		t.Fatalf("Serve succeeded; want it to refuse\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "leasehold listening") {
		t.Errorf("Serve listened before refusing:\n%s", logs.String())
	}
	return logs.String(), err
}

// A sidecar on a Unix socket: the log names the socket, the file has the
// mode asked for (0660 by default) and nothing else is left beside it, the
// API answers over it with no token, and a clean stop removes it.
func TestServeOnUnixSocket(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		mode os.FileMode // 0: the default
		want os.FileMode
	}{
		{"default mode", 0, 0o660},
		{"--listen-mode 0600", 0o600, 0o600},
		{"--listen-mode 0666", 0o666, 0o666},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := socketDir(t)
			path := filepath.Join(dir, "leasehold.sock")
			addr, logs, stop := serveUntilStopped(t, Config{Listen: "unix:" + path, ListenMode: c.mode, Store: sqliteStoreURL(t), LogFormat: "text"})
			if addr != "unix:"+path {
				t.Fatalf("the log names %q, want unix:%s\n%s", addr, path, logs.String())
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != c.want {
				t.Errorf("the socket file is %s, want a socket of mode %#o", fi.Mode(), c.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("the socket's directory holds %v, want only the socket", entries)
			}

			ep, hc := socketClient(t, addr)
			if code, body := socketAnswer(t, hc, http.MethodGet, ep.URL("/readyz"), "", ""); code != http.StatusOK {
				t.Errorf("readyz over the socket: %d %s", code, body)
			}
			if code, body := socketAnswer(t, hc, http.MethodPost, ep.URL("/v1/leases/nightly/claim"), "", `{"owner":"w1","ttl_ms":60000}`); code != http.StatusOK {
				t.Errorf("claim over the socket, no token: %d %s", code, body)
			}
			if code, body := socketAnswer(t, hc, http.MethodGet, ep.URL("/v1/status"), "", ""); code != http.StatusOK || !strings.Contains(body, `"ready":true`) {
				t.Errorf("status over the socket: %d %s", code, body)
			}
			hc.CloseIdleConnections()

			if err := stop(); err != nil {
				t.Fatalf("Serve: %v", err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after a clean stop the socket file is still there (%v)", err)
			}
		})
	}
}

// The listening line names the socket and its mode.
func TestServeOnUnixSocketLogsItsMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(socketDir(t), "l.sock")
	_, logs, _ := serveUntilStopped(t, Config{Listen: "unix:" + path, ListenMode: 0o600, Store: sqliteStoreURL(t), LogFormat: "text"})
	if want := `msg="leasehold listening" addr=unix:` + path + " mode=0600 "; !strings.Contains(logs.String(), want) {
		t.Errorf("no %q in the log:\n%s", want, logs.String())
	}
}

// A token file applies to a socket too, when given.
func TestServeOnUnixSocketWithAToken(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("sock-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(socketDir(t), "l.sock")
	addr, _, _ := serveUntilStopped(t, Config{Listen: "unix:" + path, Store: sqliteStoreURL(t), TokenFile: tokenFile, LogFormat: "text"})
	ep, hc := socketClient(t, addr)
	if code, _ := socketAnswer(t, hc, http.MethodGet, ep.URL("/v1/leases"), "", ""); code != http.StatusUnauthorized {
		t.Errorf("no token over the socket of a sidecar with a token file: %d, want 401", code)
	}
	if code, body := socketAnswer(t, hc, http.MethodGet, ep.URL("/v1/leases"), "sock-secret", ""); code != http.StatusOK {
		t.Errorf("the token over the socket: %d %s", code, body)
	}
}

// staleSocket leaves a socket file at path that nothing listens on, as a
// sidecar killed with SIGKILL does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("no stale socket at %s: %v", path, err)
	}
}

// A socket left by a sidecar that did not stop cleanly is removed at
// start, saying so, and the new sidecar serves there.
func TestServeRemovesAStaleSocket(t *testing.T) {
	t.Parallel()
	path := filepath.Join(socketDir(t), "l.sock")
	staleSocket(t, path)
	addr, logs, _ := serveUntilStopped(t, Config{Listen: "unix:" + path, Store: sqliteStoreURL(t), LogFormat: "text"})
	if !strings.Contains(logs.String(), "removed a stale socket") {
		t.Errorf("the log does not say the stale socket was removed:\n%s", logs.String())
	}
	ep, hc := socketClient(t, addr)
	if code, body := socketAnswer(t, hc, http.MethodGet, ep.URL("/healthz"), "", ""); code != http.StatusOK {
		t.Errorf("healthz over the socket that replaced a stale one: %d %s", code, body)
	}
}

// Anything at the path but a stale socket is left alone, and Serve refuses
// to start, naming the path and what is there.
func TestServeLeavesAloneWhatIsNotAStaleSocket(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		put    func(t *testing.T, path string) func(t *testing.T) // puts something at path; returns a check that it is intact
		reason string
	}{
		"a live socket": {
			put: func(t *testing.T, path string) func(t *testing.T) {
				ln, err := net.Listen("unix", path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				return func(t *testing.T) {
					c, err := net.Dial("unix", path)
					if err != nil {
						t.Errorf("the live socket no longer answers: %v", err)
						return
					}
					c.Close()
				}
			},
			reason: "another process is serving on this socket",
		},
		"a regular file": {
			put: func(t *testing.T, path string) func(t *testing.T) {
				if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
					t.Fatal(err)
				}
				return func(t *testing.T) {
					if b, err := os.ReadFile(path); err != nil || string(b) != "precious" {
						t.Errorf("the regular file is now %q, %v", b, err)
					}
				}
			},
			reason: "holds a regular file, not a socket",
		},
		"a directory": {
			put: func(t *testing.T, path string) func(t *testing.T) {
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
				return func(t *testing.T) {
					if fi, err := os.Lstat(path); err != nil || !fi.IsDir() {
						t.Errorf("the directory is gone: %v", err)
					}
				}
			},
			reason: "holds a directory",
		},
		"a symbolic link to a stale socket": {
			put: func(t *testing.T, path string) func(t *testing.T) {
				target := path + ".target"
				staleSocket(t, target)
				if err := os.Symlink(target, path); err != nil {
					t.Fatal(err)
				}
				return func(t *testing.T) {
					if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSymlink {
						t.Errorf("the link is gone: %v", err)
					}
					if fi, err := os.Lstat(target); err != nil || fi.Mode().Type() != os.ModeSocket {
						t.Errorf("the link's target is gone: %v", err)
					}
				}
			},
			reason: "holds a symbolic link",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(socketDir(t), "l.sock")
			intact := c.put(t, path)
			_, err := serveErr(t, Config{Listen: "unix:" + path, Store: sqliteStoreURL(t), LogFormat: "text"})
			if !strings.Contains(err.Error(), c.reason) || !strings.Contains(err.Error(), "unix:"+path) {
				t.Errorf("Serve = %v, want an error naming unix:%s and saying %q", err, path, c.reason)
			}
			intact(t)
			if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) > 2 {
				t.Errorf("Serve left files beside the path: %v", entries)
			}
		})
	}
}

// A directory that is not there, or that cannot be written, is an error
// naming the path, and nothing is left behind.
func TestServeOnASocketInAnUnusableDirectory(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(socketDir(t), "missing", "l.sock")
	_, err := serveErr(t, Config{Listen: "unix:" + missing, Store: sqliteStoreURL(t), LogFormat: "text"})
	if want := "unix:" + missing + ": the socket's directory " + filepath.Dir(missing) + " does not exist"; !strings.Contains(err.Error(), want) {
		t.Errorf("Serve in a missing directory = %v, want %q", err, want)
	}
	dir := socketDir(t)
	readonly.Make(t, dir)
	_, err = serveErr(t, Config{Listen: "unix:" + filepath.Join(dir, "l.sock"), Store: sqliteStoreURL(t), LogFormat: "text"})
	if want := "cannot create a socket in " + dir; !strings.Contains(err.Error(), want) {
		t.Errorf("Serve in a read-only directory = %v, want %q", err, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Serve left %v in the read-only directory", entries)
	}
}

// Sidecars starting at once on the path of a stale socket: exactly one
// serves there, and the path reaches it; the others refuse, saying the
// socket is in use. Without the directory lock two could each take the
// socket for stale and one would end up serving on an unreachable socket.
func TestServeOnOneSocketAtOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(socketDir(t), "l.sock")
	staleSocket(t, path)
	const n = 4
	type outcome struct {
		err  error
		logs *lockedbuf.Buffer
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listening := make(chan int, n)
	results := make(chan outcome, n)
	for i := range n {
		logs := new(lockedbuf.Buffer)
		log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, lineWatcher(func(line string) {
			if strings.Contains(line, "leasehold listening") {
				listening <- i
			}
		})), nil))
		go func() {
			results <- outcome{Serve(ctx, Config{Listen: "unix:" + path, Store: sqliteStoreURL(t), LogFormat: "text"}, log), logs}
		}()
	}
	// n-1 refuse; the one left serves until cancelled.
	for range n - 1 {
		select {
		case o := <-results:
			if o.err == nil || !strings.Contains(o.err.Error(), "another process is serving on this socket") {
				t.Errorf("a second sidecar on the socket: %v, want a refusal saying the socket is in use\n%s", o.err, o.logs.String())
			}
		case <-time.After(time.Minute):
			t.Fatal("the sidecars did not settle within a minute")
		}
	}
	var winner int
	select {
	case winner = <-listening:
	case <-time.After(time.Minute):
		t.Fatal("no sidecar listened")
	}
	ep, hc := socketClient(t, "unix:"+path)
	if code, body := socketAnswer(t, hc, http.MethodGet, ep.URL("/healthz"), "", ""); code != http.StatusOK {
		t.Errorf("the path does not reach the sidecar %d that serves: %d %s", winner, code, body)
	}
	hc.CloseIdleConnections()
	cancel()
	if o := <-results; o.err != nil {
		t.Errorf("the serving sidecar: %v", o.err)
	}
}

// lineWatcher is an io.Writer that calls f with each whole line written.
type lineWatcher func(string)

func (f lineWatcher) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		f(line)
	}
	return len(p), nil
}

// The socket is bound, and given its mode, where only this user may look
// before it appears at its path: a client can never connect to it while
// its mode is looser than asked.
func TestSocketIsPublishedWithItsMode(t *testing.T) {
	t.Parallel()
	dir := socketDir(t)
	ln, private, err := bindPrivate(dir, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fi, err := os.Lstat(filepath.Dir(private)); err != nil || fi.Mode().Perm() != 0o700 || filepath.Dir(filepath.Dir(private)) != dir {
		t.Errorf("the socket is first bound in %s (%v, %v), want a directory of mode 0700 in %s", filepath.Dir(private), fi.Mode(), err, dir)
	}
	if fi, err := os.Lstat(private); err != nil || fi.Mode().Perm() != 0o640 || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("before it is published the socket is %v (%v), want a socket of mode 0640 already", fi.Mode(), err)
	}
}

// unpublish removes only the socket file this process put at the path.
func TestUnpublishLeavesASuccessorAlone(t *testing.T) {
	t.Parallel()
	path := filepath.Join(socketDir(t), "l.sock")
	sock, err := listenUnix(path, 0o660, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	if err := os.Remove(path); err != nil { // an operator, or a successor taking the path over
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("successor"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sock.unpublish(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "successor" {
		t.Errorf("unpublish removed another file at the path: %q, %v", b, err)
	}
}

func TestListenModeFlag(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]os.FileMode{"0660": 0o660, "660": 0o660, "0o600": 0o600, "0777": 0o777, "0600": 0o600} {
		got, err := parseListenMode(in)
		if err != nil || got != want {
			t.Errorf("--listen-mode %s = %#o, %v; want %#o", in, got, err, want)
		}
	}
	for in, says := range map[string]string{
		"rw-rw----": "not an octal file mode",
		"0888":      "not an octal file mode",
		"01660":     "not an octal file mode", // no sticky, setuid or setgid bits
		"-0660":     "not an octal file mode",
		"":          "not an octal file mode",
		"0060":      "does not let the socket's owner read and write",
		"0400":      "does not let the socket's owner read and write",
		"0":         "does not let the socket's owner read and write",
	} {
		if _, err := parseListenMode(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("--listen-mode %q: %v, want an error saying %q", in, err, says)
		}
	}
	// Through the flag set and the environment, as serve reads it.
	cfg, err := ParseServeArgs(quietFlags(), []string{"--listen", "unix:/run/l.sock"}, func(k string) string {
		return map[string]string{"LEASEHOLD_LISTEN_MODE": "0600"}[k]
	})
	if err != nil || cfg.ListenMode != 0o600 || cfg.Listen != "unix:/run/l.sock" {
		t.Errorf("LEASEHOLD_LISTEN_MODE=0600: %+v, %v", cfg, err)
	}
	if _, err := ParseServeArgs(quietFlags(), []string{"--listen-mode", "0060"}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "listen-mode") {
		t.Errorf("--listen-mode 0060: %v, want a refusal naming the flag", err)
	}
}

func TestCheckListenUnixSocket(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"unix:/run/leasehold/leasehold.sock", "unix:leasehold.sock", "unix:///run/l.sock"} {
		if err := CheckListen(addr, false); err != nil {
			t.Errorf("CheckListen(%q) with no token: %v; a socket's file mode is its boundary", addr, err)
		}
	}
	long := "unix:/" + strings.Repeat("d", maxSocketPath) + "/l.sock"
	deep := "unix:/" + strings.Repeat("d", maxSocketPath-10) + "/l.sock" // fits, but its private directory would not
	for addr, says := range map[string]string{
		"unix:":   "needs the socket's path",
		"unix://": "needs the socket's path",
		long:      "too long for a Unix socket address",
		deep:      "too long for a Unix socket address",
	} {
		if err := CheckListen(addr, true); err == nil || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), "--listen") {
			t.Errorf("CheckListen(%.40q…): %v, want an error naming --listen and saying %q", addr, err, says)
		}
	}
	c := DefaultConfig()
	c.ListenMode = 0o600
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--listen-mode") {
		t.Errorf("--listen-mode with a TCP --listen: %v, want a refusal naming --listen-mode", err)
	}
	c.Listen = "unix:/run/l.sock"
	if err := c.Validate(); err != nil {
		t.Errorf("--listen-mode with unix:PATH: %v", err)
	}
}

// quietFlags is a flag set for ParseServeArgs that prints nothing.
func quietFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}
