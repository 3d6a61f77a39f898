package chaos

import (
	"encoding/json"
	"fmt"
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
}

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

// classify fills op's outcome from an HTTP exchange: transport errors, 5xx
// (503 unavailable included) and answers that do not read whole are
// Indeterminate; a 4xx other than the contract's 409 is a harness bug,
// reported as an error (and the op recorded as Indeterminate, which binds
// nothing).
func classify(op *leasecheck.Op, status int, body []byte, transportErr error) error {
	op.Out = leasecheck.Indeterminate
	switch {
	case transportErr != nil:
		op.Reason = "transport: " + transportErr.Error()
		return nil
	case status >= 500:
		op.Reason = fmt.Sprintf("HTTP %d", status)
		return nil
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		op.Reason = fmt.Sprintf("HTTP %d, unreadable answer: %v", status, err)
		return nil
	}
	bad := func() error {
		return fmt.Errorf("%s %s: unexpected answer %d %s", op.Kind, op.Task, status, body)
	}
	switch {
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
	op.Reason = fmt.Sprintf("HTTP %d", status)
	return bad()
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
