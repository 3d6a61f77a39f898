package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// fileGuard keeps a Store on the database file it opened. A connection
// holds its file open, so when the path is unlinked (rm leasehold.db) or
// renamed over, the Store would go on committing to a file nobody else can
// see, while a new process on the same path starts a new file and hands out
// token 1 again. The guard remembers the identity (device and inode) of the
// file the Store's first connection opened and compares the path with it:
// after every connection is opened, before and after every write batch, and
// in Ping. A mismatch is a fileError, which no waiting heals: the Store
// answers unavailable until it is closed and opened again.
//
// While a connection keeps the old file open its inode cannot be reused, so
// a new file at the path always has another identity. A stat is cheap next
// to the fsync of every commit.
type fileGuard struct {
	path string
	// opened is the file the first connection opened; nil until then.
	opened atomic.Pointer[os.FileInfo]
}

// fileError is a failure of the database file that no waiting heals: the
// path no longer names the file the Store opened, or the file or its
// directory may not be written.
type fileError struct{ msg string }

func (e *fileError) Error() string { return e.msg }

func (g *fileGuard) replaced() error {
	return &fileError{fmt.Sprintf("the database file %s was deleted or replaced while open; restart the sidecar", g.path)}
}

// remember records the identity of the file at the path, just after a
// connection opened it; a later connection that finds another file there is
// refused.
func (g *fileGuard) remember() error {
	fi, err := os.Stat(g.path)
	if err != nil {
		return g.replaced()
	}
	if g.opened.CompareAndSwap(nil, &fi) {
		return nil
	}
	if !os.SameFile(*g.opened.Load(), fi) {
		return g.replaced()
	}
	return nil
}

// check reports a fileError when the path no longer names the file the
// Store opened (nothing, before any connection was opened), and, when write
// is set, a fileError when this process may not write the file or the
// directory SQLite creates its -wal and -shm files in.
func (g *fileGuard) check(write bool) error {
	opened := g.opened.Load()
	if opened == nil {
		return nil
	}
	fi, err := os.Stat(g.path)
	if err != nil || !os.SameFile(*opened, fi) {
		return g.replaced()
	}
	if !write {
		return nil
	}
	if err := canWrite(g.path); err != nil {
		return &fileError{fmt.Sprintf("the database file %s is not writable by this process: %v", g.path, err)}
	}
	if dir := filepath.Dir(g.path); canWrite(dir) != nil {
		return &fileError{fmt.Sprintf("the directory %s of the database file is not writable by this process (SQLite creates the -wal and -shm files there): %v", dir, canWrite(dir))}
	}
	return nil
}

// Unrecoverable reports whether err, from Migrate or any other operation of
// a Store, is a failure that waiting does not heal: the file cannot be opened
// or created (its directory is missing, say), may not be written, is not a
// database, or was deleted or replaced while open. leasehold serve refuses
// to start on one rather than retry.
func Unrecoverable(err error) bool {
	var fe *fileError
	if errors.As(err, &fe) {
		return true
	}
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH,
		sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT:
		return true
	}
	return false
}
