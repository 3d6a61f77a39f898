-- A lease's minimum hold (leasecore.ClaimParams.MinHold): until hold_until (ms since the epoch,
-- the store's clock) the task is granted to nobody, even after the lease is released or expires.
-- NULL: none. An expand step: a binary that does not know it never reads the column and leaves
-- it NULL on the rows it inserts; it would grant a resting task, so a fleet asks for minimum
-- holds only once every binary knows this migration (docs/compatibility.md).
ALTER TABLE leasehold_leases ADD COLUMN hold_until INTEGER;

-- A task's declared minimum hold (leasecore.TaskDecl.MinHold), for its claims that ask for none,
-- and its spelling as the declaration's author wrote it. 0 and '': none.
ALTER TABLE leasehold_tasks ADD COLUMN min_hold_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE leasehold_tasks ADD COLUMN min_hold_spelling TEXT NOT NULL DEFAULT '';

-- A released event's hold (leasehold_history.hold_until, ms; NULL: none, or passed) and what the
-- job run under the lease did (run: a JSON object, leasecore/internal/runjson; NULL: not said).
ALTER TABLE leasehold_history ADD COLUMN hold_until INTEGER;
ALTER TABLE leasehold_history ADD COLUMN run TEXT;
