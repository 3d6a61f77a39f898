-- The history holds the same events whether or not anyone watched (docs/design.md, "History").
-- The end of a lease that ran out unreleased is one "expired" event, at its expiry, recorded by
-- whoever notices it first (the expiry sweep, a claim, a refused late renewal); lost_at marks it
-- recorded, as before. A refused late renewal also records "lost", once per lease.
--
-- replaced_expires_at: the expiry of the lease the row's current grant replaced, written with
-- replaced_owner and replaced_token by the claim that grants a new token, which reads it back
-- in RETURNING (it sees only the row's new values) to stamp that lease's "expired" event.
--
-- lost_token: the token of the lease whose loss (a "lost" event) the history holds; NULL for
-- none. A token rather than a flag, so that a grant need not clear it (a new grant has a new
-- token) and a grant by a binary that does not know the column leaves no stale mark on the next
-- lease.
--
-- An expand step: a binary that does not know it never reads either column. It still records a
-- lease's end as it did before (taken_over when another owner claims, a lost that stands for the
-- end; docs/compatibility.md). Neither column is indexed, so renewals stay HOT updates.
ALTER TABLE leasehold_leases
    ADD COLUMN replaced_expires_at timestamptz,
    ADD COLUMN lost_token          bigint;
