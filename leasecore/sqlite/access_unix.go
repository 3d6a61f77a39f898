//go:build unix

package sqlite

import "golang.org/x/sys/unix"

// canWrite reports why this process may not write path (a file, or a
// directory to create files in), by access(2): the process's own
// credentials, the permission bits, and a read-only or immutable file or
// file system all count.
func canWrite(path string) error {
	return unix.Access(path, unix.W_OK)
}
