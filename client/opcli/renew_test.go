package opcli_test

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/sidecar/api"
)

// renew extends the owner's lease once and prints it, over a sidecar and
// on a store: --note replaces the lease's note (--note "" clears it), a
// renew without --note keeps it, --ttl changes the ttl; a lease the owner
// does not hold is not renewed (70), saying why, and --json prints the
// API's answer either way.
func TestRenew(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, conn []string, _ api.StoreStatusKind) {
		run := func(verb string, args ...string) result { return leasehold(t, nil, verb, with(conn, args...)...) }

		run("claim", "nightly", "--owner", "w1", "--ttl", "30s", "--note", "claimed").expect(t, 0, "note      claimed\n")
		run("renew", "nightly", "--owner", "w1").expect(t, 0, "owner     w1\n", "(1 renewals)\n", "note      claimed\n")
		run("renew", "nightly", "--owner", "w1", "--note", "step 2 of 3", "--ttl", "1m").
			expect(t, 0, "ttl       1m0s\n", "(2 renewals)\n", "note      step 2 of 3\n")
		run("get", "nightly").expect(t, 0, "note      step 2 of 3\n")

		r := run("renew", "nightly", "--owner", "w1", "--token", "1", "--json")
		r.expect(t, 0)
		if got := decode[api.Renewed](t, r); !bool(got.Renewed) || got.Lease.Note != "step 2 of 3" || got.Lease.RenewCount != 3 || got.Lease.TtlMs != 60000 {
			t.Errorf("renew --json without --note: %+v, want the note and the ttl kept, renew_count 3", got)
		}
		r = run("renew", "nightly", "--owner", "w1", "--note", "")
		r.expect(t, 0, "(4 renewals)\n")
		if strings.Contains(r.stdout, "note") {
			t.Errorf("renew --note \"\" printed a note:\n%s", r.stdout)
		}
		if l := decode[api.LeaseState](t, run("get", "nightly", "--json")); l.Lease == nil || l.Lease.Note != "" {
			t.Errorf("get after renew --note \"\": %+v, want the note cleared", l.Lease)
		}

		run("renew", "nightly", "--owner", "w2", "--note", "not w2's").
			expect(t, exitcode.Lost, "nightly: not renewed: ", "(held_by_other)\n")
		r = run("renew", "nightly", "--owner", "w1", "--token", "7", "--json")
		r.expect(t, exitcode.Lost)
		if got := decode[api.RenewLost](t, r); bool(got.Renewed) || got.Reason != api.RenewLostReasonTokenMismatch || got.Detail == "" {
			t.Errorf("renew --json under another token: %+v, want token_mismatch", got)
		}
		run("renew", "never", "--owner", "w1").expect(t, exitcode.Lost, "never: not renewed: ", "(not_held)\n")
		run("release", "nightly", "--owner", "w1").expect(t, 0)
		run("renew", "nightly", "--owner", "w1").expect(t, exitcode.Lost, "(not_held)\n")

	})
}

// renew without --owner says how to find the owner, and asks nothing.
func TestRenewUsage(t *testing.T) {
	t.Parallel()
	r := leasehold(t, nil, "renew", "demo", "--addr", "http://127.0.0.1:1")
	r.expect(t, exitcode.Usage)
	for _, want := range []string{"--owner is required", "`leasehold get demo` shows it"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("renew without --owner: stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	// A note the model refuses is the operator's to fix (64), naming --note
	// and the rule.
	r = leasehold(t, nil, "renew", "demo", "--owner", "w1", "--note", strings.Repeat("é", 600), "--addr", "http://127.0.0.1:1")
	r.expect(t, exitcode.Usage)
	if !strings.Contains(r.stderr, "--note: must be valid UTF-8 without NUL, of at most 1024 bytes") {
		t.Errorf("renew with a 1200-byte note: stderr %q, want --note and its rule", r.stderr)
	}
	leasehold(t, nil, "renew", "-h").expect(t, 0, "-note", "the lease's note is kept")
}
