-- Who manages each declaration and retention policy
-- (leasecore.TaskDecl.ManagedBy): 'terraform' (the provider declared it, or
-- adopted it by an import) or 'operator' (the CLI, the HTTP API, a Go
-- program). An operator's write of what Terraform manages is refused
-- unless it takes it over, so that Terraform never finds its resources
-- changed under it.
--
-- Additive only, so that a binary from before this migration keeps working
-- on a migrated file: it names no manager, and its rows get the default,
-- 'terraform', since only the provider wrote declarations before. Existing
-- rows get it too, for the same reason. SQLite adds a column with a
-- constant default without rewriting the table.
ALTER TABLE leasehold_tasks ADD COLUMN managed_by TEXT NOT NULL DEFAULT 'terraform'
    CHECK (managed_by IN ('terraform', 'operator'));
ALTER TABLE leasehold_retention_policies ADD COLUMN managed_by TEXT NOT NULL DEFAULT 'terraform'
    CHECK (managed_by IN ('terraform', 'operator'));

-- The default policy was made by the first migration, not by Terraform:
-- an operator's until someone changes it (a change before this migration
-- can only have been the provider's, after an import).
UPDATE leasehold_retention_policies SET managed_by = 'operator'
WHERE name = 'default' AND updated_at = created_at;
