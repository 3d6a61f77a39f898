package postgres

// The statements of the driver. Each operation is decided by one of them,
// run in autocommit (its own transaction, so now() is the statement's start
// time); claims, renewals and releases by the batch statements, which decide
// many calls of distinct tasks at once. docs/design.md ("PostgreSQL: one
// statement at READ COMMITTED") argues why each is correct at READ COMMITTED.
//
// Parameters are typed in the SQL ($3::bigint) so that the same statement
// text prepares to the same plan whatever Go type the caller passes.

// rowNow is the store's instant for a statement working on row l: the later
// of now() (the statement's start; docs/design.md, "The instant a statement
// judges by") and the times already written on the row (lost_at is the
// latest time the end or the loss of an expired lease was recorded; see
// renewStateSQL). Every time on the row
// was written by a transaction that committed before this statement read or
// locked the row, so rowNow is a store-clock instant between the statement's
// start and its decision; taking the later one keeps a row's times from
// going backwards when a statement that started earlier commits after one
// that started later.
const rowNow = `GREATEST(now(), l.renewed_at, l.released_at, l.lost_at)`

// live is the model's liveness test for row l.
const live = `(l.released_at IS NULL AND l.expires_at > ` + rowNow + `)`

// remainingUS is a lease's remaining time in microseconds at rowNow.
// Microseconds are exact (timestamptz's resolution), so a live lease always
// has a positive remainder, even with less than a millisecond left.
const remainingUS = `(extract(epoch FROM l.expires_at - ` + rowNow + `) * 1000000)::bigint`

// leaseColumns are the columns scanLease reads, in its order, for a row
// aliased l. As the output of a CTE, they are named as leaseNames lists them.
const leaseColumns = `l.task, l.owner, l.token, l.acquired_at, l.renewed_at, l.expires_at,
       l.ttl_ms, l.renew_count, l.note, ` + remainingUS + ` AS remaining_us, l.hold_until`

// leaseNames are leaseColumns' names, to read them back from a CTE.
const leaseNames = `task, owner, token, acquired_at, renewed_at, expires_at,
       ttl_ms, renew_count, note, remaining_us, hold_until`

// ownLive: in a claim, the locked row is the claimant's own live lease.
const ownLive = `(l.owner = excluded.owner AND ` + live + `)`

// resting: row l's lease has ended (released or expired) before its
// minimum hold (hold_until) did; the task is granted to nobody until then.
const resting = `(NOT ` + live + ` AND l.hold_until > ` + rowNow + `)`

// claimMinHold is a claim's minimum hold as an interval, in a claim's DO
// UPDATE: the proposed row's hold_until is now() plus the minimum hold
// (NULL for none), and now() is one instant in a transaction.
const claimMinHold = `(excluded.hold_until - now())`

// claimConflictSQL is the decision every claim statement shares: what a
// claim does to the task's existing row, locked by ON CONFLICT DO UPDATE.
//
// The CASE expressions and the WHERE clause all read the same version of the
// row: the latest committed one, locked by ON CONFLICT DO UPDATE. The
// caller's own live lease keeps its token and acquired_at and counts a
// renewal; anything else that passes the WHERE clause is a new grant. A row
// whose WHERE clause fails is not changed and not returned: the claim was
// refused, by another owner's live lease.
//
// A claim's minimum hold comes in the proposed row's hold_until (see
// claimMinHold): a grant's hold ends that long after its acquisition, a
// refresh keeps the later of the two ends (GREATEST ignores NULL). A
// resting row is refused to everyone, its own owner included.
//
// A new grant also records, in replaced_owner, replaced_token and
// replaced_expires_at, the lease it replaced when that lease had expired
// unreleased and its end was not recorded yet (by the expiry sweep or a
// refused renewal; NULL otherwise), because RETURNING sees only the row's
// new values; a refresh keeps them. claimEventsSQL reads them back to
// record the lease's end.
const claimConflictSQL = `
ON CONFLICT (task) DO UPDATE SET
       owner          = excluded.owner,
       token          = CASE WHEN ` + ownLive + ` THEN l.token ELSE l.token + 1 END,
       acquired_at    = CASE WHEN ` + ownLive + ` THEN l.acquired_at ELSE ` + rowNow + ` END,
       renew_count    = CASE WHEN ` + ownLive + ` THEN l.renew_count + 1 ELSE 0 END,
       renewed_at     = ` + rowNow + `,
       expires_at     = ` + rowNow + ` + excluded.ttl_ms * interval '1 millisecond',
       ttl_ms         = excluded.ttl_ms,
       note           = excluded.note,
       released_at    = NULL,
       replaced_owner = CASE WHEN ` + ownLive + ` THEN l.replaced_owner WHEN ` + endUnrecordedOnClaim + ` THEN l.owner END,
       replaced_token = CASE WHEN ` + ownLive + ` THEN l.replaced_token WHEN ` + endUnrecordedOnClaim + ` THEN l.token END,
       replaced_expires_at = CASE WHEN ` + ownLive + ` THEN l.replaced_expires_at WHEN ` + endUnrecordedOnClaim + ` THEN l.expires_at END,
       lost_at        = NULL,
       hold_until     = CASE WHEN ` + ownLive + ` THEN GREATEST(l.hold_until, l.acquired_at + ` + claimMinHold + `)
                             ELSE ` + rowNow + ` + ` + claimMinHold + ` END
 WHERE (NOT ` + live + ` AND NOT coalesce(` + resting + `, false)) -- released or expired, and not resting: free
    OR ` + ownLive + ` -- live and the caller's: refresh
RETURNING ` + leaseColumns + `, l.replaced_owner, l.replaced_token, l.replaced_expires_at`

