// Package leasecore is leasehold's lease model: who runs a singleton task
// right now, for how long, and under which fencing token. The sidecar and the
// Terraform provider are transports over it; Go programs use it directly.
//
// # State model
//
// A task has at most one row in the store, created by its first claim and
// never deleted. The row holds the current (or last) lease: owner, token,
// acquired_at, renewed_at, expires_at, ttl, renew_count, note, released_at.
// The lease is live while released_at is unset and expires_at is after the
// store's now. Everything else follows from that one predicate:
//
//   - claim: not live → a new grant (token+1, renew_count 0); live and the
//     same owner → a refresh (same token, later expiry, renew_count+1); live
//     and another owner → held.
//   - renew: live, same owner, same token (when given) → later expiry;
//     otherwise lost, with the reason read from the row. A renewal never
//     brings an expired lease back: the owner must claim again and gets a new
//     token.
//   - release: live, same owner, same token (when given) → released_at set;
//     otherwise a no-op. It never touches a lease granted to someone else
//     since, and it never clears the token.
//
// Because the row outlives every lease on it, the token counter survives
// release, expiry and the restart of every process: the token rises each time
// the task passes to an owner who did not hold it live, and never repeats.
//
// # Time
//
// Liveness is judged by the store's clock alone (now() in PostgreSQL, SQLite's
// own clock in SQLite), inside the same statement that reads or writes the
// row. No Go process compares its wall clock with a stored timestamp. Results
// carry TTLRemaining as measured by the store, so a holder keeps a local
// monotonic deadline (time.Now() + TTLRemaining) that a wall-clock step cannot
// move. The trust window is the usual one for leases: a holder that stops
// renewing may still believe it holds the task until its local deadline, while
// the store may hand the task on at expires_at; that is why a client passes the
// fencing token to whatever it protects, which refuses tokens lower than the
// highest it has seen.
//
// # Atomicity
//
// Each operation is one conditional statement or one transaction in the store,
// so of N concurrent contenders exactly one wins.
//
// PostgreSQL (leasecore/postgres) claims with a single
// INSERT … ON CONFLICT (task) DO UPDATE … WHERE <not live, or live and mine>
// RETURNING. At READ COMMITTED this is correct without explicit locks: the
// insert either creates the row (the unique index admits one creator; the
// other inserters block on it and then take the conflict path) or finds the
// conflicting row and locks it. A contender that had to wait for another's
// lock re-evaluates the WHERE clause against the newest committed version of
// the row, so after one winner commits a fresh lease, every waiter sees that
// lease as live and another owner's, and updates nothing. A claim that updated
// nothing reads the holder in a second statement; if the lease has meanwhile
// ended, the claim is retried rather than reported as held, and after a few
// rounds it is reported unavailable, never held without a holder. Tokens are
// computed from the locked row (token+1) and only the winner writes, so they
// cannot repeat. The package doc of leasecore/postgres gives the argument in
// full.
//
// SQLite (leasecore/sqlite) runs each claim and renewal as a BEGIN IMMEDIATE
// transaction: it takes the database's single write lock before reading, so
// the read-decide-write sequence is serialised across goroutines and across
// processes sharing the file (WAL mode; a busy timeout makes a contender wait
// for the lock rather than fail).
//
// # Durability
//
// A grant the client was told about survives a crash or power loss, or its
// token could be handed out twice: SQLite runs with synchronous=FULL in WAL
// mode, PostgreSQL with synchronous_commit on. Speed comes from concurrency
// and batching, never from weaker durability.
//
// # Failure
//
// A store that cannot answer — down, timed out, schema missing, permission
// refused, closed — yields ErrUnavailable, never ErrHeld: the callers treat
// the two oppositely (a pruner skips its cycle on held and fails open on
// unavailable), so when a driver cannot tell them apart it says unavailable.
// Each driver turns its own errors into domain errors in one interpretError
// function, and Service turns anything unexpected into ErrUnavailable as a
// backstop. Every operation whose context has no deadline is bounded by
// DefaultOpTimeout.
//
// # Input
//
// Every rule (task name charset, length and segments, owner, note, ttl bounds,
// token, list bounds) is checked by Service before the store is asked, so bad
// input writes nothing and the error names the field and the rule
// (*ValidationError). A task name has no empty, "." or ".." segment between
// slashes: a client or proxy that normalises paths could not address it.
// ValidateTask is the one name rule; openapi.yaml's TaskName pattern encodes
// it, and a test keeps the two in step.
//
// Names under ReservedPrefix ("leasehold:") are leasehold's own, such as the
// pruner's lease PruneTask. Service does not refuse them, since leasehold's
// own code claims them through one; where clients' requests enter (the
// sidecar, leasehold run), CheckClientTask refuses their writes.
//
// # Lists
//
// List and ListTasks answer pages (ListParams): at most Limit rows after the
// name After, in byte order, read by the store as a key range of its primary
// key; Service answers the name that starts the next page. Paging by key
// rather than by offset keeps a page stable while rows come and go.
//
// # Packages
//
//   - leasecore: the model, the Store seam, Service.
//   - leasecore/sqlite, leasecore/postgres: the drivers.
//   - leasecore/storetest: the conformance suite both drivers pass.
//   - leasecore/storeurl: opens a store from sqlite:PATH or postgres://….
//   - leasecore/migration: the drivers' shared migration file loader.
package leasecore
