-- Role scopes: row-level security that limits a database role to the tasks
-- whose names start with one of its prefixes (leasecore.RoleScope; the
-- operator's reference is docs/store-roles.md, the argument docs/design.md,
-- "The store as the boundary").
--
-- Opt-in: a role without a row in leasehold_role_scopes is unrestricted,
-- so a store behaves as before this migration until a scope is written.
-- leasehold's own tasks (leasehold:…) are in every role's scope, but for
-- the other roles' prune leases. The role that owns these tables (the one that migrates)
-- bypasses row-level security, as PostgreSQL has table owners do, and so do
-- superusers and BYPASSRLS roles: sidecars must not run as any of them.

-- One row per limited role. Only the owner writes it: runtime roles are
-- granted SELECT at most, and the policy below shows each role its own row
-- only.
CREATE TABLE leasehold_role_scopes (
    role       text COLLATE "C" PRIMARY KEY,
    prefixes   text[]      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE leasehold_role_scopes ENABLE ROW LEVEL SECURITY;
CREATE POLICY leasehold_own_scope ON leasehold_role_scopes FOR SELECT
    USING (role = current_user);

-- The rule, in every policy below: a row's task is in the scope of the
-- role running the statement (current_user) when it starts with one of the
-- role's prefixes (a role without a scope has the one prefix '', which
-- every task starts with), or when it is one of leasehold's own, except
-- the prune leases of other roles: a scoped role's pruners take
-- leasehold:prune/ROLE (leasecore.PruneTaskFor), which no other scoped
-- role may see or hold, so that one team cannot stop another's pruning.
--
-- It is written out in each policy rather than called as a function: a
-- policy's expression is parsed when the policy is created, so the table it
-- reads is this one, whatever a session's search_path says (a function's
-- body would be looked up at each call, and a temporary table of the same
-- name, which any role may create, would come first). The subquery names
-- no column of the row, so PostgreSQL runs it once per statement (an
-- InitPlan), and each row costs one ^@ (starts_with) per prefix.
--
-- leasehold_leases: every command, read and written, on in-scope rows only.
-- A claim (INSERT … ON CONFLICT DO UPDATE) of a task out of scope fails
-- with an error rather than doing nothing, so the driver refuses such a
-- task before it can share a batch statement with others (store.go).
ALTER TABLE leasehold_leases ENABLE ROW LEVEL SECURITY;
CREATE POLICY leasehold_in_scope ON leasehold_leases
    USING ((task ^@ 'leasehold:' AND (NOT task ^@ 'leasehold:prune/' OR task = 'leasehold:prune/' || current_user))
        OR task ^@ ANY (coalesce(
        (SELECT s.prefixes FROM leasehold_role_scopes AS s WHERE s.role = current_user), '{""}')))
    WITH CHECK ((task ^@ 'leasehold:' AND (NOT task ^@ 'leasehold:prune/' OR task = 'leasehold:prune/' || current_user))
        OR task ^@ ANY (coalesce(
        (SELECT s.prefixes FROM leasehold_role_scopes AS s WHERE s.role = current_user), '{""}')));

-- leasehold_history: read, inserted (by the lease statements) and deleted
-- (by the pruner) on in-scope rows only. Never updated: the UPDATE policy
-- admits the in-scope rows only so that the pruner may lock them (SELECT …
-- FOR UPDATE needs the UPDATE privilege and passes the UPDATE policy's
-- USING), and its WITH CHECK (false) refuses any change to an event, for
-- every role but the owner.
ALTER TABLE leasehold_history ENABLE ROW LEVEL SECURITY;
CREATE POLICY leasehold_in_scope_select ON leasehold_history FOR SELECT
    USING ((task ^@ 'leasehold:' AND (NOT task ^@ 'leasehold:prune/' OR task = 'leasehold:prune/' || current_user))
        OR task ^@ ANY (coalesce(
        (SELECT s.prefixes FROM leasehold_role_scopes AS s WHERE s.role = current_user), '{""}')));
CREATE POLICY leasehold_in_scope_insert ON leasehold_history FOR INSERT
    WITH CHECK ((task ^@ 'leasehold:' AND (NOT task ^@ 'leasehold:prune/' OR task = 'leasehold:prune/' || current_user))
        OR task ^@ ANY (coalesce(
        (SELECT s.prefixes FROM leasehold_role_scopes AS s WHERE s.role = current_user), '{""}')));
CREATE POLICY leasehold_in_scope_delete ON leasehold_history FOR DELETE
    USING ((task ^@ 'leasehold:' AND (NOT task ^@ 'leasehold:prune/' OR task = 'leasehold:prune/' || current_user))
        OR task ^@ ANY (coalesce(
        (SELECT s.prefixes FROM leasehold_role_scopes AS s WHERE s.role = current_user), '{""}')));
CREATE POLICY leasehold_lock_only ON leasehold_history FOR UPDATE
    USING ((task ^@ 'leasehold:' AND (NOT task ^@ 'leasehold:prune/' OR task = 'leasehold:prune/' || current_user))
        OR task ^@ ANY (coalesce(
        (SELECT s.prefixes FROM leasehold_role_scopes AS s WHERE s.role = current_user), '{""}')))
    WITH CHECK (false);

-- Declarations and retention policies stay readable by every role: they
-- are the fleet's configuration, written by the owner (Terraform), and
-- every sidecar applies them to its claims.
