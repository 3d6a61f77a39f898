package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// The history does not depend on who watched (docs/design.md, "History"):
// a lease that runs out unreleased ends with one expired event at its
// expiry, for nobody, whether the expiry sweep of a watch (or of the
// pruner) recorded it first, or a claim by any owner, or its owner's
// refused late renewal. testHistorySameWhetherWatched plays the same calls
// twice, each on a database of its own: once with the sweep run after the
// leases ran out and before anyone touched them, as a watching sidecar
// runs it, and once with nobody sweeping.

// expirySweeper is the part of leasecore.HistoryFeed that a watch's expiry
// sweep calls. The memory model has it without the rest of a feed.
type expirySweeper interface {
	RecordExpiries(ctx context.Context, limit int) (leasecore.ExpirySweep, error)
}

// sweeperOf is st's expiry sweep, or nil when its driver has none: such a
// store has no feed, so nobody can watch it and nothing records a lease's
// end before a claim or renewal does. A driver that says it has a feed and
// whose store has none fails t.
func (s *suite) sweeperOf(t *testing.T, st leasecore.Store) expirySweeper {
	t.Helper()
	if f, ok := st.(leasecore.HistoryFeed); ok {
		return f
	}
	inner := st
	if c, ok := st.(interface{ unwrap() leasecore.Store }); ok {
		inner = c.unwrap()
	}
	if sw, ok := inner.(expirySweeper); ok {
		return sw
	}
	if s.d.HistoryFeed {
		feedOf(t, st) // fails t, naming the store
	}
	return nil
}

// noticeLag is how long after the last of its leases ran out a play first
// touches one: far above the model's precision, so an end stamped when it
// was noticed cannot pass for one stamped at the expiry.
const noticeLag = 50 * time.Millisecond

// The tasks of a play, each for one way a lease's end is noticed when
// nobody sweeps: another owner's claim, its owner's claim, its owner's
// late renewal, and the same in a RenewBatch (both followed by another
// owner's claim).
const (
	playOtherOwner  = "other-owner"
	playSameOwner   = "same-owner"
	playLateRenewal = "late-renewal"
	playLateBatch   = "late-batch"
)

var playTasks = []string{playOtherOwner, playSameOwner, playLateRenewal, playLateBatch}

// play runs the calls on a database of its own, sweeping when watched
// (once every lease has run out and before any is touched, and once at the
// end), and returns each task's history, oldest first, and the lease that
// ran out on it.
func (s *suite) play(t *testing.T, watched bool) (map[string][]leasecore.Event, map[string]*leasecore.Lease) {
	t.Helper()
	st := s.isolated(t)
	svc := leasecore.New(st, leasecore.WithOpTimeout(sharedOpTimeout))
	var sw expirySweeper
	if watched {
		if sw = s.sweeperOf(t, st); sw == nil {
			t.Logf("%T has no expiry sweep: nothing can record an end before the calls do, and both plays run unswept", st)
		}
	}
	old := map[string]*leasecore.Lease{}
	var last time.Time
	for _, task := range playTasks {
		old[task] = claimOK(t, svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: shortTTL, Credential: "claim-a"})
		if old[task].ExpiresAt.After(last) {
			last = old[task].ExpiresAt
		}
	}
	clock := newStoreClock(t, svc) // its lease is live throughout: nothing to sweep
	for _, task := range playTasks {
		waitExpired(t, svc, task)
	}
	clock.waitPast(last.Add(noticeLag))
	if sw != nil {
		if got := sweep(t, sw, 10); got.Recorded != len(playTasks) {
			t.Fatalf("the sweep recorded %d ends, want %d (every lease ran out unreleased)", got.Recorded, len(playTasks))
		}
	}

	claimOK(t, svc, leasecore.ClaimParams{Task: playOtherOwner, Owner: "b", TTL: longTTL, Credential: "claim-b"})
	claimOK(t, svc, leasecore.ClaimParams{Task: playSameOwner, Owner: "a", TTL: longTTL, Credential: "claim-a2"})
	renewLost(t, svc, leasecore.RenewParams{Task: playLateRenewal, Owner: "a", Credential: "renew-a"}, leasecore.LostExpired)
	renewLost(t, svc, leasecore.RenewParams{Task: playLateRenewal, Owner: "a", Token: old[playLateRenewal].Token, Credential: "renew-a2"}, leasecore.LostExpired)
	for i, r := range svc.RenewBatch(t.Context(), []leasecore.RenewParams{
		{Task: playLateBatch, Owner: "a", Credential: "batch-a"},
		{Task: playLateBatch, Owner: "a", Credential: "batch-a2"},
	}) {
		if r.Lease != nil {
			t.Fatalf("batched renewal %d of an expired lease renewed it: %s", i, show(r.Lease))
		}
		mustLost(t, r.Err, leasecore.LostExpired)
	}
	claimOK(t, svc, leasecore.ClaimParams{Task: playLateRenewal, Owner: "b", TTL: longTTL, Credential: "claim-b"})
	claimOK(t, svc, leasecore.ClaimParams{Task: playLateBatch, Owner: "b", TTL: longTTL, Credential: "claim-b"})
	if sw != nil {
		if got := sweep(t, sw, 10); got.Recorded != 0 {
			t.Errorf("a sweep after the calls recorded %d ends, want 0: each end once", got.Recorded)
		}
	}

	hist := map[string][]leasecore.Event{}
	for _, task := range playTasks {
		evs := events(t, svc, task)
		checkHistoryOrder(t, task, evs)
		slices.Reverse(evs)
		hist[task] = evs
	}
	return hist, old
}

