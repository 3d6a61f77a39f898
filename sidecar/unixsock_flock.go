//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly || solaris

package sidecar

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// maxSocketPath is the longest path a Unix socket address holds here
// (sun_path, less its terminating NUL).
var maxSocketPath = len(unix.RawSockaddrUnix{}.Path) - 1

// lockDir takes an exclusive flock on the directory dir, waiting for it,
// and returns what releases it. Sidecars starting on sockets in one
// directory take it in turn (see listenUnix).
func lockDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing the descriptor releases the lock
}