// endUnrecordedOnClaim: in a claim's DO UPDATE, the locked row is not the
// claimant's live lease, so (the WHERE clause having admitted it) it is
// released or expired; it expired unreleased, with its end not recorded.
const endUnrecordedOnClaim = `(l.released_at IS NULL AND l.lost_at IS NULL)`

// claimEventsSQL follows a claim statement's claimed CTE: it records the
// history of each new grant (renew_count 0; a refresh records nothing), in
// the claim's transaction: first the end of the lease it replaced, if that
// lease expired unreleased with its end unrecorded ("expired", at the
// lease's expiry, for nobody: the event the expiry sweep would have
// recorded, whoever claims; docs/design.md, "History"), then "acquired", at
// the claim's instant (the new renewed_at, which is rowNow), with the
// claim's credential. It answers the claimed leases.
//
// The credential comes from the claim's input, not from the lease row:
// RETURNING gives only the row's columns, so each claim statement names
// its claims' credentials in a CTE actors(task, credential) before
// claimed (a lone claim's parameter; a batch's array), joined back here on
// the task, which is unique in a statement. Keeping the credential on the
// lease row instead would write a column into every claim's row version,
// refreshes included, that nothing but this statement reads.
const claimEventsSQL = `
, events AS (
    INSERT INTO leasehold_history (task, kind, owner, token, at, credential)
    SELECT c.task, e.kind, e.owner, e.token, e.at, e.credential
      FROM claimed AS c
      JOIN actors AS a ON a.task = c.task
     CROSS JOIN LATERAL (VALUES
           (1, 'expired', c.replaced_owner, c.replaced_token, c.replaced_expires_at, ''),
           (2, 'acquired', c.owner, c.token, c.renewed_at, a.credential)
           ) AS e(seq, kind, owner, token, at, credential)
     WHERE c.renew_count = 0 AND e.owner IS NOT NULL
     ORDER BY c.task, e.seq
)
SELECT ` + leaseNames + `
  FROM claimed`

// LoneClaimSQL returns the statement this driver sends for a claim that
// goes out alone ($1 task, $2 owner, $3 ttl in ms, $4 note, $5 credential,
// empty for none, $6 minimum hold in ms, 0 for none; it returns the lease
// row when granted). Benchmarks outside
// the package compare the store against this very statement rather than a
// copy of it.
func LoneClaimSQL() string { return claimSQL }

// claimSQL is one claim on its own: it acquires a free task, re-acquires a
// released or expired one with the next token, or refreshes the caller's own
// live lease; it returns no row when another owner holds a live lease.
// $1 task, $2 owner, $3 ttl in ms, $4 note, $5 credential (empty for none),
// $6 minimum hold in ms (0 for none). It
// is claimBatchSQL for a batch of one claim, which it decides the same way
// at a lower cost (no arrays to unnest, no sort), so a lone claim is as fast
// as before batching. A new grant writes its history in the same statement
// (claimEventsSQL).
const claimSQL = `
WITH actors AS (SELECT $1::text AS task, $5::text AS credential),
claimed AS (
INSERT INTO leasehold_leases AS l
       (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note, released_at, hold_until)
VALUES ($1, $2, 1, now(), now(), now() + $3::bigint * interval '1 millisecond', $3::bigint, 0,
        $4::text, NULL, now() + nullif($6::bigint, 0) * interval '1 millisecond')` + claimConflictSQL + `
)` + claimEventsSQL

