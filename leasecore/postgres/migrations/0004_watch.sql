-- The watch (leasecore.HistoryFeed). The history table stays the source of
-- truth; a notification only tells listeners to read it again.
--
-- After every statement that inserts history rows, notify the channel
-- leasehold_history (postgres.HistoryChannel). The payload is empty on
-- purpose: PostgreSQL delivers identical notifications of one transaction
-- once, at commit, so a claim batch of a hundred grants costs listeners one
-- wake-up, and a transaction that rolls back notifies nobody.
--
-- Every claim and release statement runs its history INSERT, and a
-- statement-level trigger fires even when it inserts no row (a refresh, a
-- refused claim, a release of what is not held): the transition table
-- tells those apart, so they wake nobody.
CREATE FUNCTION leasehold_history_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM added) THEN
        PERFORM pg_notify('leasehold_history', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER leasehold_history_notify
    AFTER INSERT ON leasehold_history
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT
    EXECUTE FUNCTION leasehold_history_notify();

-- No new index. The feed reads history by id (the primary key). Recording
-- expiries and finding the next one scan leasehold_leases, one small row
-- per task; an index on expires_at (or lost_at) would make every renewal
-- update an index, and renewals must stay HOT updates (see 0001).

-- lost_at now means more than a refused renewal's mark (0002).
COMMENT ON COLUMN leasehold_leases.lost_at IS
    'When the end of the row''s lease, which expired unreleased, was recorded in the history: by a refused renewal ("lost") or by RecordExpiries ("expired"). NULL otherwise; cleared by the next grant, which then records no end of its own.';
