// Package postgres is the leasecore.Store driver for PostgreSQL, the store a
// fleet of sidecars on many machines shares. It talks to the server through a
// pgx/v5 pool and keeps its schema in embedded migrations.
//
//	st, err := postgres.Open(ctx, "postgres://leasehold@db:5432/leasehold")
//	err = st.Migrate(ctx)                // once per start; safe from many processes
//	svc := leasecore.New(st)
//
// Every lease operation is decided by one autocommit statement (a claim
// refused by a holder, or a refused renewal, adds one more statement to say
// who or why), and the same statement writes the lease history the change
// makes. Claims, renewals and releases that callers make concurrently are
// batched: one statement, so one transaction and one durable commit, decides
// up to maxBatch (256) of them, each on its own task's row by the same rules
// as if it were alone. No lease statement takes a lock beyond the rows of
// its tasks, no statement holds a transaction open across a round trip, and
// none depends on an isolation level above READ COMMITTED, PostgreSQL's
// default. This note argues why that is enough, first for one call, then
// for batches of them; then how the history is written, and how the
// catalog (leasecore.CatalogStore: task declarations, retention policies,
// reading and pruning the history) decides its races.
//
// # Schema
//
// leasehold_leases has one row per task ever claimed: task (primary key),
// owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note,
// released_at, and the history's bookkeeping (replaced_owner, replaced_token,
// lost_at; see History). A lease is live iff released_at IS NULL AND
// expires_at is after the statement's instant (below). No statement of the
// driver deletes a row, so the row's token is the task's fencing counter for
// the life of the database. leasehold_history has one row per lease event
// (id from an identity column, task, kind, owner, token, at, detail).
// leasehold_tasks and leasehold_retention_policies hold the declarations
// and policies; a declaration's policy is a foreign key.
// leasehold_schema_migrations records the applied migrations.
//
// # What now() means, and the instant a statement uses
//
// now() is PostgreSQL's transaction_timestamp(): the time the current
// transaction began, the same value however often a statement calls it. The
// driver runs every statement in autocommit, so each statement is its own
// transaction and now() is the instant the statement began, fixed for its
// whole run, also while it waits for a row lock. A batch statement has one
// now() for all its rows. The Go process's clock is
// never consulted, so sidecars whose clocks disagree still agree on who holds
// a task.
//
// A statement that began earlier can still decide later: it may wait for a
// row lock while a statement that began after it commits (a batch may wait
// for several, one per row, before it decides its last row), or (a read) be
// descheduled between taking now() and taking its snapshot, and then see a
// row written "after" its now(). Judged by now() alone, such a statement
// would write times older than the row's (a concurrent renewal moving the
// lease backwards) or measure more time remaining than the lease's TTL. So
// every statement judges a row at
//
//	rowNow = GREATEST(now(), l.renewed_at, l.released_at, l.lost_at)
//
// the later of its now() and the times already written on the row it
// decides on (the locked latest version for a write, the row in its snapshot
// for a read). Those times were written by transactions that committed
// before this statement saw the row, so rowNow is an instant of the store's
// clock between the statement's start and its decision, and it never
// precedes anything the statement saw. Within a statement it is one instant
// per row: the liveness test (released_at IS NULL AND expires_at > rowNow),
// the times written (renewed_at = rowNow, expires_at = rowNow + ttl) and the
// time remaining returned (expires_at − rowNow) all use it, so a row's times
// never go backwards, and a live lease's time remaining is always in
// (0, ttl]. For liveness rowNow and now() agree (a lease that is not
// released has expires_at > renewed_at), so the choice changes no decision,
// only the times recorded and reported; with one exception, which it gets
// right: lost_at is set only on a lease that had expired by then (see
// History), so a statement that began before that expiry and waited for
// the row judges the lease expired, as the store has already told its owner,
// where now() alone would have judged it live.
//
// Because rowNow may lag the real time of the decision by the statement's
// waits, a lease that expired during the wait can still look live (a claim is
// then refused and retried, below), never the other way round. The time
// remaining is measured at rowNow, so a client's local deadline (receipt +
// remaining) runs later than the store's expiry by at most the statement's
// duration plus one network hop; the keeper's renewal at 0.4 × ttl leaves
// ample margin, and the fencing token covers the rest.
//
// # Why the claim statement is correct at READ COMMITTED
//
// A claim is, for one task or, batched, for each of several distinct tasks
// (the rows of unnest($1::text[], …) in the batch statement, claimBatchSQL),
//
//	INSERT INTO leasehold_leases AS l (…) VALUES (task, owner, token 1, now(), …)
//	ON CONFLICT (task) DO UPDATE SET
//	    token = CASE WHEN <l is the caller's live lease> THEN l.token ELSE l.token + 1 END, …
//	WHERE NOT (l.released_at IS NULL AND l.expires_at > rowNow) OR l.owner = excluded.owner
//	RETURNING …
//
// (claimSQL and claimBatchSQL have it in full, as the first CTE of a
// statement whose second CTE records the history from its RETURNING; see
// History. The INSERT decides alone, exactly as here.) Its WHERE clause admits
// exactly the model's two
// "acquired" cases: no live lease (released or expired), or a live lease of
// the same owner; it rejects only a live lease of another owner. The CASE
// expressions tell the two admitted cases apart on the same row version the
// WHERE clause read: the caller's live lease keeps its token, acquired_at and
// counts a renewal; anything else is a new grant with the next token.
//
// What INSERT … ON CONFLICT DO UPDATE does when transactions race
// (PostgreSQL's INSERT reference, "ON CONFLICT Clause", and the Read
// Committed section of "Transaction Isolation"):
//
//  1. It probes the primary key for task. If no row exists it inserts one
//     speculatively; if another transaction inserts the same task at the
//     same time, one of the two insertions finds the other (waiting for
//     that transaction to commit or abort if need be) and proceeds as a
//     conflict. It never fails with a unique violation and never inserts
//     twice: the outcome is atomically an insert or a conflict.
//  2. On a conflict it locks the existing row, as SELECT … FOR UPDATE would,
//     waiting first for any transaction that holds the row's lock (another
//     claim, renewal or release of the task) to end. It then works on the
//     latest committed version of the row, even a version committed after
//     the statement's snapshot was taken, which the statement could not
//     otherwise see; PostgreSQL documents this exception for READ COMMITTED.
//  3. Holding the lock, it evaluates the WHERE clause and the SET
//     expressions on that latest version. If the WHERE clause is false, the
//     row is not updated and RETURNING yields no row: the claim was refused.
//
// An INSERT of several rows does this for each row in turn, in the order its
// SELECT yields them, each row on its own: the row's lock (or its new
// insertion) is held to the end of the transaction, and the other rows'
// outcomes do not enter its WHERE clause. So each claim decides while
// holding the task's row lock, on the row as the previous decider committed
// it, and its statement commits before the next decider can lock the row.
// Claims of one task are serialised by that lock, each one seeing the
// committed result of all earlier ones; no decision is made on a stale
// snapshot.
//
// Exactly one winner among N contenders. Let N owners claim a task none of
// them holds live, each in a statement of its own: a lone claim or a batch,
// of this sidecar or another (two claims of one task are never in one
// batch, below). The first to lock the row (or to insert it) finds no live
// lease and commits its own: renewed_at = t₁ and expires_at = t₁ + ttl,
// where t₁ is its instant, and holds the row until its whole statement
// commits. Every later contender k then locks the row and reads that lease
// at rowNow = max(tₖ, t₁), tₖ its own statement's now(). It is refused
// unless t₁ + ttl <= max(tₖ, t₁), that is unless t₁ + ttl <= tₖ: unless, by
// the store's clock, the first grant had already expired when contender k's
// statement began, in which case the task was free again by the model's
// definition and k's grant is a takeover after expiry, not a second winner of
// the same race. (Contender k may even have started before the winner, tₖ <
// t₁; that only makes the winner's lease look more live to it.) Within the
// lease's TTL exactly one contender therefore acquires, and the others get no
// row. The same argument covers a race on a released or expired row (the
// DO UPDATE path) and on a new task (the INSERT path, by step 1), and it
// never asks which statement a contender came in or what else that
// statement decided: only the one row's lock and its committed versions
// matter. Two claims by the same owner are not contenders: the later one is
// a refresh and both succeed with the same token, as the model requires.
//
// The token never decreases or repeats. Only the claim statement writes
// token: 1 when it inserts the task's row, which the primary key allows once
// per task, and otherwise l.token (a refresh) or l.token + 1 (a new grant),
// computed from the locked latest version of the row. Since updates of the
// row are serialised by its lock and each reads its predecessor's committed
// value, the committed values of a task's token never decrease and rise by
// exactly one per new grant, so no two grants share a token. Renew and
// release never write it, the row is never deleted, and PostgreSQL's commit
// is durable (synchronous_commit, which leasehold expects on), so the counter
// survives release, expiry, sidecar restarts and server crashes. (Deleting
// rows by hand would restart a task's counter: don't.)
//
// The follow-up SELECT cannot turn a free lease into "held". When the claim
// returns no row, the driver reads the task's live lease in a new statement:
// a new snapshot, which includes the winner's commit, and a new now(). It
// returns *leasecore.HeldError only if that read finds a lease of another
// owner that is live at that read's instant, so the lease it names was held at
// an instant during the call, and the holder, expiry and time remaining it
// reports are the store's at that instant. If the read finds no live lease
// (released or expired after the claim was refused) or one of the caller's
// own (a concurrent claim by the same owner won meanwhile), the driver claims
// again, up to maxClaimAttempts times; if every attempt is refused and then
// reads free, it reports unavailable ("cannot tell held from free"). Held is
// never reported without a live holder to name.
//
// # Renew and release
//
// A batch of renewals is one UPDATE whose WHERE clause requires, for each
// row, the caller's live lease (and its token, when given), each renewal
// with its own owner, TTL and token from the unnest arrays (renewBatchSQL).
// Its first step, the locked CTE, locks the batch's rows with SELECT … FOR
// UPDATE, in task order. At READ COMMITTED a row lock that finds the row
// changed since the statement's snapshot waits for the changer to end and
// locks the latest committed version; the UPDATE then meets the version in
// its snapshot, finds it superseded, and re-evaluates its WHERE clause on the
// latest version, the one this statement holds locked (PostgreSQL's
// EvalPlanQual, the same rule as for a lone UPDATE). So every renewal is
// judged on its row's newest committed version, which nobody can change
// until the batch commits: a renewal never extends a lease that a concurrent
// statement released or granted anew; and since an expired lease fails the
// WHERE clause, a renewal never resurrects one. A row that a renewal does
// not match is neither changed nor returned, and it does not affect the
// other rows of the batch. A renewal sent alone is the same UPDATE for one
// row (renewSQL), which locks its row as it updates it. A refused renewal
// reads the row in a new statement to name the reason (not_held, expired,
// held_by_other, token_mismatch); for expired, that statement also records
// the loss (see History). That read may see a later state; a read
// that contradicts the refusal (a live lease the renewal would have
// matched: the owner claimed the task again in between) is reported as
// not_held, because the lease the renewal was meant for is gone.
//
// A batch of releases is the same UPDATE (releaseBatchSQL; releaseSQL for
// one), setting released_at and expires_at to each row's instant, and
// recording a "released" event for each lease it ended. It ends
// only the caller's own live lease: a stale holder cannot end a
// successor's lease, since the owner check refuses another owner and the
// token check refuses the caller's own later grant.
//
// # Batching
//
// Each Store runs one batcher per kind of write (batch.go), which lets at
// most batchFlushers statements of its kind be in flight at once. There is
// no timer. A call that finds nothing queued and a slot free is sent at
// once, alone, from its caller's goroutine, as the single-row statement
// (claimSQL, renewSQL, releaseSQL: the batch statement's decision for one
// row, cheaper to run), so a quiet sidecar answers as fast as with one
// statement per call. A call that finds every slot busy joins its kind's
// queue; batchFlushers flusher goroutines each take, as a slot comes free,
// what is queued, oldest first, up to maxBatch calls of distinct tasks, and
// send it as one statement (the single-row one if the batch has one call).
// Under load, calls pile up while the slots' statements are in flight and go
// together in the next ones, and the server commits once per batch instead
// of once per call. The answers are matched to the callers by task: a claim
// or renewal whose task came back with no row was refused, and its caller
// goes on as before batching (reads the holder and retries, or reads the
// reason), in its own goroutine.
//
// One transaction for many calls changes none of the arguments above: each
// row is decided on its own, by its own WHERE clause, on its newest
// committed version, under its lock. What batching adds is that the locks of
// all rows of a batch are held until the batch commits, and that is why the
// rows are taken in one order:
//
// Lock order. Every batch statement takes its row locks in ascending
// bytewise order of task: the claim batch inserts its rows ORDER BY task
// COLLATE "C" (an INSERT processes its SELECT's rows in the order they come,
// and each row's lock or insertion is taken as it is processed), and the
// renewal and release batches lock theirs in the locked CTE, whose FOR
// UPDATE applies after its ORDER BY (as PostgreSQL's SELECT reference notes,
// the sort comes first, the locking after it). The primary key's collation
// is "C" too, so that order is the order of the task's bytes everywhere. A
// statement waits only for a row it has not yet locked, which comes after
// every row it holds; so in any chain of statements each waiting for the
// next, the rows waited for only rise, and the chain can never return to its
// start: batches of one sidecar, of several, and of different kinds cannot
// deadlock. (The driver's reads lock no rows; its single-row statements,
// like those of earlier versions of the driver, wait for nothing while they
// hold a lock; the read that names the reason of a batch's refused
// renewals locks the rows it marks in the same task order (see History);
// and the history the statements write takes no lock that anything waits
// for, below.) Were a deadlock to happen anyway, PostgreSQL would abort one
// of the statements after deadlock_timeout and its callers would be told
// unavailable; nothing wrong would be committed.
//
// Two calls of one task are never in one batch. A statement cannot decide a
// row twice: INSERT … ON CONFLICT DO UPDATE fails when two of its rows meet
// the same existing row, and an UPDATE joined to two requests for one row
// applies only one of them. Nor may they be merged into one decision: they
// may be two owners, of whom one acquires and the other must be told who
// holds the task, or one owner twice, whose second claim is a refresh (and
// counts a renewal). So a later call of a task already in a batch stays
// queued, in its place, and goes in a later batch: the two are decided one
// after the other, by the row lock, exactly as if they had come from two
// sidecars. Calls of one task are sent in the order they were queued.
//
// A batch statement runs under its own timeout (batchTimeout), never under
// a caller's context, since one caller giving up must not cancel the
// others; a call sent alone by its caller serves nobody else and runs under
// the caller's context, bounded by batchTimeout. A caller whose context
// ends while its call is still queued is dropped from the queue and never
// sent; one whose context ends while its batch is in flight is told
// unavailable at once, and its operation may still commit with the batch,
// as a lone statement cancelled after it was sent may commit (see
// Failures). A batch statement that fails fails every call in it, each told
// unavailable with the statement's error; so that no one caller's input can
// fail a batch, every call is checked against leasecore's Validate before it
// is queued. The costs of sharing: a batch
// that waits for one of its rows (locked by a batch of another sidecar)
// holds up its other calls until that row is free, and the time remaining a
// grant reports is measured from its statement's instant, which is at most
// the batch's duration before the reply (see the section on now()).
//
// Close fails the calls still queued as unavailable, lets the statements in
// flight finish and answer their callers, stops the flushers and closes the
// pool; later calls are unavailable.
//
// # History
//
// The history of a lease is one event when it is granted and one when it
// ends, written by the statement that makes the change, in its transaction,
// so an event is committed exactly when its change is. Each lease statement
// is a data-modifying CTE: the lease INSERT or UPDATE, its RETURNING fed
// to an INSERT into leasehold_history (claimEventsSQL, releaseSQL and
// releaseBatchSQL; renewals that succeed write none). Every event of a task
// is written while its lease row is locked, at the row's instant rowNow,
// which the change then writes on the row (the grant's renewed_at, the
// release's released_at, the loss's lost_at, below), so a task's events
// never go back in time, and their ids, drawn from the identity sequence at
// insert time, follow the order of the changes.
//
// A claim records "acquired" for each new grant (renew_count 0; a
// refresh records nothing). A new grant that replaces a lease that expired
// unreleased also records that lease's end, before its "acquired":
// "expired" when its owner claims again, "taken_over" (naming the new owner
// in the detail) when another owner does. The claim decides that on the
// locked row, but RETURNING sees only the row's new values (PostgreSQL 15
// has no OLD in RETURNING), so the DO UPDATE also writes the replaced
// lease's owner and token into replaced_owner and replaced_token, which
// RETURNING reads back. A release that ends a live lease records
// "released". A lease that expires unreleased and is never claimed again
// has no end event until someone does something with it: a lease's end is
// recorded when the store first sees it.
//
// A renewal refused because the caller's own lease expired unreleased
// records "lost". Its follow-up statement (renewStateSQL; renewStatesSQL
// for a batch) reads the reason and, in the same statement, sets the row's
// lost_at to its instant with an UPDATE that re-checks, under the row's
// lock, that the row is still that owner's expired, unreleased lease whose
// end is not recorded, and writes the event from its RETURNING. A claim
// that later replaces the lease sees lost_at (it decides on the locked,
// latest version) and records no end of its own; a claim that came first
// changed the row, so the UPDATE no longer matches it. The row lock decides
// the order, so each lease ends once in the history, however its owner's
// renewals and the next claims interleave. The batch version locks the
// rows it marks in task order before it updates them, like renewBatchSQL,
// so it keeps the lock order; a refusal for any other reason matches no row
// and locks nothing.
//
// What the history adds to the statements takes no lock that another
// statement waits for: inserted events are new rows whose ids come from the
// sequence, so no unique check waits on another insertion, and the table
// has no foreign key to check. The lock order and the arguments above are
// unchanged. (The one statement that locks events is the pruner's, below,
// and it locks no lease row.)
//
// # Declarations and policies
//
// Each catalog operation is one autocommit statement on one row of
// leasehold_tasks or leasehold_retention_policies, and the constraints
// decide the races: the primary key refuses a second create of a name
// (unique_violation: *leasecore.ExistsError), the foreign key a declaration
// naming a policy that does not exist (foreign_key_violation:
// *leasecore.NotFoundError), and, ON DELETE RESTRICT, the deletion of a
// policy that a declaration names. The key checks see the latest committed
// rows and lock the policy row they find (FOR KEY SHARE), so a declaration
// committing while its policy is deleted either makes the delete fail or
// fails itself; neither can leave a declaration naming no policy. When the
// delete fails, DeletePolicy reads the names of the tasks that name the
// policy for *leasecore.InUseError, and deletes again if by then none does.
// The default policy is refused by the driver before any statement. Updates
// keep created_at, and set updated_at to the later of now() and the
// previous updated_at, for the reason rowNow gives. Catalog statements lock
// no lease or history row.
//
// # Pruning
//
// PruneHistory goes through the tasks of leasehold_leases in order,
// pruneTasksPerStatement of them per statement (pruneHistorySQL), each
// statement its own transaction: a long backlog is deleted in steps that
// each commit, so a pass cut short by its deadline keeps what it did. For
// each task, one short index scan finds the id of its keep_last-th newest
// event, and now() − keep_for is its age bound (by its declared policy, the
// default one when undeclared); two index range scans find the events
// beyond either bound. Those are locked with FOR UPDATE in ascending id
// order before they are deleted, so two passes racing (a pruner that cannot
// reach the prune lease prunes anyway) lock in one order and cannot
// deadlock, and an event the other pass deleted first is skipped (FOR
// UPDATE at READ COMMITTED drops a row deleted meanwhile): each deletion is
// counted by one pass. New events have higher ids and are not touched; an
// event a pass keeps because it was not yet beyond keep_last is deleted by
// the next pass.
//
// # Failures
//
// interpretError is the only code that inspects pgx errors (besides
// pgx.ErrNoRows, which is an answer, not a failure); everything it sees
// becomes *leasecore.UnavailableError with a detail an operator can act on
// (connection refused, timeout, missing schema: "run `leasehold migrate`",
// permission, closed store). Its sibling interpretConstraintError, in the
// same file, lets a catalog write name the outcome of a unique or foreign
// key violation in its own terms (exists, not found, in use); any other
// failure is unavailable. A claim whose context ends after the statement
// was sent may have committed although the caller is told unavailable;
// claiming again as the same owner refreshes that lease while it is live and
// returns its token, so a retry is safe.
//
// # Migrations
//
// Migrate applies the embedded migrations/NNNN_name.sql files in one
// transaction that first takes pg_advisory_xact_lock on a constant key, so
// that concurrent migrators of one database run one after another and the
// later ones find nothing pending. The transaction runs at READ COMMITTED so
// that the version it reads after the lock includes the previous holder's
// commit.
//
// # Connections
//
// Open only parses the URL and starts the flushers: the pool connects on
// first use, so a server that is down makes operations unavailable rather
// than failing start-up.
// pool_max_conns and connect_timeout in the URL are honoured; DefaultMaxConns
// and DefaultConnectTimeout say what applies otherwise, and why.
//
// # Read-only servers and failover
//
// A standby, or a session whose transactions are read-only by default
// (default_transaction_read_only in the server, database, role or the URL's
// options), cannot grant leases. Ping, which readiness uses, asks
// pg_is_in_recovery() and transaction_read_only and reports unavailable
// when either says so; a write refused with SQLSTATE 25006
// (read_only_sql_transaction) is unavailable too, with a detail that says
// read-only. Either one empties the pool (pgxpool's Reset), and a
// connection the server reports as a hot standby or read-only (the
// in_hot_standby and default_transaction_read_only parameters, reported to
// every session since PostgreSQL 14) is closed rather than put back after
// use. So the next connection is made afresh: with a multi-host URL and
// target_session_attrs=read-write, pgx tries the hosts in turn and keeps the
// one that accepts writes, which after a failover is the new primary.
//
// Not at every write, though: with a single-host URL, or while a promotion
// takes its time, that would open a connection (a backend fork) per write
// per sidecar. For defaultReadOnlyBackoff (1 s) after a read-only answer,
// claims, renewals and releases are refused with that answer without a
// round trip, and the pool is emptied at most once per backoff. The first
// write after it asks again, so a promotion is picked up within about a
// second; a Ping that finds the server writable ends the backoff at once.
//
// Credentials never leave the driver in an error's text: interpretError and
// Open pass every text through the redaction that storeurl.Redact uses,
// because pgx's own masking misses some passwords (password=se\ cret) and
// the errors it wraps. Open refuses a URL with a raw '@' or '/' in its
// userinfo, since pgx would read the rest of the password as a host or
// database name and print it as one.
package postgres
