package chaos

import (
	"errors"
	"fmt"
	"mime"
	"net/http"

	lhclient "github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/e2e/leasecheck"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// classify fills op's outcome from an HTTP exchange (ctype is the answer's
// Content-Type), read through the Go client's table (lhclient.Outcome).
// Indeterminate, and no error: a transport error (timeout, refused, reset,
// an answer cut short) and a 503 that says the store is unavailable as the
// contract spells it (the JSON answer of a claim, renewal or release with
// reason "unavailable", or a problem of type
// urn:leasehold:problem:unavailable). Anything else outside the contract (a
// 500, which docs/design.md calls a bug, another 5xx, which no proxy of the
// harness produces, a 4xx other than the contract's 409, an answer that
// does not parse) is a harness error that fails the run, and the op is
// recorded as Indeterminate, which binds nothing.
func classify(op *leasecheck.Op, status int, ctype string, body []byte, transportErr error) error {
	op.Out = leasecheck.Indeterminate
	if transportErr != nil {
		op.Reason = "transport: " + transportErr.Error()
		return nil
	}
	op.Reason = fmt.Sprintf("HTTP %d", status)
	bad := func(why string) error {
		return fmt.Errorf("%s %s: %s: %d %s %s", op.Kind, op.Task, why, status, ctype, body)
	}
	if mt, _, err := mime.ParseMediaType(ctype); err != nil || mt != "application/json" && mt != "application/problem+json" {
		return bad("an answer that is not JSON")
	}
	lease, released, err := lhclient.Outcome(string(op.Kind), op.Task, status, http.Header{"Content-Type": {ctype}}, body)
	var (
		held *leasecore.HeldError
		lost *leasecore.LostError
		pe   *lhclient.ProblemError
		ns   *lhclient.NotSidecarError
	)
	switch {
	case errors.As(err, &ns):
		return bad(fmt.Sprintf("an answer outside the contract (%s)", ns.Reason))
	case status == http.StatusServiceUnavailable && errors.Is(err, leasecore.ErrUnavailable) &&
		(!errors.As(err, &pe) || pe.Type == api.ProblemUnavailable):
		op.Reason = "HTTP 503 unavailable"
		return nil
	case err == nil && op.Kind == leasecheck.Claim && lease != nil:
		op.Out = leasecheck.Acquired
		op.Lease = fromLease(lease)
		return nil
	case op.Kind == leasecheck.Claim && errors.As(err, &held):
		op.Out = leasecheck.Held
		op.Lease = &leasecheck.Lease{Owner: held.Holder.Owner, ExpiresAt: held.Holder.ExpiresAt.UnixMilli(), TTLRemainingMs: held.Holder.TTLRemaining.Milliseconds()}
		return nil
	case err == nil && op.Kind == leasecheck.Renew && lease != nil:
		op.Out = leasecheck.Renewed
		op.Lease = fromLease(lease)
		return nil
	case op.Kind == leasecheck.Renew && errors.As(err, &lost):
		op.Out, op.Reason = leasecheck.Lost, string(lost.Reason)
		return nil
	case err == nil && op.Kind == leasecheck.Release:
		op.Out = leasecheck.NotReleased
		if released {
			op.Out = leasecheck.Released
		}
		return nil
	}
	return bad("an answer outside the contract")
}

// fromLease is the part of a lease the checker needs.
func fromLease(l *leasecore.Lease) *leasecheck.Lease {
	return &leasecheck.Lease{
		Owner: l.Owner, Token: l.Token, TTLRemainingMs: l.TTLRemaining.Milliseconds(), RenewCount: l.RenewCount,
		AcquiredAt: l.AcquiredAt.UnixMilli(), RenewedAt: l.RenewedAt.UnixMilli(), ExpiresAt: l.ExpiresAt.UnixMilli(),
	}
}
