package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// A renewal extends the owner's live lease from the store's now: renew_count
// + 1, renewed_at moves on, the token, acquired_at and note stay; a zero TTL
// keeps the lease's TTL.
func (s *suite) testRenewExtends(t *testing.T) {
	task := uniqueTask(t)
	prev := claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, Note: "kept"})
	for i := 1; i <= 2; i++ {
		waitClockPast(t, s.svc, prev, 5*precision)
		l := renewOK(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a"})
		if l.Token != prev.Token || l.Note != "kept" || !sameInstant(l.AcquiredAt, prev.AcquiredAt) {
			t.Errorf("renewal %d changed what it must keep: %s, was %s", i, show(l), show(prev))
		}
		if l.RenewCount != prev.RenewCount+1 {
			t.Errorf("renewal %d: renew_count %d, want %d", i, l.RenewCount, prev.RenewCount+1)
		}
		if l.TTL != time.Minute {
			t.Errorf("renewal %d with ttl 0: ttl %v, want the lease's %v", i, l.TTL, time.Minute)
		}
		if !l.RenewedAt.After(prev.RenewedAt.Add(precision)) {
			t.Errorf("renewal %d: renewed_at %v, want after %v", i, l.RenewedAt, prev.RenewedAt)
		}
		if !l.ExpiresAt.After(prev.ExpiresAt.Add(precision)) {
			t.Errorf("renewal %d did not extend the expiry: %v → %v", i, prev.ExpiresAt, l.ExpiresAt)
		}
		checkSame(t, "get after renewal", get(t, s.svc, task), l)
		prev = l
	}
}

// A renewal with a TTL makes it the lease's TTL, longer or shorter; a later
// renewal without one keeps the new TTL.
func (s *suite) testRenewTTL(t *testing.T) {
	task := uniqueTask(t)
	claim(t, s.svc, task, "a", time.Minute)

	for _, c := range []struct {
		give, want time.Duration
	}{
		{2 * time.Minute, 2 * time.Minute},
		{0, 2 * time.Minute},
		{45 * time.Second, 45 * time.Second},
		{0, 45 * time.Second},
		{1500*time.Millisecond + 999*time.Microsecond, 1500 * time.Millisecond}, // whole milliseconds kept
		{longTTL, longTTL},
	} {
		l := renewOK(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", TTL: c.give})
		if l.TTL != c.want {
			t.Errorf("renew with ttl %v: ttl %v, want %v", c.give, l.TTL, c.want)
		}
		if got := l.ExpiresAt.Sub(l.RenewedAt); !near(got, c.want) {
			t.Errorf("renew with ttl %v: expires_at − renewed_at = %v, want %v", c.give, got, c.want)
		}
		if g := get(t, s.svc, task); g == nil || g.TTL != c.want {
			t.Errorf("get after renew with ttl %v: %s, want ttl %v stored", c.give, show(g), c.want)
		}
	}
}

// A renewal that carries a note replaces the lease's note, as a refresh
// claim's does, up to the note's bound and down to "" (cleared); a renewal
// without one keeps the note the lease has, whoever set it. A refused
// renewal's note is not written.
func (s *suite) testRenewNote(t *testing.T) {
	task := uniqueTask(t)
	claimOK(t, s.svc, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, Note: "claimed"})
	full := strings.Repeat("é", leasecore.MaxNoteBytes/2) // 1024 bytes, 512 characters
	for i, c := range []struct {
		note *string
		want string
	}{
		{nil, "claimed"},
		{new("step 2 of 5"), "step 2 of 5"},
		{nil, "step 2 of 5"},
		{new(full), full},
		{nil, full},
		{new(""), ""},
		{nil, ""},
		{new("again"), "again"},
	} {
		l := renewOK(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Note: c.note})
		what := "without a note"
		if c.note != nil {
			what = fmt.Sprintf("with note %.20q", *c.note)
		}
		if l.Note != c.want {
			t.Errorf("renewal %d %s: note %.20q, want %.20q", i+1, what, l.Note, c.want)
		}
		if l.RenewCount != int64(i+1) {
			t.Errorf("renewal %d %s: renew_count %d, want %d", i+1, what, l.RenewCount, i+1)
		}
		checkSame(t, fmt.Sprintf("get after renewal %d", i+1), get(t, s.svc, task), l)
	}
	before := get(t, s.svc, task)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "b", Note: new("not b's to write")}, leasecore.LostHeldByOther)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: before.Token + 1, Note: new("wrong token")}, leasecore.LostTokenMismatch)
	checkSame(t, "get after refused renewals with notes", get(t, s.svc, task), before)
}

