-- The catalog: retention policies, task declarations, and the lease history
-- the lease statements write. Names are collated "C", like leasehold_leases.task,
-- so that equality and ORDER BY compare bytes.

-- Retention policies. The default policy applies to undeclared tasks and to
-- declarations that name none; the driver refuses to delete it.
CREATE TABLE leasehold_retention_policies (
    name        text COLLATE "C" PRIMARY KEY,
    keep_for_ms bigint      NOT NULL CHECK (keep_for_ms >= 0), -- 0: no age bound
    keep_last   bigint      NOT NULL CHECK (keep_last >= 0),   -- 0: no count bound
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- leasecore.DefaultKeepFor (30 days) and leasecore.DefaultKeepLast.
INSERT INTO leasehold_retention_policies (name, keep_for_ms, keep_last)
VALUES ('default', 30 * 24 * 3600 * 1000::bigint, 1000);

-- Task declarations. A declaration names an existing policy; a policy that
-- declarations name cannot be deleted (RESTRICT, checked at once, so a
-- delete racing a declaration that names the policy fails rather than
-- leaving it dangling).
CREATE TABLE leasehold_tasks (
    name             text COLLATE "C" PRIMARY KEY,
    ttl_ms           bigint      NOT NULL CHECK (ttl_ms > 0),
    max_ttl_ms       bigint      NOT NULL DEFAULT 0 CHECK (max_ttl_ms >= 0), -- 0: no bound
    description      text        NOT NULL DEFAULT '',
    retention_policy text COLLATE "C" NOT NULL DEFAULT 'default'
                     REFERENCES leasehold_retention_policies (name) ON DELETE RESTRICT,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- The foreign key check of a policy's deletion, and the names of the tasks
-- that keep it from being deleted.
CREATE INDEX leasehold_tasks_retention_policy ON leasehold_tasks (retention_policy);

-- Lease history: one row per lease event, written by the statement that
-- makes the change it records (acquired, released, expired, taken_over), or
-- that records the loss of an expired lease whose renewal was refused
-- (lost). id rises with every event; a task's events are written under its
-- lease row's lock, so their ids follow the order of the changes. There is
-- no foreign key to leasehold_leases: checking one would lock the lease row.
CREATE TABLE leasehold_history (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task   text COLLATE "C" NOT NULL,
    kind   text        NOT NULL CHECK (kind IN ('acquired', 'released', 'expired', 'taken_over', 'lost')),
    owner  text        NOT NULL,
    token  bigint      NOT NULL,
    at     timestamptz NOT NULL,
    detail text        NOT NULL DEFAULT ''
);

-- A task's newest events (History), and the cut-off of its newest keep_last
-- events (PruneHistory).
CREATE INDEX leasehold_history_task_id ON leasehold_history (task, id DESC);
-- A task's events older than its policy's keep_for (PruneHistory).
CREATE INDEX leasehold_history_task_at ON leasehold_history (task, at);

-- Bookkeeping for the history, on the lease row so that it is written under
-- the row's lock. Not indexed, so renewals stay HOT updates.
--
-- replaced_owner, replaced_token: the expired, unreleased lease that the
-- row's current grant replaced, if its end was not recorded yet. Written by
-- the claim that grants a new token (NULL when it found the task new or
-- released, or the lease's end recorded), kept by refreshes, renewals and
-- releases. The claim statement reads them back in RETURNING, which sees
-- only the row's new values, to record the "expired" or "taken_over" event
-- of the lease it replaced.
--
-- lost_at: when the end of the row's lease, which expired unreleased, was
-- recorded: by a refused renewal (a "lost" event), or, since 0004, by
-- RecordExpiries (an "expired" event); NULL otherwise, and cleared by the
-- next grant. Like renewed_at and released_at, it is a time written on
-- the row, which later statements on the row never precede.
ALTER TABLE leasehold_leases
    ADD COLUMN replaced_owner text,
    ADD COLUMN replaced_token bigint,
    ADD COLUMN lost_at        timestamptz;
