-- The credential each history event was recorded for
-- (leasecore.Event.Credential): the name of the credential the operation
-- that recorded it acted for, '' for none. Existing events, recorded before
-- credentials were kept, get ''; so do the "expired" events of the expiry
-- sweep (recordExpiriesSQL), which names no credential and takes the
-- default.
--
-- A constant default makes this a change of the catalog only (PostgreSQL
-- 11 and later): the table is not rewritten, however much history it holds.
-- No index: the history is read by task and by id, never by credential.
ALTER TABLE leasehold_history
    ADD COLUMN credential text NOT NULL DEFAULT '';