// claimBatchSQL is claimSQL for many claims of distinct tasks at once, in one
// transaction: $1 tasks, $2 owners, $3 ttls in ms, $4 notes, $5 credentials,
// $6 minimum holds in ms (0 for none), element i of each array being claim i. It returns a row for each claim
// that acquired, none for a refused one.
//
// The rows are inserted in task order (bytewise, as the primary key sorts),
// so every batch statement of every sidecar locks the rows it decides on in
// one global order and two batches cannot deadlock; docs/design.md
// ("Batching") argues it. The tasks must be distinct: ON CONFLICT DO UPDATE fails the whole
// statement if one row is proposed twice. The history of the batch's new
// grants is written by the same statement (claimEventsSQL), which locks no
// lease row.
const claimBatchSQL = `
WITH actors AS (SELECT * FROM unnest($1::text[], $5::text[]) AS a(task, credential)),
claimed AS (
INSERT INTO leasehold_leases AS l
       (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note, released_at, hold_until)
SELECT r.task, r.owner, 1, now(), now(), now() + r.ttl_ms * interval '1 millisecond', r.ttl_ms, 0,
       r.note, NULL, now() + nullif(r.min_hold_ms, 0) * interval '1 millisecond'
  FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $6::bigint[]) AS r(task, owner, ttl_ms, note, min_hold_ms)
 ORDER BY r.task COLLATE "C"` + claimConflictSQL + `
)` + claimEventsSQL

// holderSQL reads the live lease, or the resting one, that refused a claim:
// a new statement, so a new snapshot that sees the transaction that won.
// A resting lease's expiry is the end of its minimum hold. $1 task.
const holderSQL = `
SELECT l.owner, CASE WHEN ` + live + ` THEN l.expires_at ELSE l.hold_until END,
       (extract(epoch FROM CASE WHEN ` + live + ` THEN l.expires_at ELSE l.hold_until END - ` + rowNow + `) * 1000000)::bigint,
       l.acquired_at, l.hold_until, NOT ` + live + `
  FROM leasehold_leases AS l
 WHERE l.task = $1 AND (` + live + ` OR ` + resting + `)`

// renewSQL extends the owner's live lease, checking the token when one is
// given ($4 > 0). A TTL of 0 ($3) keeps the lease's TTL, a NULL note ($5)
// its note. An expired or released lease is never matched, so a renewal
// cannot resurrect it. $1 task, $2 owner, $3 ttl in ms or 0, $4 token or 0,
// $5 note or NULL. It is renewBatchSQL for a batch of one renewal, which it
// decides the same way at a lower cost.
const renewSQL = `
UPDATE leasehold_leases AS l
   SET expires_at  = ` + rowNow + ` + (CASE WHEN $3::bigint > 0 THEN $3::bigint ELSE l.ttl_ms END) * interval '1 millisecond',
       ttl_ms      = CASE WHEN $3::bigint > 0 THEN $3::bigint ELSE l.ttl_ms END,
       renewed_at  = ` + rowNow + `,
       renew_count = l.renew_count + 1,
       note        = COALESCE($5::text, l.note)
 WHERE l.task = $1 AND l.owner = $2 AND ` + live + `
   AND ($4::bigint = 0 OR l.token = $4::bigint)
RETURNING ` + leaseColumns

// renewBatchSQL extends the owners' live leases of distinct tasks, in one
// transaction: $1 tasks, $2 owners, $3 ttls in ms or 0, $4 tokens or 0, $5
// notes or NULL, element i of each array being renewal i. Each renewal is
// checked on its own: its owner's lease must be live, and carry its token
// when one is given (> 0); a TTL of 0 keeps the lease's TTL, a NULL note its
// note. An expired or released lease is
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
    SELECT l.task, r.owner, r.ttl_ms, r.token, r.note
      FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[]) AS r(task, owner, ttl_ms, token, note)
      JOIN leasehold_leases AS l ON l.task = r.task AND l.owner = r.owner
     ORDER BY l.task
       FOR UPDATE OF l
)
UPDATE leasehold_leases AS l
   SET expires_at  = ` + rowNow + ` + (CASE WHEN r.ttl_ms > 0 THEN r.ttl_ms ELSE l.ttl_ms END) * interval '1 millisecond',
       ttl_ms      = CASE WHEN r.ttl_ms > 0 THEN r.ttl_ms ELSE l.ttl_ms END,
       renewed_at  = ` + rowNow + `,
       renew_count = l.renew_count + 1,
       note        = COALESCE(r.note, l.note)
  FROM locked AS r
 WHERE l.task = r.task AND l.owner = r.owner AND ` + live + `
   AND (r.token = 0 OR l.token = r.token)
