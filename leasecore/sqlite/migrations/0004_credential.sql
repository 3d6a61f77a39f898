-- The credential each history event was recorded for
-- (leasecore.Event.Credential): the name of the credential the operation
-- that recorded it acted for, '' for none. Existing events, recorded before
-- credentials were kept, get ''; the writer names the column for every
-- event it writes (insertEventsSQL), '' when the operation acted for none.
--
-- SQLite adds a column with a constant default without rewriting the table.
ALTER TABLE leasehold_history ADD COLUMN credential TEXT NOT NULL DEFAULT '';
