package postgres

// The statements of the driver. Each operation is decided by one of them,
// run in autocommit (its own transaction, so now() is the statement's start
// time); claims, renewals and releases by the batch statements, which decide
// many calls of distinct tasks at once. doc.go argues why each is correct at
// READ COMMITTED.
//
// Parameters are typed in the SQL ($3::bigint) so that the same statement
// text prepares to the same plan whatever Go type the caller passes.

// rowNow is the store's instant for a statement working on row l: the later
// of now() (the statement's start, see the package doc) and the times
// already written on the row. Every time on the row was written by a
// transaction that committed before this statement read or locked the row,
// so rowNow is a store-clock instant between the statement's start and its
// decision; taking the later one keeps a row's times from going backwards
// when a statement that started earlier commits after one that started later.
const rowNow = `GREATEST(now(), l.renewed_at, l.released_at)`

// live is the model's liveness test for row l.
const live = `(l.released_at IS NULL AND l.expires_at > ` + rowNow + `)`

// remainingUS is a lease's remaining time in microseconds at rowNow.
// Microseconds are exact (timestamptz's resolution), so a live lease always
// has a positive remainder, even with less than a millisecond left.
const remainingUS = `(extract(epoch FROM l.expires_at - ` + rowNow + `) * 1000000)::bigint`

// leaseColumns are the columns scanLease reads, in its order, for a row
// aliased l.
const leaseColumns = `l.task, l.owner, l.token, l.acquired_at, l.renewed_at, l.expires_at,
       l.ttl_ms, l.renew_count, l.note, ` + remainingUS

// ownLive: in a claim, the locked row is the claimant's own live lease.
const ownLive = `(l.owner = excluded.owner AND ` + live + `)`

// claimConflictSQL is the decision every claim statement shares: what a
// claim does to the task's existing row, locked by ON CONFLICT DO UPDATE.
//
// The CASE expressions and the WHERE clause all read the same version of the
// row: the latest committed one, locked by ON CONFLICT DO UPDATE. The
// caller's own live lease keeps its token and acquired_at and counts a
// renewal; anything else that passes the WHERE clause is a new grant. A row
// whose WHERE clause fails is not changed and not returned: the claim was
// refused, by another owner's live lease.
const claimConflictSQL = `
ON CONFLICT (task) DO UPDATE SET
       owner       = excluded.owner,
       token       = CASE WHEN ` + ownLive + ` THEN l.token ELSE l.token + 1 END,
       acquired_at = CASE WHEN ` + ownLive + ` THEN l.acquired_at ELSE ` + rowNow + ` END,
       renew_count = CASE WHEN ` + ownLive + ` THEN l.renew_count + 1 ELSE 0 END,
       renewed_at  = ` + rowNow + `,
       expires_at  = ` + rowNow + ` + excluded.ttl_ms * interval '1 millisecond',
       ttl_ms      = excluded.ttl_ms,
       note        = excluded.note,
       released_at = NULL
 WHERE NOT ` + live + ` -- released or expired: free
    OR l.owner = excluded.owner -- live and the caller's: refresh
RETURNING ` + leaseColumns

// claimSQL is one claim on its own: it acquires a free task, re-acquires a
// released or expired one with the next token, or refreshes the caller's own
// live lease; it returns no row when another owner holds a live lease.
// $1 task, $2 owner, $3 ttl in ms, $4 note. It is claimBatchSQL for a batch
// of one claim, which it decides the same way at a lower cost (no arrays to
// unnest, no sort), so a lone claim is as fast as before batching.
const claimSQL = `
INSERT INTO leasehold_leases AS l
       (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note, released_at)
VALUES ($1, $2, 1, now(), now(), now() + $3::bigint * interval '1 millisecond', $3::bigint, 0,
        $4::text, NULL)` + claimConflictSQL

// claimBatchSQL is claimSQL for many claims of distinct tasks at once, in one
// transaction: $1 tasks, $2 owners, $3 ttls in ms, $4 notes, element i of
// each array being claim i. It returns a row for each claim that acquired,
// none for a refused one.
//
// The rows are inserted in task order (bytewise, as the primary key sorts),
// so every batch statement of every sidecar locks the rows it decides on in
// one global order and two batches cannot deadlock; the package doc argues
// it. The tasks must be distinct: ON CONFLICT DO UPDATE fails the whole
// statement if one row is proposed twice.
const claimBatchSQL = `
INSERT INTO leasehold_leases AS l
       (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note, released_at)
SELECT r.task, r.owner, 1, now(), now(), now() + r.ttl_ms * interval '1 millisecond', r.ttl_ms, 0,
       r.note, NULL
  FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS r(task, owner, ttl_ms, note)
 ORDER BY r.task COLLATE "C"` + claimConflictSQL

// holderSQL reads the live lease that refused a claim: a new statement, so a
// new snapshot that sees the transaction that won. $1 task.
const holderSQL = `
SELECT l.owner, l.expires_at, ` + remainingUS + `
  FROM leasehold_leases AS l
 WHERE l.task = $1 AND ` + live