RETURNING ` + leaseColumns

// renewStateSQL reads what a refused renewal found, for its reason. If the
// renewal was refused because the caller's own lease expired unreleased (the
// reason lostReason calls expired), and that lease's loss is not recorded
// yet, it records it: it locks the row (locked), sets its lost_at to the
// row's instant and its lost_token to the lease's token (ended), and writes
// the lease's "expired" event, unless its end was recorded already (by the
// expiry sweep or a claim), then a "lost" event (lostEventSQL). The marks
// are written under the row's lock, so a claim replacing the lease either
// comes first (and the row no longer matches) or sees the end recorded and
// records no end of its own: a lease ends once in the history, and is lost
// once, however often its owner's renewals are refused. $1 task, $2 the
// renewal's owner, $3 its credential (empty for none), which the "lost"
// event carries.
//
// The state is read from the statement's snapshot, and the marks match the
// latest version of the row, which locked reads (FOR UPDATE at READ
// COMMITTED locks the latest version and answers its values), so that
// whether the end was recorded before is that version's; if the two differ
// (a claim committed in between) the state still describes the lease the
// renewal was meant for, and the claim recorded its end.
const renewStateSQL = `
WITH locked AS MATERIALIZED (
    SELECT l.task, l.expires_at, l.lost_at IS NULL AS end_unrecorded, $3::text AS credential
      FROM leasehold_leases AS l
     WHERE l.task = $1 AND l.owner = $2::text AND ` + lossUnrecorded + `
       FOR UPDATE OF l
), ended AS (
    UPDATE leasehold_leases AS l
       SET lost_at = ` + rowNow + `, lost_token = l.token
      FROM locked AS k
     WHERE l.task = k.task AND ` + lossUnrecorded + `
    RETURNING l.task, l.owner, l.token, l.lost_at AS at, k.expires_at, k.end_unrecorded, k.credential
)` + lostEventSQL + `
SELECT l.owner, l.token, l.released_at IS NOT NULL, ` + live + `
  FROM leasehold_leases AS l
 WHERE l.task = $1`

// renewStatesSQL is renewStateSQL for many tasks at once, for the refused
// renewals of a RenewBatch: $1 tasks, $2 owners, $3 credentials, element i
// of each being refused renewal i. It answers one row per task, with its
// task first. The rows it marks are locked in task order first, as in
// renewBatchSQL. A task may be named more than once (a RenewBatch may
// renew a task twice): a lease's "lost" event carries the credential of
// the first of its owner's refused renewals.
const renewStatesSQL = `
WITH locked AS MATERIALIZED (
    SELECT l.task, l.expires_at, l.lost_at IS NULL AS end_unrecorded, r.credential
      FROM leasehold_leases AS l
     CROSS JOIN LATERAL (
           SELECT r.credential
             FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS r(task, owner, credential, n)
            WHERE r.task = l.task AND r.owner = l.owner
            ORDER BY r.n
            LIMIT 1) AS r
     WHERE l.task = ANY($1::text[]) AND ` + lossUnrecorded + `
     ORDER BY l.task
       FOR UPDATE OF l
), ended AS (
    UPDATE leasehold_leases AS l
       SET lost_at = ` + rowNow + `, lost_token = l.token
      FROM locked AS k
     WHERE l.task = k.task AND ` + lossUnrecorded + `
    RETURNING l.task, l.owner, l.token, l.lost_at AS at, k.expires_at, k.end_unrecorded, k.credential
)` + lostEventSQL + `
SELECT l.task, l.owner, l.token, l.released_at IS NOT NULL, ` + live + `
  FROM leasehold_leases AS l
 WHERE l.task = ANY($1::text[])`

// endUnrecorded: row l holds a lease that expired unreleased, and whose end
// is not in the history yet.
const endUnrecorded = `l.released_at IS NULL AND l.expires_at <= ` + rowNow + ` AND l.lost_at IS NULL`

// lossUnrecorded: row l holds a lease that expired unreleased, and whose
// loss (a refused late renewal) is not in the history yet. Its end may be.
const lossUnrecorded = `l.released_at IS NULL AND l.expires_at <= ` + rowNow + ` AND l.lost_token IS DISTINCT FROM l.token`

// lostEventSQL follows the ended CTE of a refused renewal's read: for each
// lease it marked, its "expired" event at its expiry and for nobody, when
// its end was not recorded yet, then its "lost" event at the renewal's
// instant, with the refused renewal's credential.
const lostEventSQL = `
, lost AS (
    INSERT INTO leasehold_history (task, kind, owner, token, at, credential)
    SELECT d.task, e.kind, d.owner, d.token, e.at, e.credential
      FROM ended AS d
     CROSS JOIN LATERAL (VALUES
           (1, 'expired', d.expires_at, ''),
           (2, 'lost', d.at, d.credential)
           ) AS e(seq, kind, at, credential)
     WHERE e.seq = 2 OR d.end_unrecorded
     ORDER BY d.task, e.seq
)`

// releaseSQL ends the owner's live lease, checking the token when one is
// given ($3 > 0), and records a "released" event in the same statement, at
// the release's instant, with the release's credential. The row stays,
// with its token and its minimum hold, whose end it answers when that has
// not passed (NULL otherwise); the event keeps that end, and the run's
// outcome $6 (runjson's text, NULL for none). $1 task, $2 owner, $3 token or 0, $4 credential (empty
// for none), $5 the event's detail (empty for none). Its command tag counts the leases it ended (one event each). It is
// releaseBatchSQL for a batch of one release.
const releaseSQL = `
WITH released AS (
UPDATE leasehold_leases AS l
   SET released_at = ` + rowNow + `,
       expires_at  = LEAST(l.expires_at, ` + rowNow + `)
 WHERE l.task = $1 AND l.owner = $2 AND ` + live + `
   AND ($3::bigint = 0 OR l.token = $3::bigint)
RETURNING l.task, l.owner, l.token, l.released_at, CASE WHEN l.hold_until > l.released_at THEN l.hold_until END AS hold_until
), recorded AS (
INSERT INTO leasehold_history (task, kind, owner, token, at, credential, detail, hold_until, run)
SELECT task, 'released', owner, token, released_at, $4::text, $5::text, hold_until, $6::text::jsonb
  FROM released
)
SELECT hold_until FROM released`

// releaseBatchSQL ends the owners' live leases of distinct tasks, in one
// transaction, checking each one's token when given (> 0): $1 tasks,
// $2 owners, $3 tokens or 0, $4 credentials, $5 the events' details, $6 the
// runs' outcomes (runjson's text, NULL for none). The rows stay, with their
// tokens. It records a "released" event for each lease it ended, with its
// release's credential, and returns its task and the end of its minimum
// hold when that has not passed (NULL otherwise). Rows are locked in task
// order, as in renewBatchSQL.
const releaseBatchSQL = `
WITH locked AS MATERIALIZED (
    SELECT l.task, r.owner, r.token, r.credential, r.detail, r.run
      FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[]) AS r(task, owner, token, credential, detail, run)
      JOIN leasehold_leases AS l ON l.task = r.task AND l.owner = r.owner
     ORDER BY l.task
       FOR UPDATE OF l
), released AS (
UPDATE leasehold_leases AS l
   SET released_at = ` + rowNow + `,
       expires_at  = LEAST(l.expires_at, ` + rowNow + `)
  FROM locked AS r
 WHERE l.task = r.task AND l.owner = r.owner AND ` + live + `
   AND (r.token = 0 OR l.token = r.token)
RETURNING l.task, l.owner, l.token, l.released_at, r.credential, r.detail, r.run,
          CASE WHEN l.hold_until > l.released_at THEN l.hold_until END AS hold_until
), recorded AS (
INSERT INTO leasehold_history (task, kind, owner, token, at, credential, detail, hold_until, run)
SELECT task, 'released', owner, token, released_at, credential, detail, hold_until, run::jsonb
  FROM released
 ORDER BY task
)
SELECT task, hold_until FROM released`

// getSQL reads a task's live lease. $1 task.
const getSQL = `
SELECT ` + leaseColumns + `
  FROM leasehold_leases AS l
 WHERE l.task = $1 AND ` + live

// listSQL reads a page of the live leases, ordered by task (bytewise: the
// column is collated "C"), by the primary key's range. $1 after (the empty
// string sorts before every task), $2 limit (NULL: no limit), $3 and $4
// the range of ListParams.Prefix ($4 empty: no end).
const listSQL = `
SELECT ` + leaseColumns + `
  FROM leasehold_leases AS l
 WHERE l.task > $1::text AND l.task >= $3::text AND ($4::text = '' OR l.task < $4::text) AND ` + live + `
 ORDER BY l.task
 LIMIT $2::bigint`

// writableSQL answers whether the server is a standby, and whether this
// session's transactions are read-only (default_transaction_read_only, set
// in the server, the database, the role or the URL's options). It names no
// table, so it answers on a standby that has not replayed the schema yet.
const writableSQL = `SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'`

