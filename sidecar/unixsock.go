package sidecar

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/sidecar/console"
)

// DefaultListenMode is the file mode of the socket of a sidecar serving on a
// Unix socket (--listen unix:PATH) when --listen-mode is not given: its
// owner and its group may connect, which is what containers of one pod
// sharing an emptyDir volume (whose group is the pod's fsGroup) need.
const DefaultListenMode os.FileMode = 0o660

// Serving on a Unix socket (serve --listen unix:PATH).
//
// The socket file is published at PATH with its final mode already set, so
// no client can connect while it is looser: the listener is bound in a new
// directory beside PATH that only this process's user may enter (0700),
// chmod'ed there, then hard-linked to PATH. The link, unlike a rename,
// never replaces a file that appeared at PATH meanwhile. Binding at PATH
// and chmod'ing it after would leave a moment when the umask's mode applies
// (a connection made then stays open), and the process-wide umask cannot be
// narrowed for one bind without affecting every file other goroutines
// create meanwhile.
//
// A socket file left at PATH by a sidecar that did not stop cleanly is
// removed at start, only when it is a socket and connecting to it is
// refused (nothing listens); anything else at PATH (a live socket, a
// regular file, a directory, a symbolic link) is left alone and refused
// with an error naming it. The check, the removal and the link happen under
// an exclusive lock on PATH's directory (flock, where the system has it),
// so that two sidecars starting at once cannot both take a socket for
// stale and remove each other's. At a clean shutdown the socket is removed
// if PATH is still the file this process published.

// privateDirName is how long the name of the directory the socket is bound
// in before it is published is: ".lh-" and 8 hex digits.
const privateDirName = len(".lh-") + 8

// staleProbeTimeout bounds the connection made to tell a stale socket from
// a live one. A live sidecar accepts at once; one too busy to, within this
// time, is taken for live.
const staleProbeTimeout = 2 * time.Second

// checkSocketPath checks the path of --listen unix:PATH: a path, short enough
// for a socket address, whose directory is short enough for the private
// directory's socket too.
func checkSocketPath(addr, path string) error {
	if err := endpoint.CheckSocketPath(path); err != nil {
		return fmt.Errorf("--listen %q: %w", addr, err)
	}
	dir := filepath.Dir(path)
	private := len(dir) + 1 + privateDirName + len("/s")
	if len(path) > maxSocketPath || private > maxSocketPath {
		return fmt.Errorf("--listen %q: the path is too long for a Unix socket address, which holds %d bytes on this system: "+
			"the path may have at most %d, and its directory at most %d (leasehold binds the socket in a new directory beside it first); choose a shorter path",
			addr, maxSocketPath, maxSocketPath, maxSocketPath-(private-len(dir)))
	}
	return nil
}

// parseListenMode reads --listen-mode: an octal file mode (0660, 660 or
// 0o660) of at most 0777 that lets the owner read and write.
func parseListenMode(s string) (os.FileMode, error) {
	digits := s
	if len(s) > 2 && (s[:2] == "0o" || s[:2] == "0O") {
		digits = s[2:]
	}
	n, err := strconv.ParseUint(digits, 8, 32)
	if err != nil || n > 0o777 {
		return 0, fmt.Errorf("%q is not an octal file mode such as 0660 or 0600", s)
	}
	if n&0o600 != 0o600 {
		return 0, fmt.Errorf("%04o does not let the socket's owner read and write it (0600): a sidecar starting later could not tell it stale", n)
	}
	return os.FileMode(n), nil
}

// listenModeFlag is the flag.Value of --listen-mode, on a Config's field;
// zero means DefaultListenMode.
type listenModeFlag struct{ mode *os.FileMode }

func (f listenModeFlag) String() string {
	if f.mode == nil || *f.mode == 0 {
		return ""
	}
	return fmt.Sprintf("%04o", uint32(*f.mode))
}

func (f listenModeFlag) Set(s string) error {
	m, err := parseListenMode(s)
	if err != nil {
		return err
	}
	*f.mode = m
	return nil
}

// listen opens the listener cfg.Listen names: TCP, or a Unix socket
// published by listenUnix. It returns the log attributes that say where it
// listens (the address and, for TCP, the web console's URL; a socket's
// mode), and what removes the socket file at shutdown (nothing, for TCP).
func listen(cfg Config, log *slog.Logger) (net.Listener, []any, func(), error) {
	path, ok := endpoint.SocketPath(cfg.Listen)
	if !ok {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, nil, nil, err
		}
		return ln, []any{"addr", ln.Addr().String(), "console", consoleURL(ln.Addr())}, func() {}, nil
	}
	mode := cfg.ListenMode
	if mode == 0 {
		mode = DefaultListenMode
	}
	sock, err := listenUnix(path, mode, log)
	if err != nil {
		return nil, nil, nil, err
	}
	unpublish := func() {
		if err := sock.unpublish(); err != nil {
			log.Warn("removing the socket", "path", path, "err", err)
		}
	}
	return sock, []any{"addr", endpoint.UnixPrefix + path, "mode", fmt.Sprintf("%04o", uint32(mode))}, unpublish, nil
}

