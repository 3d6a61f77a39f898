// Package leasecheck checks a recorded history of lease operations for the
// safety properties of leasehold's lease model (docs/design.md, "The
// lease model"), in the manner of etcd's robustness tests: clients record what
// they sent, when, and what they were told; the checker decides afterwards
// whether any single-holder execution could have told them that.
//
// # What a history is
//
// An Op is one claim, renew or release as one client saw it: the task,
// owner and token it sent, its invocation and response times (wall-clock
// nanoseconds; every process of a test runs on one machine, so they share
// CLOCK_REALTIME with the store's clock), its outcome, and the store's
// timestamps from the answer (milliseconds since the epoch, as the API
// prints them).
//
// An op whose answer was lost (timeout, cut connection, 503 unavailable)
// is Indeterminate: it may or may not have taken effect, at any
// moment after its invocation (a frozen sidecar may apply it when it
// resumes). It is never counted as a success or a failure. An indeterminate
// claim may have consumed a token; an indeterminate renew may have extended
// a lease, so only expiries an answer confirmed bind rule b; an
// indeterminate release may have ended one.
//
// # The rules (Check)
//
//   - a, tokens: per task, a grant answered before another grant was
//     invoked has the smaller token; grants ordered by the store's
//     acquired_at have rising tokens; two grants never share a token.
//   - b, exclusion: a grant's acquired_at is not before the expiry that
//     the last answer confirming an earlier grant (its claim, refreshes and
//     renewals) had given it by then (by the store's clock), nor before the
//     nearer expiry that another op may have set after that answer: a
//     confirmation at the same moment of the store's clock, or an
//     indeterminate claim or renew of the holder's (at least its ttl after
//     its call and after that answer's renewed_at). Unless a release of
//     that grant (answered released:true, or indeterminate; with its token,
//     or with none and not over before that last answer was invoked) was
//     invoked before the new grant was answered. A confirmation later than
//     the grant is rule c's.
//   - c, no late renewal: a renewal (or same-owner refresh) of token k
//     does not succeed after a grant of a token above k, neither in real
//     time (the grant answered before the renewal was invoked) nor by the
//     store's clock (renewed_at after the grant's acquired_at).
//
// Besides the rules, Check runs porcupine's linearizability checker over
// the same history with a sequential model of one lease per task (see
// model.go), bounded in time: a search that does not finish reports
// Unknown rather than hang.
package leasecheck

import (
	"fmt"
	"math"
)

// Kind is the operation a client invoked.
type Kind string

// The operations checked.
const (
	Claim   Kind = "claim"
	Renew   Kind = "renew"
	Release Kind = "release"
)

// Outcome is what the client was told.
type Outcome string

// The outcomes. Acquired covers new grants and same-owner refreshes (told
// apart by Lease.RenewCount); NotReleased is a release answered
// released:false.
const (
	Acquired      Outcome = "acquired"
	Held          Outcome = "held"
	Renewed       Outcome = "renewed"
	Lost          Outcome = "lost"
	Released      Outcome = "released"
	NotReleased   Outcome = "not_released"
	Indeterminate Outcome = "indeterminate"
)

// Lease is the lease (or, for Held, the holder) as an answer described it.
// Times are the store's, in milliseconds since the Unix epoch.
type Lease struct {
	Owner          string `json:"owner"`
	Token          int64  `json:"token,omitempty"`
	AcquiredAt     int64  `json:"acquired_at,omitempty"`
	RenewedAt      int64  `json:"renewed_at,omitempty"`
	ExpiresAt      int64  `json:"expires_at"`
	TTLRemainingMs int64  `json:"ttl_remaining_ms"`
	RenewCount     int64  `json:"renew_count,omitempty"`
}

// Op is one operation of a history.
type Op struct {
	Client string `json:"client"`
	Kind   Kind   `json:"kind"`
	Task   string `json:"task"`
	Owner  string `json:"owner"`
	// Token is the token sent (renew, release); 0 when none was.
	Token int64 `json:"token,omitempty"`
	TTLMs int64 `json:"ttl_ms,omitempty"`
	// Call and Return are wall-clock nanoseconds since the Unix epoch.
	Call   int64   `json:"call_ns"`
	Return int64   `json:"return_ns"`
	Out    Outcome `json:"outcome"`
	// Reason is the lost reason, or what made the op indeterminate.
	Reason string `json:"reason,omitempty"`
	// Lease is the answer's lease (Acquired, Renewed) or holder (Held).
	Lease *Lease `json:"lease,omitempty"`
}

// grant reports whether op is a confirmed new grant (not a refresh).
func (op *Op) grant() bool {
	return op.Out == Acquired && op.Lease != nil && op.Lease.RenewCount == 0
}

// extension reports whether op confirmed an extension of an existing grant:
// a renewal or a same-owner refresh.
func (op *Op) extension() bool {
	return op.Lease != nil && (op.Out == Renewed || (op.Out == Acquired && op.Lease.RenewCount > 0))
}

// String describes the op on one line, for violation reports.
func (op *Op) String() string {
	s := fmt.Sprintf("%s %s %s(owner=%s", op.Client, op.Kind, op.Task, op.Owner)
	if op.Token != 0 {
		s += fmt.Sprintf(" token=%d", op.Token)
	}
	ret := "…"
	if op.Return != math.MaxInt64 {
		ret = fmt.Sprint(op.Return)
	}
	s += fmt.Sprintf(") [%d,%s] → %s", op.Call, ret, op.Out)
	if op.Reason != "" {
		s += " (" + op.Reason + ")"
	}
	if l := op.Lease; l != nil {
		s += fmt.Sprintf(" {owner=%s token=%d acquired=%d renewed=%d expires=%d remaining=%dms renews=%d}",
			l.Owner, l.Token, l.AcquiredAt, l.RenewedAt, l.ExpiresAt, l.TTLRemainingMs, l.RenewCount)
	}
	return s
}
