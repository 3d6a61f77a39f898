// Package leasecore is leasehold's lease model: who runs a singleton task
// right now, for how long, and under which fencing token. The sidecar, the
// Terraform provider and `leasehold run` are transports over it; Go programs
// use it directly.
//
// # What it holds
//
//   - Lease and the parameters of each operation (ClaimParams, RenewParams,
//     ReleaseParams, ListParams), with their rules (Validate, ValidateTask,
//     ValidateCredential).
//   - The outcomes: ErrHeld (*HeldError, naming the holder), ErrLost
//     (*LostError, with a LostReason), ErrUnavailable (*UnavailableError),
//     ErrInvalid (*ValidationError, naming the field and the rule),
//     ErrForbidden (*ForbiddenError, naming who may not act on which task).
//   - Service, the API: it checks every rule before the store is asked,
//     applies defaults and task declarations, bounds each call with
//     DefaultOpTimeout, and makes sure whatever a driver returns reaches the
//     caller as one of the outcomes above.
//   - Store, the seam a driver implements (leasecore/postgres,
//     leasecore/sqlite), with CatalogStore for declarations, retention
//     policies and history, and the optional BatchRenewer, WriteCounter and
//     RoleScopeStore (a database role limited to task prefixes: RoleScope,
//     Scope; docs/store-roles.md).
//   - Keeper and Run, which hold a lease in the background; Coalescer, which
//     sends many keepers' renewals together; Pruner, which deletes history
//     beyond each task's retention policy under the lease PruneTask.
//   - ClaimWait, the one claim-and-wait loop (the keepalive stream and
//     `leasehold run --wait` both use it, over HTTP or a store), and
//     NewOwner, the one generator of default owner names.
//
// Related packages: leasecore/storetest is the conformance suite both
// drivers pass (a behaviour not specified there is not promised);
// leasecore/storeurl opens a store from sqlite:PATH or postgres://….
//
// # Invariants
//
// A task's row in the store is never deleted: its token column is the
// task's fencing counter, which rises by one at each grant to an owner who
// did not hold the task live and never goes down or repeats. A lease is live
// while it is not released and its expiry is after the store's now; liveness
// is judged by the store's clock only, never by comparing a Go process's
// clock with a stored time. A store that cannot answer is ErrUnavailable,
// never ErrHeld: callers treat the two oppositely, so whoever cannot tell
// them apart says unavailable.
//
// The reasoning behind the model, the drivers' correctness arguments, the
// keeper's timing, the coalescer and the pruner's lock are in docs/design.md
// at the repository root ("The lease model", "The keeper: holding a lease in
// the background", "The renewal coalescer and keepalive streams", "The
// pruner and its lock").
package leasecore
