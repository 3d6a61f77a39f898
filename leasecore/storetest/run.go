package storetest

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// A release may carry what the job run under the lease did
// (ReleaseParams.Run): its released event keeps it, each release its own,
// however the store batches them; a release that ends no lease records
// nothing; a release inside a minimum hold keeps the hold's end on its event.
func (s *suite) testReleaseRunOutcome(t *testing.T) {
	base := uniqueTask(t)
	const n = 8
	task := func(i int) string { return fmt.Sprintf("%s-%02d", base, i) }
	outcome := func(i int) *leasecore.RunOutcome {
		switch i % 4 {
		case 0:
			return nil // a release that says nothing of a run
		case 1:
			return &leasecore.RunOutcome{ExitCode: 0, Duration: time.Duration(i) * 1500 * time.Millisecond}
		case 2:
			return &leasecore.RunOutcome{ExitCode: leasecore.NoExitCode, Error: fmt.Sprintf("killed by signal %d: é", i), Duration: time.Duration(i) * time.Millisecond}
		}
		return &leasecore.RunOutcome{ExitCode: i, Lost: i == 3, Duration: time.Duration(i) * time.Hour}
	}
	held := make([]*leasecore.Lease, n)
	for i := range n {
		held[i] = claim(t, s.svc, task(i), fmt.Sprintf("runner-%d", i), time.Minute)
	}
	errs := make([]error, n)
	ended := make([]bool, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ended[i], errs[i] = s.svc.Release(t.Context(), leasecore.ReleaseParams{Task: task(i), Owner: held[i].Owner, Token: held[i].Token, Run: outcome(i)})
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || !ended[i] {
			t.Fatalf("release of %s with a run = %v, %v; want released", task(i), ended[i], errs[i])
		}
		evs := mustHistory(t, s.svc, task(i), released(held[i].Owner, held[i].Token), acquired(held[i].Owner, held[i].Token))
		if got, want := evs[0].Run, outcome(i); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the released event's run is %+v, want %+v", task(i), got, want)
		}
		if !evs[0].HoldUntil.IsZero() {
			t.Errorf("%s: a release without a hold has HoldUntil %v on its event", task(i), evs[0].HoldUntil)
		}
	}

	// Nothing to end: nothing recorded, run or not.
	if release := func() bool {
		ok, err := s.svc.Release(t.Context(), leasecore.ReleaseParams{Task: task(1), Owner: held[1].Owner, Run: outcome(1)})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}(); release {
		t.Error("a second release with a run = true, want false")
	}
	mustHistory(t, s.svc, task(1), released(held[1].Owner, held[1].Token), acquired(held[1].Owner, held[1].Token))

	// Inside a minimum hold: the event keeps the hold's end, and the run.
	hold := uniqueTask(t) + "-hold"
	h := claimHold(t, s.svc, hold, "runner", time.Minute, time.Hour)
	run := &leasecore.RunOutcome{ExitCode: 0, Duration: 2 * time.Second}
	if _, err := s.svc.Release(t.Context(), leasecore.ReleaseParams{Task: hold, Owner: "runner", Token: h.Token, Run: run}); err != nil {
		t.Fatal(err)
	}
	evs := events(t, s.svc, hold)
	if len(evs) == 0 || evs[0].Kind != leasecore.EventReleased || !sameInstant(evs[0].HoldUntil, h.HoldUntil) || !reflect.DeepEqual(evs[0].Run, run) {
		t.Errorf("release inside a minimum hold: newest event %+v, want released with HoldUntil %v and run %+v", evs[0], h.HoldUntil, run)
	}
}
