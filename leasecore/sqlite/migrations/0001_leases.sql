-- One row per task that was ever claimed. A row is never deleted: its token
-- column is the task's fencing counter and must survive release, expiry and
-- restarts. Times are milliseconds since the Unix epoch, as SQLite's clock
-- reads them (unixepoch('subsec')).
CREATE TABLE leasehold_leases (
    task        TEXT    NOT NULL PRIMARY KEY,
    owner       TEXT    NOT NULL,
    token       INTEGER NOT NULL CHECK (token > 0),
    acquired_at INTEGER NOT NULL,
    renewed_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    ttl_ms      INTEGER NOT NULL CHECK (ttl_ms > 0),
    renew_count INTEGER NOT NULL DEFAULT 0 CHECK (renew_count >= 0),
    note        TEXT    NOT NULL DEFAULT '',
    -- NULL unless the lease was released; a lease is live iff released_at IS
    -- NULL AND expires_at > now.
    released_at INTEGER
) STRICT, WITHOUT ROWID;
