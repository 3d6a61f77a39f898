// Package postgres is the leasecore.Store driver for PostgreSQL, the store a
// fleet of sidecars on many machines shares. It talks to the server through a
// pgx/v5 pool and keeps its schema in embedded migrations.
//
//	st, err := postgres.Open(ctx, "postgres://leasehold@db:5432/leasehold")
//	err = st.Migrate(ctx)                // once per start; safe from many processes
//	svc := leasecore.New(st)
//
// # What it holds
//
//   - store.go: Open, the lease operations, and the handling of read-only
//     servers (a standby, or default_transaction_read_only) and failover.
//   - sql.go: the statements. Every lease operation is decided by one
//     autocommit statement, which also writes the history the change makes;
//     a refused claim or renewal adds one statement to name the holder or
//     the reason.
//   - batch.go: the batchers that send concurrent claims, renewals and
//     releases of distinct tasks as one statement each, with no timer.
//   - feed.go: the history feed the watch follows (leasecore.HistoryFeed):
//     a cursor that never reads past an id a transaction in flight may
//     still commit, HistoryChanges (a poll of the newest committed id, and
//     this Store's own commits), RecordExpiries.
//   - catalog.go: declarations, retention policies, history and pruning
//     (leasecore.CatalogStore).
//   - errors.go: interpretError, the one place that turns pgx errors into
//     leasecore outcomes (and masks credentials in their text).
//   - migrate.go and migrations/: the schema, applied under an advisory
//     lock; a role that may not change it (a runtime role) migrates a
//     current schema as a no-op.
//   - grants.go: the privileges of a runtime role, table by table
//     (MigrateGranting, `leasehold migrate --grant-runtime`).
//   - scope.go: role scopes (leasecore.RoleScopeStore): the copy of the
//     role's scope that refuses tasks outside it before they can join a
//     batch; migration 0005's row-level security enforces it in the
//     database. docs/store-roles.md and docs/design.md ("The store as the
//     boundary").
//
// # Invariants a change must keep
//
// Correctness rests on READ COMMITTED's rule for INSERT … ON CONFLICT DO
// UPDATE and UPDATE: the statement locks the task's row and decides on its
// latest committed version. So each statement decides each row alone, under
// that row's lock, and never in a transaction held open across a round
// trip. Every time a statement writes or compares is taken at rowNow (the
// later of now() and the times already on the row), so a row's times never
// go backwards. Only the claim writes token, from the locked row; no
// statement deletes a lease row. Batch statements take their row locks in
// ascending byte order of task (COLLATE "C"), and a batch never holds two
// calls of one task; together these keep batches from deadlocking and from
// deciding a row twice.
//
// The argument for each of these, for batches, for the history written in
// the same statement, for the catalog's races, for pruning and for the
// read-only backoff, is in docs/design.md at the repository root, section
// "PostgreSQL: one statement at READ COMMITTED".
package postgres
