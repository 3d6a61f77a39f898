//go:build unix

package sidecar

import "golang.org/x/sys/unix"

// raiseFileLimit lifts the soft open-file limit to the hard limit, when the
// system lets it, and returns the soft limit then in force. Go's runtime
// lifts it to one below the hard limit as the process starts (go.dev/issue/46279);
// this takes the last one, and reads what the caps have to fit. Where the
// system refuses (macOS caps the soft limit below an unlimited hard one),
// the limit stays as it was.
func raiseFileLimit() (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &raised) == nil {
			lim = raised
		}
	}
	return uint64(lim.Cur), nil
}