// A batch renewal carries each renewal's own note: a note replaces its
// lease's, no note keeps it, a refused renewal writes none, and a task
// renewed twice in one batch ends with the note of the last renewal that
// had one.
func (s *suite) testRenewBatchNotes(t *testing.T) {
	base := uniqueTask(t)
	task := func(name string) string { return base + "-" + name }
	for _, name := range []string{"replaced", "kept", "cleared", "twice"} {
		claimOK(t, s.svc, leasecore.ClaimParams{Task: task(name), Owner: "a", TTL: time.Minute, Note: "claimed " + name})
	}
	other := claimOK(t, s.svc, leasecore.ClaimParams{Task: task("other"), Owner: "b", TTL: time.Minute, Note: "b's"})

	ps := []leasecore.RenewParams{
		{Task: task("replaced"), Owner: "a", Note: new("replaced in a batch")},
		{Task: task("kept"), Owner: "a"},
		{Task: task("cleared"), Owner: "a", Note: new("")},
		{Task: task("other"), Owner: "a", Note: new("not a's to write")},
		{Task: task("twice"), Owner: "a", Note: new("first of two")},
		{Task: task("twice"), Owner: "a"},
	}
	got := s.svc.RenewBatch(t.Context(), ps)
	if len(got) != len(ps) {
		t.Fatalf("RenewBatch of %d gave %d results", len(ps), len(got))
	}
	for i, want := range []string{"replaced in a batch", "claimed kept", "", "", "first of two", "first of two"} {
		if i == 3 {
			if got[i].Lease != nil {
				t.Errorf("renewal of another owner's lease renewed %s, want lost", show(got[i].Lease))
			} else {
				mustLost(t, got[i].Err, leasecore.LostHeldByOther)
			}
			continue
		}
		if got[i].Err != nil || got[i].Lease == nil {
			t.Fatalf("batch renewal %d (%s): %v, want renewed", i, ps[i].Task, got[i].Err)
		}
		if got[i].Lease.Note != want {
			t.Errorf("batch renewal %d (%s): note %q, want %q", i, ps[i].Task, got[i].Lease.Note, want)
		}
	}
	for _, c := range []struct{ name, want string }{
		{"replaced", "replaced in a batch"}, {"kept", "claimed kept"}, {"cleared", ""}, {"twice", "first of two"},
	} {
		if l := get(t, s.svc, task(c.name)); l == nil || l.Note != c.want {
			t.Errorf("get %s after the batch: %s, want note %q", c.name, show(l), c.want)
		}
	}
	checkSame(t, "another owner's lease after a refused renewal with a note", get(t, s.svc, task("other")), other)
}

// A renewal naming the lease's token succeeds.
func (s *suite) testRenewWithToken(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", time.Minute)
	l := renewOK(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: a.Token})
	if l.Token != a.Token || l.RenewCount != 1 {
		t.Errorf("renew with the right token: %s, want token %d, renew_count 1", show(l), a.Token)
	}
}

// A renewal by the owner under a token that is not the lease's is lost with
// token_mismatch, and changes nothing: both a token never issued and the
// token of the owner's previous lease on the task.
func (s *suite) testRenewTokenMismatch(t *testing.T) {
	task := uniqueTask(t)
	first := claim(t, s.svc, task, "a", time.Minute)

	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: first.Token + 1}, leasecore.LostTokenMismatch)
	checkSame(t, "lease after a renewal with a wrong token", get(t, s.svc, task), first)

	releaseOK(t, s.svc, task, "a", first.Token)
	second := claim(t, s.svc, task, "a", time.Minute)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: first.Token}, leasecore.LostTokenMismatch)
	checkSame(t, "lease after a renewal with the previous lease's token", get(t, s.svc, task), second)
}

// A renewal of another owner's live lease is lost with held_by_other, even
// with that lease's token, and changes nothing.
func (s *suite) testRenewHeldByOther(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", time.Minute)
	for _, token := range []int64{0, a.Token} {
		renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "b", Token: token}, leasecore.LostHeldByOther)
	}
	checkSame(t, "lease after another owner's renewals", get(t, s.svc, task), a)
}

// A renewal of a task never claimed is lost with not_held and writes nothing.
func (s *suite) testRenewNeverClaimed(t *testing.T) {
	task := uniqueTask(t)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a"}, leasecore.LostNotHeld)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: 1}, leasecore.LostNotHeld)
	mustGone(t, s.svc, task)
	if l := claim(t, s.svc, task, "b", time.Minute); l.RenewCount != 0 {
		t.Errorf("first claim after failed renewals: %s, want renew_count 0", show(l))
	}
}