// schemaSQL answers the schema version and fails with undefined_table when
// either table is missing.
const schemaSQL = `
SELECT (SELECT coalesce(max(version), 0) FROM leasehold_schema_migrations),
       (SELECT count(*) FROM (SELECT FROM leasehold_leases LIMIT 1) AS any_lease)`

// The catalog's statements (catalog.go). Times are the store's: now() when
// a row is created; an update's updated_at is never before the row's
// previous one, for the reason rowNow gives.

// taskColumns are the columns scanTask reads, in its order, for a row
// aliased t.
const taskColumns = `t.name, t.ttl_ms, t.max_ttl_ms, t.description, t.retention_policy, t.created_at, t.updated_at, t.ttl_spelling, t.max_ttl_spelling, t.managed_by,
       t.min_hold_ms, t.min_hold_spelling`

// createTaskSQL inserts a declaration. $1 name, $2 ttl in ms, $3 max_ttl in
// ms or 0, $4 description, $5 policy, $6 and $7 the ttl's and max_ttl's
// spellings, $8 its manager, $9 its minimum hold in ms or 0, $10 that
// hold's spelling. The primary key refuses a name taken
// (23505), the foreign key a policy that does not exist (23503).
const createTaskSQL = `
INSERT INTO leasehold_tasks AS t (name, ttl_ms, max_ttl_ms, description, retention_policy, created_at, updated_at, ttl_spelling, max_ttl_spelling, managed_by,
       min_hold_ms, min_hold_spelling)
VALUES ($1, $2::bigint, $3::bigint, $4::text, $5::text, now(), now(), $6::text, $7::text, $8::text, $9::bigint, $10::text)
RETURNING ` + taskColumns