// renewSQL extends the owner's live lease, checking the token when one is
// given ($4 > 0). A TTL of 0 ($3) keeps the lease's TTL. An expired or
// released lease is never matched, so a renewal cannot resurrect it.
// $1 task, $2 owner, $3 ttl in ms or 0, $4 token or 0. It is renewBatchSQL
// for a batch of one renewal, which it decides the same way at a lower cost.
const renewSQL = `
UPDATE leasehold_leases AS l
   SET expires_at  = ` + rowNow + ` + (CASE WHEN $3::bigint > 0 THEN $3::bigint ELSE l.ttl_ms END) * interval '1 millisecond',
       ttl_ms      = CASE WHEN $3::bigint > 0 THEN $3::bigint ELSE l.ttl_ms END,
       renewed_at  = ` + rowNow + `,
       renew_count = l.renew_count + 1
 WHERE l.task = $1 AND l.owner = $2 AND ` + live + `
   AND ($4::bigint = 0 OR l.token = $4::bigint)
RETURNING ` + leaseColumns

// renewBatchSQL extends the owners' live leases of distinct tasks, in one
// transaction: $1 tasks, $2 owners, $3 ttls in ms or 0, $4 tokens or 0,
// element i of each array being renewal i. Each renewal is checked on its
// own: its owner's lease must be live, and carry its token when one is given
// (> 0); a TTL of 0 keeps the lease's TTL. An expired or released lease is
// never matched, so a renewal cannot resurrect it. It returns a row for each
// renewal that succeeded, none for a refused one.
//
// The locked CTE locks the rows in task order before the UPDATE changes
// them, whatever join the planner picks for the UPDATE, so renewals lock in
// the same global order as claim batches (see claimBatchSQL). The UPDATE
// then decides each row on its latest committed version, which it holds
// locked.
const renewBatchSQL = `
WITH locked AS MATERIALIZED (
    SELECT l.task, r.owner, r.ttl_ms, r.token
      FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS r(task, owner, ttl_ms, token)
      JOIN leasehold_leases AS l ON l.task = r.task AND l.owner = r.owner
     ORDER BY l.task
       FOR UPDATE OF l
)
UPDATE leasehold_leases AS l
   SET expires_at  = ` + rowNow + ` + (CASE WHEN r.ttl_ms > 0 THEN r.ttl_ms ELSE l.ttl_ms END) * interval '1 millisecond',
       ttl_ms      = CASE WHEN r.ttl_ms > 0 THEN r.ttl_ms ELSE l.ttl_ms END,
       renewed_at  = ` + rowNow + `,
       renew_count = l.renew_count + 1
  FROM locked AS r
 WHERE l.task = r.task AND l.owner = r.owner AND ` + live + `
   AND (r.token = 0 OR l.token = r.token)
RETURNING ` + leaseColumns

// renewStateSQL reads what a refused renewal found, for its reason. $1 task.
const renewStateSQL = `
SELECT l.owner, l.token, l.released_at IS NOT NULL, ` + live + `
  FROM leasehold_leases AS l
 WHERE l.task = $1`

// renewStatesSQL is renewStateSQL for many tasks at once, for the refused
// renewals of a RenewBatch. $1 tasks.
const renewStatesSQL = `
SELECT l.task, l.owner, l.token, l.released_at IS NOT NULL, ` + live + `
  FROM leasehold_leases AS l
 WHERE l.task = ANY($1::text[])`

// releaseSQL ends the owner's live lease, checking the token when one is
// given ($3 > 0). The row stays, with its token. $1 task, $2 owner, $3 token
// or 0. It is releaseBatchSQL for a batch of one release.
const releaseSQL = `
UPDATE leasehold_leases AS l
   SET released_at = ` + rowNow + `,
       expires_at  = LEAST(l.expires_at, ` + rowNow + `)
 WHERE l.task = $1 AND l.owner = $2 AND ` + live + `
   AND ($3::bigint = 0 OR l.token = $3::bigint)`

// releaseBatchSQL ends the owners' live leases of distinct tasks, in one
// transaction, checking each one's token when given (> 0): $1 tasks,
// $2 owners, $3 tokens or 0. The rows stay, with their tokens. It returns
// the task of each lease it ended. Rows are locked in task order, as in
// renewBatchSQL.
const releaseBatchSQL = `
WITH locked AS MATERIALIZED (
    SELECT l.task, r.owner, r.token
      FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(task, owner, token)
      JOIN leasehold_leases AS l ON l.task = r.task AND l.owner = r.owner
     ORDER BY l.task
       FOR UPDATE OF l
)
UPDATE leasehold_leases AS l
   SET released_at = ` + rowNow + `,
       expires_at  = LEAST(l.expires_at, ` + rowNow + `)
  FROM locked AS r
 WHERE l.task = r.task AND l.owner = r.owner AND ` + live + `
   AND (r.token = 0 OR l.token = r.token)
RETURNING l.task`

// getSQL reads a task's live lease. $1 task.
const getSQL = `
SELECT ` + leaseColumns + `
  FROM leasehold_leases AS l
 WHERE l.task = $1 AND ` + live

// listSQL reads every live lease, ordered by task (bytewise: the column is
// collated "C").
const listSQL = `
SELECT ` + leaseColumns + `
  FROM leasehold_leases AS l
 WHERE ` + live + `
 ORDER BY l.task`

// pingSQL answers the schema version and fails with undefined_table when
// either table is missing.
const pingSQL = `
SELECT (SELECT coalesce(max(version), 0) FROM leasehold_schema_migrations),
       (SELECT count(*) FROM (SELECT FROM leasehold_leases LIMIT 1) AS any_lease)`