// A renewal after the owner released is lost with not_held and does not
// bring the lease back.
func (s *suite) testRenewAfterRelease(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", time.Minute)
	releaseOK(t, s.svc, task, "a", a.Token)
	for _, token := range []int64{0, a.Token} {
		renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: token}, leasecore.LostNotHeld)
	}
	mustGone(t, s.svc, task)
}

// A renewal after the lease expired is lost with expired and never
// resurrects it: the task stays free, and the owner's next claim is a new
// grant with the next token.
func (s *suite) testRenewAfterExpiry(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", shortTTL)
	waitExpired(t, s.svc, task)

	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a"}, leasecore.LostExpired)
	mustGone(t, s.svc, task)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: a.Token, TTL: time.Minute}, leasecore.LostExpired)
	mustGone(t, s.svc, task)
	for _, l := range listed(t, s.svc, task) {
		t.Errorf("list shows %s after a failed renewal of the expired lease", show(&l))
	}

	again := claim(t, s.svc, task, "a", time.Minute)
	if again.Token != a.Token+1 || again.RenewCount != 0 {
		t.Errorf("claim after a refused renewal of an expired lease: %s, want a new grant with token %d", show(again), a.Token+1)
	}
}

// A renewal of another owner's lease that is no longer live is lost with
// not_held: the caller never held it.
func (s *suite) testRenewOtherOwnersExpired(t *testing.T) {
	task := uniqueTask(t)
	claim(t, s.svc, task, "a", shortTTL)
	waitExpired(t, s.svc, task)
	renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "b"}, leasecore.LostNotHeld)
	mustGone(t, s.svc, task)
}

// A stale holder whose lease expired and was taken over cannot renew: lost
// with held_by_other, with or without its old token, and the new holder's
// lease is untouched.
func (s *suite) testRenewAfterTakeover(t *testing.T) {
	task := uniqueTask(t)
	a := claim(t, s.svc, task, "a", shortTTL)
	waitExpired(t, s.svc, task)
	b := claim(t, s.svc, task, "b", time.Minute)
	for _, token := range []int64{0, a.Token} {
		renewLost(t, s.svc, leasecore.RenewParams{Task: task, Owner: "a", Token: token}, leasecore.LostHeldByOther)
	}
	checkSame(t, "new holder's lease after the stale holder's renewals", get(t, s.svc, task), b)
}

// Concurrent renewals of one lease by its owner (say, a keeper and a manual
// renew) are each applied once, in some order: the renew_counts they return
// are exactly 1..n, and in that order the expiry never moves backwards,
// because a renewal extends the lease from the store's now and the store's
// now does not run backwards between writes it orders.
func (s *suite) testRenewConcurrent(t *testing.T) {
	const workers, each = 16, 20
	task := uniqueTask(t)
	l := claim(t, s.svc, task, "a", time.Minute)

	results := make([][]*leasecore.Lease, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				r, err := s.svc.Renew(t.Context(), leasecore.RenewParams{Task: task, Owner: "a", Token: l.Token})
				if err != nil {
					errs[w] = err
					return
				}
				results[w] = append(results[w], r)
			}
		})
	}
	wg.Wait()
	var all []*leasecore.Lease
	for w := range workers {
		if errs[w] != nil {
			t.Fatalf("concurrent renewal failed: %v", errs[w])
		}
		all = append(all, results[w]...)
	}
	slices.SortFunc(all, func(a, b *leasecore.Lease) int { return int(a.RenewCount - b.RenewCount) })
	for i, r := range all {
		if r.RenewCount != int64(i+1) {
			t.Fatalf("renew_counts of %d concurrent renewals are not 1..%d: position %d has %d (a renewal lost or counted twice)",
				len(all), len(all), i+1, r.RenewCount)
		}
	}
	var backwards []string
	for i := 1; i < len(all); i++ {
		if all[i].ExpiresAt.Before(all[i-1].ExpiresAt) || all[i].RenewedAt.Before(all[i-1].RenewedAt) {
			backwards = append(backwards, fmt.Sprintf("renewal %d: renewed_at %s expires_at %s, after renewal %d's %s / %s",
				all[i].RenewCount, all[i].RenewedAt.UTC().Format(time.RFC3339Nano), all[i].ExpiresAt.UTC().Format(time.RFC3339Nano),
				all[i-1].RenewCount, all[i-1].RenewedAt.UTC().Format(time.RFC3339Nano), all[i-1].ExpiresAt.UTC().Format(time.RFC3339Nano)))
		}
	}
	if len(backwards) > 0 {
		n := len(backwards)
		t.Errorf("%d of %d concurrent renewals moved the lease backwards, e.g.\n  %s", n, len(all), backwards[0])
	}
	checkSame(t, "lease after the concurrent renewals", get(t, s.svc, task), all[len(all)-1])
}