// updateTaskSQL replaces a declaration, keeping created_at; no row when
// there is none, or when Terraform manages it and $11 (the writer may change
// what Terraform manages: leasecore.Writer.May) is false. Parameters as
// createTaskSQL's. The manager is checked on the row the update locks, so a
// change of manager committed meanwhile is seen.
const updateTaskSQL = `
UPDATE leasehold_tasks AS t
   SET ttl_ms           = $2::bigint,
       max_ttl_ms       = $3::bigint,
       description      = $4::text,
       retention_policy = $5::text,
       ttl_spelling     = $6::text,
       max_ttl_spelling = $7::text,
       managed_by       = $8::text,
       min_hold_ms      = $9::bigint,
       min_hold_spelling = $10::text,
       updated_at       = GREATEST(now(), t.updated_at)
 WHERE t.name = $1 AND (t.managed_by <> 'terraform' OR $11::boolean)
RETURNING ` + taskColumns

// getTaskSQL reads a declaration. $1 name.
const getTaskSQL = `SELECT ` + taskColumns + ` FROM leasehold_tasks AS t WHERE t.name = $1`

// listTasksSQL reads a page of the declarations, ordered by name
// (bytewise), by the primary key's range. $1 after, $2 limit (NULL: none),
// $3 and $4 the range of ListParams.Prefix ($4 empty: no end).
const listTasksSQL = `SELECT ` + taskColumns + ` FROM leasehold_tasks AS t
 WHERE t.name > $1::text AND t.name >= $3::text AND ($4::text = '' OR t.name < $4::text) ORDER BY t.name LIMIT $2::bigint`

// deleteTaskSQL removes a declaration. $1 name, $2 whether the writer may
// remove what Terraform manages.
const deleteTaskSQL = `DELETE FROM leasehold_tasks WHERE name = $1 AND (managed_by <> 'terraform' OR $2::boolean)`

// taskManagerSQL reads the manager of a declaration. $1 name.
const taskManagerSQL = `SELECT managed_by FROM leasehold_tasks WHERE name = $1`

// policyManagerSQL reads the manager of a policy. $1 name.
const policyManagerSQL = `SELECT managed_by FROM leasehold_retention_policies WHERE name = $1`

// policyColumns are the columns scanPolicy reads, in its order, for a row
// aliased p.
const policyColumns = `p.name, p.keep_for_ms, p.keep_last, p.created_at, p.updated_at, p.keep_for_spelling, p.managed_by`

// createPolicySQL inserts a policy. $1 name, $2 keep_for in ms, $3
// keep_last, $4 keep_for's spelling, $5 its manager. The primary key
// refuses a name taken (23505).
const createPolicySQL = `
INSERT INTO leasehold_retention_policies AS p (name, keep_for_ms, keep_last, created_at, updated_at, keep_for_spelling, managed_by)
VALUES ($1, $2::bigint, $3::bigint, now(), now(), $4::text, $5::text)
RETURNING ` + policyColumns

// updatePolicySQL replaces a policy, keeping created_at; no row when there
// is none, or when Terraform manages it and $6 (as updateTaskSQL's $9) is
// false. Parameters as createPolicySQL's.
const updatePolicySQL = `
UPDATE leasehold_retention_policies AS p
   SET keep_for_ms       = $2::bigint,
       keep_last         = $3::bigint,
       keep_for_spelling = $4::text,
       managed_by        = $5::text,
       updated_at        = GREATEST(now(), p.updated_at)
 WHERE p.name = $1 AND (p.managed_by <> 'terraform' OR $6::boolean)
RETURNING ` + policyColumns

