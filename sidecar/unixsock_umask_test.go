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