// playWants is what each task's history must be after play, oldest
// first, given the lease that ran out on it.
func playWants(old map[string]*leasecore.Lease) map[string][]wantEvent {
	tok := func(task string) int64 { return old[task].Token }
	return map[string][]wantEvent{
		playOtherOwner: {acquired("a", tok(playOtherOwner)).by("claim-a"), expired("a", tok(playOtherOwner)),
			acquired("b", tok(playOtherOwner)+1).by("claim-b")},
		playSameOwner: {acquired("a", tok(playSameOwner)).by("claim-a"), expired("a", tok(playSameOwner)),
			acquired("a", tok(playSameOwner)+1).by("claim-a2")},
		playLateRenewal: {acquired("a", tok(playLateRenewal)).by("claim-a"), expired("a", tok(playLateRenewal)),
			lost("a", tok(playLateRenewal)).by("renew-a"), acquired("b", tok(playLateRenewal)+1).by("claim-b")},
		playLateBatch: {acquired("a", tok(playLateBatch)).by("claim-a"), expired("a", tok(playLateBatch)),
			lost("a", tok(playLateBatch)).by("batch-a"), acquired("b", tok(playLateBatch)+1).by("claim-b")},
	}
}

// The same calls give the same history whether or not a watch's expiry
// sweep ran: for each way a lease's end may be noticed first, the lease
// ends with one expired event at its expiry, with no credential or detail
// (not taken_over, not stamped when it was noticed, not for whoever
// noticed), before the next acquired; a refused late renewal adds its lost
// after it, once.
func (s *suite) testHistorySameWhetherWatched(t *testing.T) {
	runs := []struct {
		name    string
		watched bool
	}{{"watched (swept)", true}, {"unwatched (never swept)", false}}
	shapes := make([]map[string][]string, len(runs))
	for i, r := range runs {
		hist, old := s.play(t, r.watched)
		wants := playWants(old)
		shapes[i] = map[string][]string{}
		for _, task := range playTasks {
			evs, want := hist[task], wants[task]
			for _, e := range evs {
				shapes[i][task] = append(shapes[i][task], fmt.Sprintf("%s %s %d %q %q", e.Kind, e.Owner, e.Token, e.Credential, e.Detail))
			}
			ok := len(evs) == len(want)
			for k := 0; ok && k < len(evs); k++ {
				ok = want[k].matches(evs[k])
			}
			if !ok {
				var b strings.Builder
				for _, w := range want {
					fmt.Fprintf(&b, "  %s\n", w)
				}
				t.Errorf("%s: history of %s (oldest first):\n%swant:\n%s", r.name, task, showEvents(evs), b.String())
				continue
			}
			mustExpiredAt(t, r.name+": "+task, evs[1], old[task])
			if len(evs) == 4 && evs[2].At.Before(old[task].ExpiresAt.Add(noticeLag-precision)) {
				t.Errorf("%s: %s's lost event at %v, before the late renewal (%v after the expiry %v)", r.name, task, evs[2].At, noticeLag, old[task].ExpiresAt)
			}
		}
	}
	for _, task := range playTasks {
		if !slices.Equal(shapes[0][task], shapes[1][task]) {
			t.Errorf("history of %s depends on whether anyone watched:\n  %s: %q\n  %s: %q", task, runs[0].name, shapes[0][task], runs[1].name, shapes[1][task])
		}
	}
}