// getPolicySQL reads a policy. $1 name.
const getPolicySQL = `SELECT ` + policyColumns + ` FROM leasehold_retention_policies AS p WHERE p.name = $1`

// listPoliciesSQL reads every policy, ordered by name (bytewise).
const listPoliciesSQL = `SELECT ` + policyColumns + ` FROM leasehold_retention_policies AS p ORDER BY p.name`

// deletePolicySQL removes a policy. $1 name, $2 whether the writer may
// remove what Terraform manages. The foreign key of leasehold_tasks
// refuses it (23503) while a declaration names the policy, checked against
// the latest committed declarations.
const deletePolicySQL = `DELETE FROM leasehold_retention_policies WHERE name = $1 AND (managed_by <> 'terraform' OR $2::boolean)`

// policyUsersSQL reads the names of the declarations that name a policy,
// ordered. $1 policy.
const policyUsersSQL = `SELECT t.name FROM leasehold_tasks AS t WHERE t.retention_policy = $1 ORDER BY t.name`

// historySQL reads a task's newest events, newest first. $1 task, $2 limit.
const historySQL = `
SELECT h.id, h.task, h.kind, h.owner, h.token, h.at, h.detail, h.credential, h.hold_until, h.run::text
  FROM leasehold_history AS h
 WHERE h.task = $1
 ORDER BY h.id DESC
 LIMIT $2::bigint`

// pruneHistorySQL deletes the events that their task's policy does not
// keep, for the tasks of one chunk: the first $2 tasks (in bytewise order)
// after $1. It answers the number of tasks in the chunk, the last of them
// (NULL when there is none) and the number of events deleted.
//
// bounds has, per task, the instant before which its events are too old
// (keep_for > 0) and the id of the oldest of its newest keep_last events
// (keep_last > 0, and the task has that many), each NULL when it does not
// apply: one short index scan per task. The tasks are those of
// leasehold_leases: only statements that write or read a task's lease row
// write its events, and lease rows are never deleted. A task that is not
// declared follows the default policy.
//
// candidates are the events beyond either bound, found by two index range
// scans per task (an OR of the two would read every event of the task).
// doomed locks them in ascending id order before the DELETE removes them,
// so that two passes racing (the prune lease is advisory: a pruner that
// cannot reach it prunes anyway) lock in one order and cannot deadlock; an
// event the other pass deleted first drops out of doomed (FOR UPDATE skips
// a row deleted meanwhile), so each deletion is counted once. The lease
// statements only insert events, and lock no event row.
const pruneHistorySQL = `
WITH bounds AS MATERIALIZED (
    SELECT l.task,
           CASE WHEN p.keep_for_ms > 0 THEN now() - p.keep_for_ms * interval '1 millisecond' END AS too_old,
           CASE WHEN p.keep_last > 0 THEN (
               SELECT h.id
                 FROM leasehold_history AS h
                WHERE h.task = l.task
                ORDER BY h.id DESC
               OFFSET greatest(p.keep_last - 1, 0) LIMIT 1) END AS oldest_kept
      FROM (SELECT task FROM leasehold_leases WHERE task > $1::text ORDER BY task LIMIT $2::bigint) AS l
      LEFT JOIN leasehold_tasks AS t ON t.name = l.task
      JOIN leasehold_retention_policies AS p ON p.name = coalesce(t.retention_policy, 'default')
), candidates AS (
    SELECT h.id
      FROM bounds AS b
      JOIN leasehold_history AS h ON h.task = b.task AND h.id < b.oldest_kept
    UNION ALL
    SELECT h.id
      FROM bounds AS b
      JOIN leasehold_history AS h ON h.task = b.task AND h.at < b.too_old
), doomed AS MATERIALIZED (
    SELECT h.id
      FROM leasehold_history AS h
     WHERE h.id IN (SELECT id FROM candidates)
     ORDER BY h.id
       FOR UPDATE OF h
), deleted AS (
    DELETE FROM leasehold_history AS h
     USING doomed AS d
     WHERE h.id = d.id
    RETURNING h.id
)
SELECT (SELECT count(*) FROM bounds),
       (SELECT max(task) FROM bounds),
       (SELECT count(*) FROM deleted)`

// The feed's statements (feed.go).

// followFromNowSQL is the newest committed event's id, 0 when there is none:
// where a cursor "from now" starts.
const followFromNowSQL = `SELECT coalesce(max(id), 0) FROM leasehold_history`

