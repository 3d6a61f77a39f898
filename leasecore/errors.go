package leasecore

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Every error returned by a Service (and by a driver's Store)
// matches exactly one of them with errors.Is, so callers branch on the outcome
// and never on message text.
var (
	// ErrHeld: a claim found a live lease of another owner. The matching
	// *HeldError carries the holder.
	ErrHeld = errors.New("lease held by another owner")
	// ErrLost: a renewal failed because the caller no longer holds the lease.
	// The matching *LostError carries the reason.
	ErrLost = errors.New("lease lost")
	// ErrUnavailable: the store could not answer (down, timeout, schema
	// missing, permission). It never means "held": a caller that cannot tell
	// the two apart is told unavailable.
	ErrUnavailable = errors.New("lease store unavailable")
	// ErrInvalid: the input broke a rule; nothing was written. The matching
	// *ValidationError names the field and the rule.
	ErrInvalid = errors.New("invalid input")
	// ErrForbidden: the caller may not act on this task. A sidecar's
	// credential whose scope does not cover it, or a PostgreSQL role whose
	// granted prefixes do not, is refused before anything is written. The
	// matching *ForbiddenError names who was refused and the task.
	ErrForbidden = errors.New("not permitted")
)

// Causes of ErrUnavailable that a migration (Store.Migrate) fixes. A
// driver's *UnavailableError wraps them, so errors.Is finds them; a program
// that can tell its user how to migrate says so there.
var (
	// ErrSchemaMissing: the store has no leasehold schema; it was never
	// migrated.
	ErrSchemaMissing = errors.New("the leasehold schema is missing")
	// ErrSchemaBehind: the store's schema is older than this build.
	ErrSchemaBehind = errors.New("the leasehold schema is older than this build")
)

// Holder describes the owner of a live lease, as seen by a refused claimant,
// or of the lease whose minimum hold keeps the task resting.
type Holder struct {
	Owner string
	// ExpiresAt is when the task may next be granted, as far as the
	// store knows now: the live lease's expiry, or, when the task rests
	// (Resting), the end of its minimum hold.
	ExpiresAt time.Time
	// TTLRemaining is ExpiresAt minus the store's clock.
	TTLRemaining time.Duration
	// AcquiredAt is when the holder's lease was granted (zero from a
	// store that does not say).
	AcquiredAt time.Time
	// HoldUntil, when not zero, is the end of the lease's minimum hold
	// (ClaimParams.MinHold): the task is not granted before it.
	HoldUntil time.Time
	// Resting: the holder's lease has ended (released, or expired), and
	// its minimum hold keeps the task from every claimant until HoldUntil.
	Resting bool
}

// HeldError is returned by Claim when another owner holds a live lease.
type HeldError struct {
	Task   string
	Holder Holder
}

func (e *HeldError) Error() string {
	if e.Holder.Resting {
		return fmt.Sprintf("task %q rests for another %s: the minimum hold of %q's lease, acquired at %s, has not passed",
			e.Task, e.Holder.TTLRemaining.Round(time.Millisecond), e.Holder.Owner, e.Holder.AcquiredAt.Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("task %q is held by %q for another %s", e.Task, e.Holder.Owner, e.Holder.TTLRemaining.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// LostReason says why a renewal failed.
type LostReason string

// The reasons a renewal can be refused.
const (
	// LostNotHeld: there is no lease of this owner (never claimed, released,
	// or taken over after expiry and released again).
	LostNotHeld LostReason = "not_held"
	// LostExpired: the owner's lease passed its expiry; it must be claimed
	// again, which hands out a new token.
	LostExpired LostReason = "expired"
	// LostHeldByOther: another owner holds the lease now.
	LostHeldByOther LostReason = "held_by_other"
	// LostTokenMismatch: the owner holds the task, but under another token:
	// the caller's lease ended and the owner claimed it again since.
	LostTokenMismatch LostReason = "token_mismatch"
)

// LostError is returned by Renew when the lease cannot be renewed.
type LostError struct {
	Task   string
	Reason LostReason
	Detail string
}

func (e *LostError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("lease on %q lost (%s): %s", e.Task, e.Reason, e.Detail)
	}
	return fmt.Sprintf("lease on %q lost (%s)", e.Task, e.Reason)
}

// Is makes errors.Is(err, ErrLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// UnavailableError wraps the store failure behind an ErrUnavailable.
type UnavailableError struct {
	// Op is the operation that failed: claim, renew, release, get, list, ping, migrate.
	Op string
	// Err is the driver's error, kept for logs; its text is the detail.
	Err error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%s: lease store unavailable: %v", e.Op, e.Err)
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the driver's error.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable wraps err as an *UnavailableError for operation op, unless it
// already is one. Drivers use it in their interpretError.
func Unavailable(op string, err error) error {
	var u *UnavailableError
	if errors.As(err, &u) {
		return err
	}
	return &UnavailableError{Op: op, Err: err}
}

// ValidationError names the field that broke a rule and the rule.
type ValidationError struct {
	// Field is the Go name of what broke the rule: the field of the
	// parameters (ClaimParams.TTL is "TTL", TaskDecl.MaxTTL "MaxTTL"), or
	// the argument's role ("Task" for a task name, "Limit" for History's
	// limit). Interfaces that spell fields otherwise (the HTTP API's
	// ttl_ms, a Terraform attribute) rename it where they answer.
	Field string
	// Rule says what a valid value looks like.
	Rule string
}

func (e *ValidationError) Error() string { return fmt.Sprintf("invalid %s: %s", e.Field, e.Rule) }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// ForbiddenError says who may not do what on which task. It names the
// principal (a credential's name, a database role), never a secret.
type ForbiddenError struct {
	// Principal names who was refused, with its kind: `credential "ci"`,
	// `database role "team_a"`.
	Principal string
	// Right is what was asked: read, hold or admin.
	Right string
	// Task is the task asked for.
	Task string
	// Scope says what the principal may act on, for the reader of the
	// error (its prefixes); empty when there is nothing to add.
	Scope string
}

func (e *ForbiddenError) Error() string {
	msg := fmt.Sprintf("%s may not %s task %q", e.Principal, e.Right, e.Task)
	if e.Task == "" {
		msg = fmt.Sprintf("%s may not %s", e.Principal, e.Right)
	}
	if e.Scope != "" {
		msg += ": " + e.Scope
	}
	return msg
}

// Is makes errors.Is(err, ErrForbidden) true.
func (e *ForbiddenError) Is(target error) bool { return target == ErrForbidden }
