package leasecore

import "context"

// Store is the seam between the lease model and a database. A driver
// (leasecore/postgres, leasecore/sqlite) implements it; everything above it
// (Service, the sidecar, the Terraform provider) is written against it.
//
// A driver may assume its inputs passed Validate and that TTLs are whole
// milliseconds and non-zero in Claim. Each method is one atomic step in the
// store, judged by the store's clock, and returns only these errors:
// *HeldError (Claim), *LostError (Renew), or an *UnavailableError built by the
// driver's interpretError. Behaviour is specified case by case by the
// conformance suite in leasecore/storetest.
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
	// List returns every live lease, ordered by task.
	List(ctx context.Context) ([]Lease, error)
	// Ping checks that the store answers and its schema is in place.
	Ping(ctx context.Context) error
	// Migrate creates or upgrades the schema. Safe to run from several
	// processes at once.
	Migrate(ctx context.Context) error
	// Close releases the driver's connections. Calls after Close are
	// unavailable.
	Close() error
}
