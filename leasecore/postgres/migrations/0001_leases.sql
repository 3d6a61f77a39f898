-- One row per task that was ever claimed. A row is never deleted: its token
-- column is the task's fencing counter, which must survive release, expiry
-- and restarts.
--
-- task is collated "C" so that equality and ORDER BY compare bytes, as Go and
-- the SQLite driver do, whatever the database's default collation is.
--
-- There is deliberately no index besides the primary key: renewals rewrite
-- expires_at, renewed_at and renew_count many times a minute, and with no
-- index on those columns (and free space left on each page by the
-- fillfactor) PostgreSQL can update them in place (HOT) without touching an
-- index. The table holds one small row per task, so scans for list are cheap.
CREATE TABLE leasehold_leases (
    task        text COLLATE "C" PRIMARY KEY,
    owner       text        NOT NULL,
    token       bigint      NOT NULL CHECK (token > 0),
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    ttl_ms      bigint      NOT NULL CHECK (ttl_ms > 0),
    renew_count bigint      NOT NULL DEFAULT 0 CHECK (renew_count >= 0),
    note        text        NOT NULL DEFAULT '',
    released_at timestamptz
) WITH (fillfactor = 70);