// unixSocket is the listener of a sidecar serving on a Unix socket.
type unixSocket struct {
	net.Listener
	path      string
	published os.FileInfo // the file this process put at path, to tell it from a successor's
}

// listenUnix serves on a Unix socket at path with mode (see above). It logs
// the removal of a stale socket.
func listenUnix(path string, mode os.FileMode, log *slog.Logger) (*unixSocket, error) {
	dir := filepath.Dir(path)
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("unix:%s: the socket's directory %s does not exist; leasehold does not create it", path, dir)
	case err != nil:
		return nil, fmt.Errorf("unix:%s: the socket's directory: %w", path, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("unix:%s: %s is not a directory", path, dir)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("unix:%s: locking its directory: %w", path, err)
	}
	defer unlock()
	if err := removeStale(path, log); err != nil {
		return nil, err
	}
	ln, private, err := bindPrivate(dir, mode)
	if err != nil {
		return nil, fmt.Errorf("unix:%s: cannot create a socket in %s: %w", path, dir, err)
	}
	defer os.RemoveAll(filepath.Dir(private)) // the socket's second name and its directory
	if err := os.Link(private, path); err != nil {
		ln.Close()
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("unix:%s: a file appeared at the path while leasehold was binding it; leasehold leaves it alone", path)
		}
		return nil, fmt.Errorf("unix:%s: %w", path, err)
	}
	published, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("unix:%s: %w", path, err)
	}
	return &unixSocket{Listener: ln, path: path, published: published}, nil
}

// bindPrivate binds a listening socket in a new directory in dir that only
// this user may enter, and gives the socket file mode. It returns the
// listener and the socket's path there.
func bindPrivate(dir string, mode os.FileMode) (net.Listener, string, error) {
	var private string
	for range 100 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		private = filepath.Join(dir, ".lh-"+hex.EncodeToString(b[:]))
		err := os.Mkdir(private, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, "", err
		}
	}
	// The umask may have taken bits from 0700, which the owner needs all of.
	// A chmod then keeps the setgid bit the directory got from dir (an
	// emptyDir volume of a pod with an fsGroup has it): it gives the socket
	// dir's group, as binding in dir itself would.
	fi, err := os.Lstat(private)
	if err != nil {
		_ = os.Remove(private)
		return nil, "", err
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(private, 0o700|fi.Mode()&os.ModeSetgid); err != nil {
			_ = os.Remove(private)
			return nil, "", err
		}
	}
	sock := filepath.Join(private, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		_ = os.Remove(private)
		return nil, "", err
	}
	// Closing the listener must not unlink by the name it was bound to:
	// that name is gone by then, and the published one is removed by
	// unixSocket.unpublish only if it is still this socket.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(sock, mode); err != nil {
		ln.Close()
		_ = os.RemoveAll(private)
		return nil, "", err
	}
	return ln, sock, nil
}

// removeStale makes way at path for a new socket: nothing there, or a
// socket nobody listens on, which it removes. Anything else is an error
// naming what is there.
func removeStale(path string, log *slog.Logger) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unix:%s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("unix:%s: the path holds %s, not a socket; leasehold removes only a stale socket: remove it or choose another path", path, fileKind(fi))
	}
	conn, err := net.DialTimeout("unix", path, staleProbeTimeout)
	if err == nil {
		conn.Close()
		return fmt.Errorf("unix:%s: another process is serving on this socket (another leasehold serve?): stop it, or choose another path", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("unix:%s: cannot tell whether the socket there is in use (%v); leasehold removes it only when connecting is refused: remove it or choose another path", path, err)
	}
	if now, err := os.Lstat(path); err != nil || !os.SameFile(fi, now) {
		return fmt.Errorf("unix:%s: the stale socket there was replaced while leasehold checked it; leasehold leaves the new file alone", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("unix:%s: removing the stale socket: %w", path, err)
	}
	log.Warn("removed a stale socket: nothing listened on it (a sidecar that did not stop cleanly left it)", "path", path)
	return nil
}

// fileKind names what a file is, for a message.
func fileKind(fi os.FileInfo) string {
	switch t := fi.Mode().Type(); {
	case t == 0:
		return "a regular file"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case t&fs.ModeDevice != 0:
		return "a device"
	default:
		return "a file of mode " + t.String()
	}
}

// unpublish removes the socket file, if the path still names the one this
// process published: clients then find no socket rather than one that
// refuses them, and a successor may bind the path at once. The listener
// itself stays open until it is closed.
func (s *unixSocket) unpublish() error {
	now, err := os.Lstat(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !os.SameFile(s.published, now) {
		return nil // someone else's now
	}
	return os.Remove(s.path)
}

// consoleURL is the web console's address on the TCP listener at addr, as
// a browser on this host opens it: a wildcard address (0.0.0.0, ::) is
// reached through loopback, which the sidecar always answers for.
func consoleURL(addr net.Addr) string {
	host, port := "127.0.0.1", ""
	if ta, ok := addr.(*net.TCPAddr); ok {
		port = strconv.Itoa(ta.Port)
		if !ta.IP.IsUnspecified() {
			host = ta.IP.String()
		}
	}
	return "http://" + net.JoinHostPort(host, port) + console.Prefix
}
