package chaos

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/e2e/leasecheck"
)

// Only a lost answer is indeterminate without more ado: a transport error or
// the contract's 503 unavailable. Every other answer outside the contract is
// a harness error, so that a bug (a 500) cannot hide among the faults.
func TestClassify(t *testing.T) {
	t.Parallel()
	const (
		js      = "application/json"
		problem = "application/problem+json"
	)
	cases := []struct {
		name   string
		kind   leasecheck.Kind
		status int
		ctype  string
		body   string
		terr   error
		out    leasecheck.Outcome
		bad    bool // a harness error
	}{
		{"timeout", leasecheck.Claim, 0, "", "", errors.New("context deadline exceeded"), leasecheck.Indeterminate, false},
		{"claim unavailable", leasecheck.Claim, 503, js, `{"acquired":false,"reason":"unavailable","detail":"x"}`, nil, leasecheck.Indeterminate, false},
		{"renew unavailable", leasecheck.Renew, 503, js, `{"renewed":false,"reason":"unavailable","detail":"x"}`, nil, leasecheck.Indeterminate, false},
		{"release unavailable", leasecheck.Release, 503, js + "; charset=UTF-8", `{"released":false,"reason":"unavailable","detail":"x"}`, nil, leasecheck.Indeterminate, false},
		{"unavailable problem", leasecheck.Claim, 503, problem, `{"type":"urn:leasehold:problem:unavailable","title":"Store unavailable","status":503}`, nil, leasecheck.Indeterminate, false},
		{"acquired", leasecheck.Claim, 200, js, `{"acquired":true,"lease":{"owner":"a","token":3,"acquired_at":"2026-12-03T12:00:00.000Z","renewed_at":"2026-12-03T12:00:00.000Z","expires_at":"2026-12-03T12:00:01.000Z","ttl_remaining_ms":1000}}`, nil, leasecheck.Acquired, false},
		{"released", leasecheck.Release, 200, js, `{"released":true}`, nil, leasecheck.Released, false},
		{"internal server error", leasecheck.Claim, 500, problem, `{"type":"about:blank","title":"Internal Server Error","status":500}`, nil, leasecheck.Indeterminate, true},
		{"bad gateway", leasecheck.Renew, 502, "text/plain", "bad gateway", nil, leasecheck.Indeterminate, true},
		{"gateway timeout", leasecheck.Release, 504, js, `{"reason":"unavailable"}`, nil, leasecheck.Indeterminate, true},
		{"503 not JSON", leasecheck.Claim, 503, "text/html", "<h1>unavailable</h1>", nil, leasecheck.Indeterminate, true},
		{"503 of another reason", leasecheck.Claim, 503, js, `{"acquired":false,"reason":"busy"}`, nil, leasecheck.Indeterminate, true},
		{"503 problem of another type", leasecheck.Claim, 503, problem, `{"type":"about:blank","status":503}`, nil, leasecheck.Indeterminate, true},
		{"200 that does not parse", leasecheck.Claim, 200, js, `{"acquired":tr`, nil, leasecheck.Indeterminate, true},
		{"422", leasecheck.Claim, 422, problem, `{"type":"urn:leasehold:problem:invalid-request","status":422}`, nil, leasecheck.Indeterminate, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			op := leasecheck.Op{Kind: tc.kind, Task: "t", Owner: "a"}
			err := classify(&op, tc.status, tc.ctype, []byte(tc.body), tc.terr)
			if op.Out != tc.out {
				t.Errorf("outcome %s, want %s", op.Out, tc.out)
			}
			if (err != nil) != tc.bad {
				t.Errorf("harness error %v, want one: %v", err, tc.bad)
			}
			if err != nil && tc.status != 0 && !strings.Contains(err.Error(), tc.body) {
				t.Errorf("harness error %q does not show the answer", err)
			}
		})
	}
}
