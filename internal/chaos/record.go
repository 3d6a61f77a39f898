package chaos

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/internal/leasecheck"
)

// answer is the part of a claim, renew or release answer that the
// checker needs.
type answer struct {
	Acquired *bool   `json:"acquired"`
	Renewed  *bool   `json:"renewed"`
	Released *bool   `json:"released"`
	Reason   string  `json:"reason"`
	Lease    *wire   `json:"lease"`
	Holder   *wire   `json:"holder"`
	Detail   *string `json:"detail"`
	Type     string  `json:"type"` // of a problem
}

// problemUnavailable is the type of the 503 problem a sidecar answers when it
// cannot serve (sidecar/problem.go).
const problemUnavailable = "urn:leasehold:problem:unavailable"

// wire is a lease or holder object as the API spells it.
type wire struct {
	Owner          string `json:"owner"`
	Token          int64  `json:"token"`
	AcquiredAt     string `json:"acquired_at"`
	RenewedAt      string `json:"renewed_at"`
	ExpiresAt      string `json:"expires_at"`
	TTLRemainingMs int64  `json:"ttl_remaining_ms"`
	RenewCount     int64  `json:"renew_count"`
}

func (w *wire) lease() (*leasecheck.Lease, error) {
	l := &leasecheck.Lease{Owner: w.Owner, Token: w.Token, TTLRemainingMs: w.TTLRemainingMs, RenewCount: w.RenewCount}
	for _, f := range []struct {
		s   string
		dst *int64
	}{{w.AcquiredAt, &l.AcquiredAt}, {w.RenewedAt, &l.RenewedAt}, {w.ExpiresAt, &l.ExpiresAt}} {
		if f.s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f.s)
		if err != nil {
			return nil, fmt.Errorf("timestamp %q: %w", f.s, err)
		}
		*f.dst = t.UnixMilli()
	}
	return l, nil
}

// classify fills op's outcome from an HTTP exchange (ctype is the answer's
// Content-Type). Indeterminate, and no error: a transport error (timeout,
// refused, reset, an answer cut short) and a 503 that says the store is
// unavailable as the contract spells it (the JSON answer of a claim, renewal
// or release with reason "unavailable", or a problem of type
// urn:leasehold:problem:unavailable). Anything else outside the contract (a
// 500, which docs/design.md calls a bug, another 5xx, which no proxy of the harness
// produces, a 4xx other than the contract's 409, an answer that does not
// parse) is a harness error that fails the run, and the op is recorded as
// Indeterminate, which binds nothing.
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
	mt, _, err := mime.ParseMediaType(ctype)
	if err != nil || mt != "application/json" && mt != "application/problem+json" {
		return bad("an answer that is not JSON")
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		return bad(fmt.Sprintf("an unreadable answer (%v)", err))
	}
	switch {
	case status == http.StatusServiceUnavailable && mt == "application/json" && a.Reason == "unavailable",
		status == http.StatusServiceUnavailable && mt == "application/problem+json" && a.Type == problemUnavailable:
		op.Reason = "HTTP 503 unavailable"
		return nil
	case op.Kind == leasecheck.Claim && status == http.StatusOK && a.Acquired != nil && *a.Acquired && a.Lease != nil:
		op.Out = leasecheck.Acquired
		return setLease(op, a.Lease)
	case op.Kind == leasecheck.Claim && status == http.StatusConflict && a.Reason == "held" && a.Holder != nil:
		op.Out = leasecheck.Held
		return setLease(op, a.Holder)
	case op.Kind == leasecheck.Renew && status == http.StatusOK && a.Renewed != nil && *a.Renewed && a.Lease != nil:
		op.Out = leasecheck.Renewed
		return setLease(op, a.Lease)
	case op.Kind == leasecheck.Renew && status == http.StatusConflict && a.Reason != "":
		op.Out, op.Reason = leasecheck.Lost, a.Reason
		return nil
	case op.Kind == leasecheck.Release && status == http.StatusOK && a.Released != nil:
		op.Out = leasecheck.NotReleased
		if *a.Released {
			op.Out = leasecheck.Released
		}
		return nil
	}
	return bad("an answer outside the contract")
}

func setLease(op *leasecheck.Op, w *wire) error {
	l, err := w.lease()
	if err != nil {
		op.Out, op.Reason = leasecheck.Indeterminate, err.Error()
		return fmt.Errorf("%s %s: %w", op.Kind, op.Task, err)
	}
	op.Lease = l
	return nil
}
