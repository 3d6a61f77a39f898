package exitcode_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	lhclient "github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// Of maps each outcome, as leasecore returns it and as the Go client reads
// it from a sidecar's answer (through client.Outcome, the client's one
// table), to its status; With overrides it.
func TestOf(t *testing.T) {
	t.Parallel()
	answer := func(status int, contentType, body string) error {
		_, _, err := lhclient.Outcome("claim", "nightly", status, http.Header{"Content-Type": {contentType}}, []byte(body))
		if err == nil {
			t.Fatalf("answer %d %s was no refusal", status, body)
		}
		return err
	}
	problem := func(status int, typ string) error {
		return answer(status, "application/problem+json", fmt.Sprintf(`{"type":%q,"title":"t","status":%d}`, typ, status))
	}
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, exitcode.OK},
		{"no outcome", errors.New("boom"), exitcode.Failure},
		{"held", fmt.Errorf("claim: %w", &leasecore.HeldError{Task: "t"}), exitcode.Held},
		{"lost", &leasecore.LostError{Task: "t"}, exitcode.Lost},
		{"invalid", &leasecore.ValidationError{Field: "ttl", Rule: "r"}, exitcode.Usage},
		{"unavailable", leasecore.Unavailable("claim", errors.New("down")), exitcode.Unavailable},
		{"undeclared", &leasecore.UndeclaredError{Task: "t"}, exitcode.Undeclared},
		{"reserved", &leasecore.ReservedError{Task: "leasehold:prune"}, exitcode.NoPerm},
		{"forbidden", leasecore.ErrForbidden, exitcode.NoPerm},
		{"not a sidecar", &lhclient.NotSidecarError{Addr: "http://x", Reason: "html"}, exitcode.Unavailable},
		{"with", exitcode.With(exitcode.Lost, leasecore.ErrHeld), exitcode.Lost},
		{"with, wrapped", fmt.Errorf("release: %w", exitcode.With(exitcode.Usage, errors.New("no --owner"))), exitcode.Usage},

		{"answer: held", answer(409, "application/json", `{"acquired":false,"reason":"held","holder":{"owner":"w1","token":1,"expires_at":"2026-01-01T00:00:00Z","ttl_remaining_ms":1000}}`), exitcode.Held},
		{"answer: unavailable", answer(503, "application/json", `{"acquired":false,"reason":"unavailable","detail":"down"}`), exitcode.Unavailable},
		{"answer: 401", problem(401, api.ProblemBlank), exitcode.NoPerm},
		{"answer: forbidden", problem(403, api.ProblemForbidden), exitcode.NoPerm},
		{"answer: reserved", problem(403, api.ProblemReserved), exitcode.NoPerm},
		{"answer: undeclared", problem(404, api.ProblemUndeclared), exitcode.Undeclared},
		{"answer: invalid", problem(422, api.ProblemInvalid), exitcode.Usage},
		{"answer: malformed", problem(400, api.ProblemMalformed), exitcode.Usage},
		{"answer: 500", problem(500, api.ProblemBlank), exitcode.Unavailable},
		{"answer: a proxy's 502 page", answer(502, "text/html", "<html>bad gateway</html>"), exitcode.Unavailable},
		{"answer: no route", problem(404, api.ProblemBlank), exitcode.Failure},
		{"answer: exists", problem(409, api.ProblemExists), exitcode.Failure},
		{"problem: undeclared, no task", &lhclient.ProblemError{Status: 404, Type: api.ProblemUndeclared}, exitcode.Undeclared},
		{"problem: 401 of no type", &lhclient.ProblemError{Status: 401}, exitcode.NoPerm},
		{"problem: 422 of no type", &lhclient.ProblemError{Status: 422}, exitcode.Usage},
		{"problem: 418", &lhclient.ProblemError{Status: 418}, exitcode.Failure},
	}
	for _, c := range cases {
		if got := exitcode.Of(c.err); got != c.want {
			t.Errorf("%s: Of(%v) = %d, want %d", c.name, c.err, got, c.want)
		}
	}
	if exitcode.With(exitcode.Usage, nil) != nil {
		t.Error("With(code, nil) is not nil")
	}
}
