//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly || solaris)

package sidecar

// maxSocketPath is the longest path a Unix socket address holds on the
// systems with the shortest one (104 bytes with the NUL, on the BSDs).
var maxSocketPath = 103

// lockDir does nothing where the system has no flock: two sidecars
// starting on one socket path at once are then not kept apart.
func lockDir(string) (func(), error) { return func() {}, nil }