// highWaterExpr is the history's id high-water mark: the last value its
// identity sequence handed out (0 before the first), whether that event
// committed, rolled back, is still in flight or was pruned since. Ids are
// never handed out twice while the sequence goes on, so a position above
// it was never this history's, or the history went back: a restore sets
// the sequence back with the rows (pg_dump saves its value), as does a
// failover to a replica that had not received the newest ones. Reading it
// needs SELECT or USAGE on the sequence; the value is read outside any
// snapshot, so it is at least every id a snapshot taken before shows.
const highWaterExpr = `coalesce(pg_sequence_last_value(pg_get_serial_sequence('leasehold_history', 'id')::regclass), 0)`

// highWaterSQL reads highWaterExpr.
const highWaterSQL = `SELECT ` + highWaterExpr

// readHistorySQL reads, in one statement and so in one snapshot, that
// snapshot's xmin (pg_current_snapshot is the statement's snapshot at READ
// COMMITTED), a bound above every transaction id assigned when the snapshot
// was taken, the history's id high-water mark (highWaterExpr), and up to $2
// events with ids above $1, in id order. It answers at least one row: with
// no events, one row whose event columns are NULL, so the snapshot comes
// back either way. feed.go says why the cursor needs them.
//
// The bound is the next transaction id to be assigned, read during the
// statement, so after its snapshot: age(x) is the distance from x to it
// (to this transaction's own id, and this read has none). The snapshot's
// xmax is no such bound: it is one past the newest transaction that had
// ended, and a transaction running with a later id is not listed in the
// snapshot at all. age works on 32-bit ids, so it is taken from xmax's low
// 32 bits, which are within 2^31 of the next id; in the rare snapshot
// whose xmax's low bits are a special id (below 3), age answers 2^31-1 and
// the bound is too high, which only delays the proof (to
// GapSettleTimeout).
const readHistorySQL = `
WITH snap AS (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin,
                     pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax)
SELECT snap.xmin, snap.xmax + age((snap.xmax % 4294967296)::text::xid), ` + highWaterExpr + `,
       h.id, h.task, h.kind, h.owner, h.token, h.at, h.detail, h.credential, h.hold_until, h.run
  FROM snap
  LEFT JOIN LATERAL (
       SELECT h.id, h.task, h.kind, h.owner, h.token, h.at, h.detail, h.credential, h.hold_until, h.run::text
         FROM leasehold_history AS h
        WHERE h.id > $1::bigint
        ORDER BY h.id
        LIMIT $2::bigint) AS h ON true
 ORDER BY h.id`

// recordExpiriesSQL records the end of up to $1 leases that expired
// unreleased and whose end is not recorded yet (endUnrecorded): it marks
// each row's end recorded (lost_at, at the row's instant) and writes an
// "expired" event at the lease's expiry, with its owner and token and no
// credential (the column's default, the empty string): the same event a
// claim or a late renewal that came first would have recorded. It
// answers how many it recorded and the earliest expiry among live leases
// (NULL when none is live).
//
// due locks the rows in task order, as the claim and renewal batches do,
// and skips a row another statement holds locked (SKIP LOCKED), so the
// sweep never waits on a lease statement and cannot take part in a
// deadlock: a skipped row is left to the statement holding it (a claim
// records the lease's end itself) or to the next sweep. A row locked after
// it changed is re-checked on its newest version (READ COMMITTED's
// EvalPlanQual), and the UPDATE checks again, so a lease renewed, released
// or re-granted meanwhile is never marked. Once the mark is written, a
// claim finds the end recorded (endUnrecordedOnClaim) and records only its
// "acquired", and a late renewal's read records only its "lost"
// (renewStateSQL).
//
// The scans of leasehold_leases use no index: there is deliberately none
// on expires_at (0001, renewals stay HOT updates), and the table holds one
// small row per task.
const recordExpiriesSQL = `
WITH due AS MATERIALIZED (
    SELECT l.task
      FROM leasehold_leases AS l
     WHERE ` + endUnrecorded + `
     ORDER BY l.task
     LIMIT $1::bigint
       FOR UPDATE OF l SKIP LOCKED
), ended AS (
    UPDATE leasehold_leases AS l
       SET lost_at = ` + rowNow + `
      FROM due AS d
     WHERE l.task = d.task AND ` + endUnrecorded + `
    RETURNING l.task, l.owner, l.token, l.expires_at
), recorded AS (
    INSERT INTO leasehold_history (task, kind, owner, token, at)
    SELECT task, 'expired', owner, token, expires_at
      FROM ended
     ORDER BY task
    RETURNING 1
)
SELECT (SELECT count(*) FROM recorded),
       (SELECT min(l.expires_at) FROM leasehold_leases AS l WHERE ` + live + `)`
