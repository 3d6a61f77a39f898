// Package sqlite is leasehold's embedded store: a leasecore.Store over one
// SQLite database file, through the pure-Go modernc.org/sqlite driver. It is
// the default store (sqlite:./leasehold.db), so a sidecar works with no
// database server, and several processes on one machine may share the file.
//
// # What it holds
//
//   - sqlite.go: Open, the connections (one writer, a few readers) and
//     Close.
//   - batch.go: group commit. Claim, Renew and Release, and the catalog's
//     writes, are queued for the Store's one writer goroutine, which runs
//     whatever is pending in one BEGIN IMMEDIATE transaction, commits once,
//     and only then answers each caller. There is no timer.
//   - lease.go: inside a batch, one read of the batch's rows and the clock,
//     each operation decided in Go on that copy, and the multi-row writes of
//     rows and history that follow.
//   - catalog.go: declarations, retention policies, history and pruning
//     (leasecore.CatalogStore).
//   - feed.go: the history feed (leasecore.HistoryFeed) the watch follows:
//     a cursor over the history by id, HistoryChanges, which polls the file
//     for other processes' commits, and RecordExpiries.
//   - file.go: the guard that keeps the Store on the file it opened.
//   - errors.go: interpretError, the one place that turns SQLite errors
//     into leasecore outcomes.
//
// # Invariants a change must keep
//
// Every connection runs in WAL mode with synchronous=FULL, and no caller is
// told an outcome before its batch's commit: outcomes in a batch depend on
// the writes before them, so a batch that fails is rolled back whole and
// every caller in it is told unavailable. Every write runs in the writer's
// IMMEDIATE transaction, which takes the file's write lock before the first
// read, so one holder holds across goroutines and processes. The file guard
// checks the path before and after every write batch: a file deleted or
// replaced under the Store must never take, or report, another grant. Times
// are read from SQLite's clock, under the write lock, never from Go's.
//
// Why each of these, and how the history chain and pruning rounds keep the
// writer available, is in docs/design.md at the repository root, section
// "SQLite: group commit on one file".
package sqlite
