-- The spelling of each declared duration as its author wrote it ("90s"
-- where Go prints 1m30s), so that a tool reading a declaration back (the
-- Terraform provider's import) gives the same text. '' means none kept:
-- readers print the duration themselves.
ALTER TABLE leasehold_tasks ADD COLUMN ttl_spelling TEXT NOT NULL DEFAULT '';
ALTER TABLE leasehold_tasks ADD COLUMN max_ttl_spelling TEXT NOT NULL DEFAULT '';
ALTER TABLE leasehold_retention_policies ADD COLUMN keep_for_spelling TEXT NOT NULL DEFAULT '';
