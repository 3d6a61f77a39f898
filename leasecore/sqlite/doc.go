// Package sqlite is leasehold's embedded store: a leasecore.Store over one
// SQLite database file, through the pure-Go modernc.org/sqlite driver. It is
// the default store (sqlite:./leasehold.db), so a sidecar works with no
// database server, and several processes on one machine may share the file.
//
// # Durability
//
// Every connection runs in WAL mode with synchronous=FULL: a commit returns
// only after its WAL frames are fsynced, so a grant a client was told about
// survives a crash or a power loss, and its fencing token is never handed
// out twice. WAL also lets reads (Get, List, Ping) run beside the writer
// without blocking it. A durable commit costs a fsync; that, not SQL, bounds
// the rate of commits on one file, so the Store commits many operations in
// each (group commit, below). Durability is unchanged by it: still
// synchronous=FULL, one fsync per batch instead of one per operation, and no
// caller hears of a write before that fsync.
//
// # Group commit
//
// Claim, Renew and Release do not run on the caller's goroutine. They are
// queued, in arrival order, for the Store's one writer goroutine, which
// takes everything pending (at most 256 operations) and runs it in one
// transaction begun with BEGIN IMMEDIATE (the DSN's _txlock=immediate):
// each operation does its own read-decide-write with the prepared
// statements, in order, so that two operations on one task in one batch see
// each other's effects exactly as if they had run one after another. Then
// the writer commits once, and only then tells each caller its own outcome:
// acquired, held, lost, released or not. There is no timer: a lone request
// goes out at once, and under load the requests that arrive while one batch
// commits make up the next, so the batch grows with the load and a
// thousand concurrent callers cost a few fsyncs rather than a thousand.
//
// Outcomes wait for the commit because each one depends on the writes before
// it in the batch: a claim told "held" by a lease granted earlier in the same
// batch, or "acquired" with a token that batch issued, would be false if the
// commit then failed. So a failed batch — the file locked by another process
// past the busy timeout, an I/O error, the schema missing, or any SQL error
// in any one of its operations — is rolled back as a whole, and every caller
// in it is told leasecore.ErrUnavailable, never an outcome. Rolling back
// everything, rather than one operation under a SAVEPOINT, is deliberate:
// for the validated input leasecore.Service passes, the errors a statement
// can meet are those of the file or the connection, which the next
// operation would meet too, and after several of them (I/O, disk full,
// interrupt) SQLite may already have rolled the whole transaction back
// itself. The price is that one operation failing in SQL, which only input
// that bypassed validation can make happen, fails its whole batch.
//
// The batch runs under its own bounded context (the busy timeout plus time
// to commit), not under any caller's: one caller giving up does not cut off
// the others. A caller whose context has ended before its turn comes is left
// out of the batch, and nothing is written for it. A caller whose context
// ends while its batch runs is told unavailable at once; its operation may
// still commit with the batch, exactly as a statement cut off by a timeout
// may have committed before it was cut off. Unavailable does not promise
// that nothing was written; it says the caller cannot know.
//
// # One holder, across goroutines and processes
//
// BEGIN IMMEDIATE takes the file's write lock before the first read, and the
// batch holds it until its commit: no other connection — in this process or
// another one that opened the same file — can change a row between an
// operation's read and its write. Of N concurrent claimants exactly one sees
// the lease free and takes it, and the others see it held, whether they are
// in one batch or in several, in one process or in several. A deferred
// transaction would let two writers read, then deadlock (SQLITE_BUSY) when
// both try to upgrade to write; immediate ones queue instead. A task's row
// is never deleted, so the token counter in it survives release, expiry and
// restarts.
//
// Within a process, the writer goroutine is the only one that writes leases
// (Migrate shares its single connection), so this process's operations wait
// in its queue, never for the file lock. Across processes, each process's
// writer takes the file's write lock for each batch; one that finds the file
// locked waits in SQLite's busy handler, retrying for up to BusyTimeout
// (10 s), and then the whole batch is unavailable, never "held". Each caller
// also stops waiting when its own context ends (leasecore.Service bounds
// each operation, 5 s by default). Opening a connection waits the same way:
// SQLite's switch of a new file to WAL does not consult the busy handler, so
// the driver retries an open that finds the file locked, and processes that
// start together on a fresh file all get in.
//
// Close stops the writer: operations still queued are answered unavailable,
// and so is the batch in flight, whose context Close cancels (a wait for
// another process's lock ends at once); every call after Close is
// unavailable.
//
// # The file under the Store
//
// A connection keeps its file open, so a file deleted (rm leasehold.db) or
// renamed over while the Store is open would go on taking commits nobody
// else sees, while a new process on the path starts a new file and grants
// the same tasks from token 1 again. The Store remembers the device and
// inode of the file its first connection opened and checks the path
// against them before and after every write batch (after the commit, so
// that no outcome committed to a file deleted meanwhile is reported), when
// a connection is opened, in Migrate and in Ping; a mismatch makes every
// write and Ping unavailable ("the database file PATH was deleted or
// replaced while open; restart the sidecar") until the Store is reopened.
// The same checks ask access(2) whether this process may write the file and
// its directory (where SQLite creates the -wal and -shm files), so that
// Ping, which readiness uses, means "can grant leases". Together they cost
// a few microseconds per batch, against a commit's fsync. Unrecoverable
// tells these failures, and a file that cannot be opened or is not a
// database, from those that waiting heals (a lock held by another process).
//
// # Time
//
// Times are INTEGER milliseconds since the Unix epoch, read from SQLite's
// clock (unixepoch('subsec')) inside the statement that decides; the Go
// process's clock is never consulted. A lease is live iff released_at IS
// NULL AND expires_at > now. Processes sharing a file share a machine, and
// so a clock.
//
// # Declarations, policies and history
//
// The Store is also a leasecore.CatalogStore. Its writes (declaring tasks,
// changing policies, pruning) are queued for the same writer as the lease
// operations and run in its batches, so a check and the write it guards
// (does the policy exist, does a task still name it) happen in one
// IMMEDIATE transaction; refusals (exists, not found, in use) are answers,
// not SQL errors, and never fail a batch. Reads use the reader connections.
//
// A lease's history is written by the lease operations themselves, in the
// transaction that makes the change: acquired with every grant, released
// with every release, and, for a lease that ran out unreleased, one end
// event when the store first sees it: lost (its owner's renewal came too
// late), expired (its owner claimed again) or taken_over (another owner
// claimed). The lease row's end_recorded column keeps that end from being
// recorded twice. Refreshes and renewals write no history. Event ids come
// from an AUTOINCREMENT key, so they keep rising after the newest events are
// pruned.
//
// A task's events are a chain rather than an index: the lease row points at
// the newest (last_event), each event at the one before it (prev_id), and
// History and PruneHistory walk it by id. An index on the history's task
// would cost every commit one more written page per task in its batch (a
// batch of 32 grants wrote about 36 pages instead of 7 when measured), while
// the lease row that holds the pointer is written by the same operation
// anyway. Pruning deletes a task's oldest events only, so the chain of what
// is left stays whole. PruneHistory visits the tasks by name, a few hundred
// per writer transaction, so the lease operations queued meanwhile are not
// held up for a whole pass.
//
// # Schema and errors
//
// The schema lives in embedded migrations (migrations/NNNN_name.sql),
// applied by Migrate in one IMMEDIATE transaction that also records them in
// leasehold_schema_migrations, so processes that start together on a fresh
// file migrate it once. Every driver error passes through interpretError,
// which turns it into a leasecore.UnavailableError with a readable detail
// ("schema missing, run leasehold migrate", "database is locked", "unable to
// open database file").
package sqlite
