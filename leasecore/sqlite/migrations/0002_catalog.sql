-- The catalog: retention policies, task declarations, and lease history.
-- Times are milliseconds since the Unix epoch by SQLite's clock, as in
-- leasehold_leases; durations are milliseconds.

-- How much history the pruner keeps per task: events older than keep_for_ms
-- and events beyond the newest keep_last are deleted; 0 means no such bound.
-- The 'default' policy applies to tasks that name none and to undeclared
-- tasks; the driver refuses to delete it.
CREATE TABLE leasehold_retention_policies (
    name        TEXT    NOT NULL PRIMARY KEY,
    keep_for_ms INTEGER NOT NULL CHECK (keep_for_ms >= 0),
    keep_last   INTEGER NOT NULL CHECK (keep_last >= 0),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- 30 days, 1000 events: leasecore.DefaultKeepFor and DefaultKeepLast.
INSERT INTO leasehold_retention_policies (name, keep_for_ms, keep_last, created_at, updated_at)
VALUES ('default', 2592000000, 1000,
        CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER),
        CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER));

-- Task declarations. max_ttl_ms 0 means no bound beyond the model's. A
-- declaration is independent of the task's lease row: declaring, changing
-- or deleting one never touches the lease or its token counter.
CREATE TABLE leasehold_tasks (
    name             TEXT    NOT NULL PRIMARY KEY,
    ttl_ms           INTEGER NOT NULL CHECK (ttl_ms > 0),
    max_ttl_ms       INTEGER NOT NULL DEFAULT 0 CHECK (max_ttl_ms = 0 OR max_ttl_ms >= ttl_ms),
    description      TEXT    NOT NULL DEFAULT '',
    retention_policy TEXT    NOT NULL DEFAULT 'default'
                     REFERENCES leasehold_retention_policies (name) ON UPDATE RESTRICT ON DELETE RESTRICT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- The tasks naming a policy, by name: what deleting a policy must check.
CREATE INDEX leasehold_tasks_by_policy ON leasehold_tasks (retention_policy, name);

-- Lease history: one row when a lease is granted and one when it ends, never
-- one per renewal. AUTOINCREMENT, because ids must never be handed out
-- again, not even after the newest events were pruned.
--
-- A task's events form a chain, newest first: leasehold_leases.last_event
-- is the newest, and each event's prev_id the one before it (NULL for the
-- task's first event; an id that was pruned once the older events are
-- gone). History and pruning walk the chain by id. There is deliberately no
-- index on task: every batch of lease operations updates its leases' rows
-- anyway, while an index by task would dirty one more page per task in the
-- batch, and a commit's cost grows with the pages it writes.
CREATE TABLE leasehold_history (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    task    TEXT    NOT NULL,
    kind    TEXT    NOT NULL CHECK (kind IN ('acquired', 'released', 'expired', 'taken_over', 'lost')),
    owner   TEXT    NOT NULL,
    token   INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    detail  TEXT    NOT NULL DEFAULT '',
    prev_id INTEGER CHECK (prev_id < id)
) STRICT;

-- The newest event of the task (NULL: none yet).
ALTER TABLE leasehold_leases ADD COLUMN last_event INTEGER;

-- 1 once the end of the row's current lease is in the history although the
-- lease was not released (its owner's renewal found it expired: lost), so
-- that the next grant does not record its end a second time. A grant resets
-- it.
ALTER TABLE leasehold_leases ADD COLUMN end_recorded INTEGER NOT NULL DEFAULT 0 CHECK (end_recorded IN (0, 1));
