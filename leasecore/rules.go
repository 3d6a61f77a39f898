package leasecore

import "fmt"

// The rules of the model that a driver applies inside its store operations.
// They are stated once, here; a driver reads the state they judge and calls
// them.

// LeaseState is a task's lease as a store read it when judging a renewal.
type LeaseState struct {
	// Exists: the task has a lease row, i.e. it has been claimed (the row,
	// and its token counter, survive release).
	Exists   bool
	Owner    string
	Token    int64
	Released bool
	// Live: neither released nor expired, by the store's clock.
	Live bool
}

// RenewRefusal is the one classification of lost reasons: the *LostError
// refusing renewal p of the lease cur, or nil when p may renew it (its
// owner's, live, and under p's token when p names one).
func RenewRefusal(p RenewParams, cur LeaseState) *LostError {
	lost := func(r LostReason, detail string) *LostError {
		return &LostError{Task: p.Task, Reason: r, Detail: detail}
	}
	switch {
	case !cur.Exists:
		return lost(LostNotHeld, "the task has never been claimed")
	case cur.Owner != p.Owner && cur.Live:
		return lost(LostHeldByOther, fmt.Sprintf("%q holds it now", cur.Owner))
	case cur.Owner != p.Owner:
		return lost(LostNotHeld, "another owner held it last and nobody holds it now")
	case cur.Released:
		return lost(LostNotHeld, "the lease was released")
	case !cur.Live:
		return lost(LostExpired, "the lease expired; claim it again for a new token")
	case p.Token != 0 && p.Token != cur.Token:
		return lost(LostTokenMismatch, fmt.Sprintf("the lease now has token %d, not %d", cur.Token, p.Token))
	}
	return nil
}

// RenewLost is the *LostError of a renewal the store has already refused
// (a conditional write that matched no row), judged by the state read
// after it. When that state is renewable after all, the owner claimed the
// task again in between: the lease the renewal was meant for is gone, and
// the renewal is refused as not held.
func RenewLost(p RenewParams, after LeaseState) *LostError {
	if err := RenewRefusal(p, after); err != nil {
		return err
	}
	return &LostError{Task: p.Task, Reason: LostNotHeld, Detail: "the lease changed while it was being renewed"}
}

// CheckPolicyDeletable returns the *InUseError refusing to delete the
// default retention policy, and nil for any other name: the policy of
// undeclared tasks and of declarations that name none must always exist.
// (Whether tasks name another policy is for the store to say.)
func CheckPolicyDeletable(name string) error {
	if name == DefaultPolicy {
		return &InUseError{Policy: name}
	}
	return nil
}

// MaxBatch bounds the operations a driver carries in one write round trip
// (a PostgreSQL statement, an SQLite transaction); a longer queue is
// drained by several batches in a row. A batch's locks (PostgreSQL: its
// rows'; SQLite: the file's) are held until it commits, so a very large
// batch would make a contender of any one of its tasks, or another process,
// wait for all of them; this many still commit in a few milliseconds.
const MaxBatch = 256

// MaxRenewBatch bounds the renewals of one Store.RenewBatch a driver
// carries in one write round trip; a larger RenewBatch is split. It is
// larger than MaxBatch: a RenewBatch carries the renewals of leases this
// process holds, which nobody else can change meanwhile, so its locks hold
// up only claims that would be refused anyway.
const MaxRenewBatch = 2048
