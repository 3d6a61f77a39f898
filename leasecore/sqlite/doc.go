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
// the write rate of one file.
//
// # One holder, across goroutines and processes
//
// Claim and Renew are each one transaction begun with BEGIN IMMEDIATE
// (the DSN's _txlock=immediate), which takes the file's write lock before the
// first read. Inside it the driver reads the task's row and the store's clock
// in one SELECT, decides, and writes. Because the lock is held from the read
// to the commit, no other connection — in this process or another one that
// opened the same file — can change the row in between: of N concurrent
// claimants exactly one sees the lease free and takes it, and the others see
// it held. A deferred transaction would let two of them read, then deadlock
// (SQLITE_BUSY) when both try to upgrade to write; immediate ones queue
// instead. Release is one conditional UPDATE, which SQLite runs as its own
// write transaction. A task's row is never deleted, so the token counter in
// it survives release, expiry and restarts.
//
// Within a process, writes share a single connection: database/sql queues
// them and hands the connection on at once, and their statements are
// prepared once. Across processes, a writer that finds the file locked waits
// in SQLite's busy handler, retrying for up to BusyTimeout (10 s); the wait
// also ends when the operation's context does (leasecore.Service bounds each
// operation, 5 s by default), and either way the caller gets
// leasecore.ErrUnavailable, never "held". Opening a connection waits the same
// way: SQLite's switch of a new file to WAL does not consult the busy
// handler, so the driver retries an open that finds the file locked, and
// processes that start together on a fresh file all get in.
//
// # Time
//
// Times are INTEGER milliseconds since the Unix epoch, read from SQLite's
// clock (unixepoch('subsec')) inside the statement that decides; the Go
// process's clock is never consulted. A lease is live iff released_at IS
// NULL AND expires_at > now. Processes sharing a file share a machine, and
// so a clock.
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
