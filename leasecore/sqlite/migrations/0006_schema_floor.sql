-- Each applied migration's floor: the oldest schema version whose binaries can serve the store
-- after it (leasecore/migration, "Expand, then contract"). 0 for an expand migration, which is
-- every migration so far; the store's floor is the highest. An expand step itself: binaries
-- that do not know it only ever read max(version) and insert (version, name, applied_at).
ALTER TABLE leasehold_schema_migrations ADD COLUMN floor_version INTEGER NOT NULL DEFAULT 0;
