//go:build unix

package sidecar

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The socket's mode is the one asked for whatever the process's umask: a
// loose umask does not widen it, a tight one does not narrow it. Not
// parallel: the umask is the whole process's, and parallel tests run only
// once the sequential ones are done.
func TestSocketModeIgnoresTheUmask(t *testing.T) {
	for _, umask := range []int{0, 0o077, 0o027} {
		t.Run(fmt.Sprintf("umask %#o", umask), func(t *testing.T) {
			old := syscall.Umask(umask)
			defer syscall.Umask(old)
			path := filepath.Join(socketDir(t), "l.sock")
			addr, _, stop := serveUntilStopped(t, Config{Listen: "unix:" + path, Store: sqliteStoreURL(t), LogFormat: "text"})
			if addr != "unix:"+path {
				t.Fatalf("listening on %q", addr)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != DefaultListenMode {
				t.Errorf("under umask %#o the socket has mode %#o, want %#o", umask, fi.Mode().Perm(), DefaultListenMode)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// In a directory with the setgid bit (an emptyDir volume of a pod with an
// fsGroup), the socket gets the directory's group, as a socket bound there
// directly would: the app container, a member of that group, may connect.
func TestSocketTakesTheGroupOfASetgidDirectory(t *testing.T) {
	t.Parallel()
	dir := socketDir(t)
	gid := os.Getegid()
	if os.Geteuid() == 0 {
		gid = 4242 // a group the process is not in, as an fsGroup is for the sidecar's files
		if err := os.Chown(dir, -1, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o770|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "l.sock")
	addr, _, _ := serveUntilStopped(t, Config{Listen: "unix:" + path, Store: sqliteStoreURL(t), LogFormat: "text"})
	if addr != "unix:"+path {
		t.Fatalf("listening on %q", addr)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := int(fi.Sys().(*syscall.Stat_t).Gid); got != gid {
		t.Errorf("the socket's group is %d, want the setgid directory's %d", got, gid)
	}
	ln, private, err := bindPrivate(dir, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fi, err := os.Lstat(filepath.Dir(private)); err != nil || fi.Mode()&os.ModeSetgid == 0 {
		t.Errorf("the private directory is %v (%v), want it setgid like its parent", fi.Mode(), err)
	}
}
