package leasecore_test

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/leasecore"
)

// TestRenewRefusal: each state a renewal can find gets its one reason, and
// only the owner's live lease under the right token is renewable.
func TestRenewRefusal(t *testing.T) {
	t.Parallel()
	p := leasecore.RenewParams{Task: "t", Owner: "a", Token: 7}
	mine := leasecore.LeaseState{Exists: true, Owner: "a", Token: 7, Live: true}
	for _, c := range []struct {
		name string
		cur  leasecore.LeaseState
		want leasecore.LostReason // "" renewable
	}{
		{"never claimed", leasecore.LeaseState{}, leasecore.LostNotHeld},
		{"another owner's live lease", leasecore.LeaseState{Exists: true, Owner: "b", Token: 8, Live: true}, leasecore.LostHeldByOther},
		{"another owner's ended lease", leasecore.LeaseState{Exists: true, Owner: "b", Token: 8}, leasecore.LostNotHeld},
		{"released", leasecore.LeaseState{Exists: true, Owner: "a", Token: 7, Released: true}, leasecore.LostNotHeld},
		{"expired", leasecore.LeaseState{Exists: true, Owner: "a", Token: 7}, leasecore.LostExpired},
		{"claimed again", leasecore.LeaseState{Exists: true, Owner: "a", Token: 9, Live: true}, leasecore.LostTokenMismatch},
		{"renewable", mine, ""},
	} {
		got := leasecore.RenewRefusal(p, c.cur)
		switch {
		case c.want == "" && got != nil:
			t.Errorf("%s: refused %v, want renewable", c.name, got)
		case c.want != "" && (got == nil || got.Reason != c.want || got.Task != "t" || got.Detail == ""):
			t.Errorf("%s: %v, want %s on task t with a detail", c.name, got, c.want)
		}
	}
	// A renewal refused by the store although the state read after it is
	// renewable lost its lease in between.
	if got := leasecore.RenewLost(p, mine); got == nil || got.Reason != leasecore.LostNotHeld {
		t.Errorf("RenewLost of a renewable state = %v, want not_held", got)
	}
	if got := leasecore.RenewLost(p, leasecore.LeaseState{Exists: true, Owner: "a", Token: 7}); got == nil || got.Reason != leasecore.LostExpired {
		t.Errorf("RenewLost of an expired lease = %v, want expired", got)
	}
}

func TestCheckPolicyDeletable(t *testing.T) {
	t.Parallel()
	if err := leasecore.CheckPolicyDeletable(leasecore.DefaultPolicy); !errors.Is(err, leasecore.ErrInUse) {
		t.Errorf("deleting the default policy: %v, want ErrInUse", err)
	}
	if err := leasecore.CheckPolicyDeletable("other"); err != nil {
		t.Errorf("deleting another policy: %v, want nil (the store decides)", err)
	}
}
