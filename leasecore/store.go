package leasecore

import (
	"context"
	"time"
)

// Store is the seam between the lease model and a database. A driver
// (leasecore/postgres, leasecore/sqlite) implements it; everything above it
// (Service, the sidecar, the Terraform provider) is written against it.
//
// Validation stance: input is checked once, by the Service, before any
// store call; a driver does not check it again. A driver may assume its
// inputs passed Validate (defaults filled, durations truncated as Validate
// leaves them), that TTLs are whole milliseconds and non-zero in Claim, and
// that a History limit passed ValidateHistoryLimit. Input that did not is a
// programming error of a caller that went around the Service: a driver may
// write it or fail it (unavailable), and, since a driver shares a write
// round trip among concurrent calls, may fail the calls batched with it.
// Call a Store through a Service.
//
// The model's rules that a store applies inside its operations are
// leasecore's, not the driver's: RenewRefusal and RenewLost classify lost
// renewals, CheckPolicyDeletable refuses to delete the default policy, and
// MaxBatch and MaxRenewBatch bound a batch.
//
// Each method is one atomic step in the store, judged by the store's clock,
// and returns only these errors: *HeldError (Claim), *LostError (Renew), or
// an *UnavailableError built by the driver's interpretError (and the
// catalog's outcomes, see CatalogStore); a store limited to a role's scope
// (RoleScopeStore) also refuses an operation on a task outside it with
// *ForbiddenError, before anything is written. Behaviour is specified case by case
// by the conformance suite in leasecore/storetest.
type Store interface {
	// Claim acquires a free or expired lease (new token), refreshes the
	// owner's own live lease (same token), or returns *HeldError.
	Claim(ctx context.Context, p ClaimParams) (*Lease, error)
	// Renew extends the owner's live lease, or returns *LostError.
	// A zero TTL keeps the lease's current TTL.
	Renew(ctx context.Context, p RenewParams) (*Lease, error)
	// Release ends the owner's live lease and reports whether it did.
	// Releasing what is not held is (false, nil). The token counter survives.
	Release(ctx context.Context, p ReleaseParams) (bool, error)
	// Get returns the task's live lease, or nil when there is none.
	Get(ctx context.Context, task string) (*Lease, error)
	// List returns the live leases whose task sorts after p.After (byte
	// by byte; every one when After is empty), ordered by task, at most
	// p.Limit of them (every one when Limit is 0). The driver pages in the
	// database (WHERE task > After ORDER BY task LIMIT Limit), never by
	// reading the whole list.
	List(ctx context.Context, p ListParams) ([]Lease, error)
	// Ping checks that the store answers and its schema is in place.
	Ping(ctx context.Context) error
	// Migrate creates or upgrades the schema. Safe to run from several
	// processes at once.
	Migrate(ctx context.Context) error
	// Close releases the driver's connections. Calls after Close are
	// unavailable.
	Close() error

	// The task declarations, retention policies and lease history.
	CatalogStore
}

// BatchRenewer is implemented by a Store that can renew many leases in few
// round trips: one statement (PostgreSQL) or one transaction (SQLite) for
// many leases. Service.RenewBatch uses it when the store has it, and
// otherwise renews the leases one call each, concurrently.
//
// Each lease is judged on its own, exactly as by Renew: owner-, token- and
// expiry-checked, with its own result. ps may name a task more than once; the
// renewals of one task take effect one after another. As for Store, every
// element passed Validate (the Service checked it). The error is for the whole batch: when it
// is not nil (an *UnavailableError), none of the results is known.
type BatchRenewer interface {
	RenewBatch(ctx context.Context, ps []RenewParams) ([]RenewResult, error)
}

// HoldReleaser is implemented by a Store that keeps minimum holds
// (ClaimParams.MinHold); both drivers do. A Service refuses a claim that
// asks for a minimum hold from a store without it, so no hold is dropped
// silently. A claim with a minimum hold sets the lease's HoldUntil; a claim
// of a task whose lease ended (released or expired) before its HoldUntil is
// refused with a *HeldError whose Holder is Resting, whoever asks.
type HoldReleaser interface {
	// ReleaseHold is Release, answering also until when the lease's
	// minimum hold keeps the task from others.
	ReleaseHold(ctx context.Context, p ReleaseParams) (ReleaseResult, error)
}

// ReleaseResult is what a release did.
type ReleaseResult struct {
	// Released: the owner's live lease was ended.
	Released bool
	// HoldUntil, when not zero, is the end of the released lease's
	// minimum hold, which had not passed: the task rests, refused to
	// every claimant, until then.
	HoldUntil time.Time
}

// RenewResult is one lease's answer in a batch renewal: the renewed lease,
// or why it was not renewed (*LostError, *UnavailableError, or
// *ValidationError from Service.RenewBatch).
type RenewResult struct {
	Lease *Lease
	Err   error
}

// WriteCounter is implemented by a Store that counts its write round trips,
// for operators to see how well it batches (the sidecar exports them as
// metrics). Counts are cumulative since Open.
type WriteCounter interface {
	WriteCounts() []WriteCount
}

// WriteCount is one operation's cumulative count of the write round trips
// that carried it (PostgreSQL: statements; SQLite: transactions) and of the
// operations they carried. Operations / Statements is the batching factor.
type WriteCount struct {
	Op         string // claim, renew or release
	Statements uint64
	Operations uint64
}
