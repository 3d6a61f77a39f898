package leasecore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// heldFor is a HeldError whose holder has ttl left.
func heldFor(ttl time.Duration) error {
	return &HeldError{Task: "t", Holder: Holder{Owner: "other", TTLRemaining: ttl}}
}

// claimResult is what the scripted claim answers one attempt with.
type claimResult struct {
	lease *Lease
	err   error
}

// waitRun runs ClaimWait in the background with a fake clock; the test
// answers each attempt through answer and reads each pause from the clock.
type waitRun struct {
	clock   *fakeClock
	lefts   chan time.Duration // the time left each attempt was given
	answers chan claimResult
	done    chan claimResult
}

func startWait(t *testing.T, ctx context.Context, opts WaitOptions) *waitRun {
	t.Helper()
	r := &waitRun{clock: newFakeClock(), lefts: make(chan time.Duration, 1), answers: make(chan claimResult), done: make(chan claimResult, 1)}
	opts.Clock = r.clock
	go func() {
		l, err := ClaimWait(ctx, opts, func(_ context.Context, left time.Duration) (*Lease, error) {
			r.lefts <- left
			a := <-r.answers
			return a.lease, a.err
		})
		r.done <- claimResult{l, err}
	}()
	return r
}

// attempt waits for the next claim, checks the time left it was given, and
// answers it.
func (r *waitRun) attempt(t *testing.T, wantLeft time.Duration, answer claimResult) {
	t.Helper()
	select {
	case left := <-r.lefts:
		if left != wantLeft {
			t.Fatalf("attempt given %s left, want %s", left, wantLeft)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no claim attempt")
	}
	r.answers <- answer
}

func (r *waitRun) result(t *testing.T) claimResult {
	t.Helper()
	select {
	case res := <-r.done:
		return res
	case <-time.After(10 * time.Second):
		t.Fatal("ClaimWait did not return")
		return claimResult{}
	}
}

// TestClaimWaitSchedule: while the task is held the pauses double from
// ClaimRetryMin to ClaimRetryMax, each bounded by the holder's lease and by
// the wait left; the first other answer ends the wait.
func TestClaimWaitSchedule(t *testing.T) {
	t.Parallel()
	const wait = time.Hour
	r := startWait(t, t.Context(), WaitOptions{Wait: wait})
	left := wait
	for _, want := range []time.Duration{50, 100, 200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		r.attempt(t, left, claimResult{err: heldFor(time.Minute)})
		if got := r.clock.nextWait(t); got != want {
			t.Fatalf("paused %s, want %s", got, want)
		}
		r.clock.Advance(want)
		left -= want
	}
	// A holder with 30 ms left is tried again when it expires; one already
	// expired a millisecond later.
	r.attempt(t, left, claimResult{err: heldFor(30 * time.Millisecond)})
	if got := r.clock.nextWait(t); got != 30*time.Millisecond {
		t.Fatalf("paused %s, want the holder's 30ms", got)
	}
	r.clock.Advance(30 * time.Millisecond)
	left -= 30 * time.Millisecond
	r.attempt(t, left, claimResult{err: heldFor(0)})
	if got := r.clock.nextWait(t); got != time.Millisecond {
		t.Fatalf("paused %s after an expired holder, want 1ms", got)
	}
	r.clock.Advance(time.Millisecond)
	left -= time.Millisecond
	want := &Lease{Task: "t", Owner: "me", Token: 7}
	r.attempt(t, left, claimResult{lease: want})
	if res := r.result(t); res.err != nil || res.lease != want {
		t.Fatalf("ClaimWait = %v, %v; want the lease", res.lease, res.err)
	}
}

// TestClaimWaitRunsOut: the last pause is cut to the wait left, and the
// attempt after it answers with its HeldError.
func TestClaimWaitRunsOut(t *testing.T) {
	t.Parallel()
	var onHeld []time.Duration
	r := startWait(t, t.Context(), WaitOptions{Wait: 70 * time.Millisecond, OnHeld: func(h *HeldError, left time.Duration) {
		if h.Holder.Owner != "other" {
			t.Errorf("OnHeld got holder %q", h.Holder.Owner)
		}
		onHeld = append(onHeld, left)
	}})
	r.attempt(t, 70*time.Millisecond, claimResult{err: heldFor(time.Minute)})
	if got := r.clock.nextWait(t); got != 50*time.Millisecond {
		t.Fatalf("first pause %s, want 50ms", got)
	}
	r.clock.Advance(50 * time.Millisecond)
	r.attempt(t, 20*time.Millisecond, claimResult{err: heldFor(time.Minute)})
	if got := r.clock.nextWait(t); got != 20*time.Millisecond {
		t.Fatalf("second pause %s, want the 20ms left", got)
	}
	r.clock.Advance(20 * time.Millisecond)
	r.attempt(t, 0, claimResult{err: heldFor(time.Minute)})
	res := r.result(t)
	var held *HeldError
	if !errors.As(res.err, &held) || res.lease != nil {
		t.Fatalf("ClaimWait = %v, %v; want a HeldError", res.lease, res.err)
	}
	if len(onHeld) != 2 || onHeld[0] != 70*time.Millisecond || onHeld[1] != 20*time.Millisecond {
		t.Fatalf("OnHeld saw the time left %v, want [70ms 20ms]", onHeld)
	}
}

// TestClaimWaitOnce: without a wait, and for any answer but held, there is
// one attempt and its answer.
func TestClaimWaitOnce(t *testing.T) {
	t.Parallel()
	unavailable := Unavailable("claim", errors.New("down"))
	for _, tc := range []struct {
		name string
		wait time.Duration
		err  error
		want error
	}{
		{"held without a wait", 0, heldFor(time.Minute), ErrHeld},
		{"held, negative wait", -time.Second, heldFor(time.Minute), ErrHeld},
		{"unavailable", time.Hour, unavailable, ErrUnavailable},
		{"invalid", time.Hour, fmt.Errorf("%w: owner must not be empty", ErrInvalid), ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startWait(t, t.Context(), WaitOptions{Wait: tc.wait})
			r.attempt(t, max(tc.wait, 0), claimResult{err: tc.err})
			if res := r.result(t); !errors.Is(res.err, tc.want) {
				t.Fatalf("ClaimWait error %v, want %v", res.err, tc.want)
			}
			select {
			case d := <-r.clock.added:
				t.Fatalf("ClaimWait paused %s after its only attempt", d)
			default:
			}
		})
	}
}

// TestClaimWaitInterrupted: a pause ends early on Wake (another attempt),
// on Stop (the HeldError) and on the end of ctx (unavailable).
func TestClaimWaitInterrupted(t *testing.T) {
	t.Parallel()
	t.Run("wake", func(t *testing.T) {
		t.Parallel()
		wake := make(chan struct{})
		r := startWait(t, t.Context(), WaitOptions{Wait: time.Hour, Wake: func() <-chan struct{} { return wake }})
		r.attempt(t, time.Hour, claimResult{err: heldFor(time.Minute)})
		r.clock.nextWait(t)
		close(wake) // the clock stays put: only the wake-up can start the next attempt
		r.attempt(t, time.Hour, claimResult{lease: &Lease{Task: "t"}})
		if res := r.result(t); res.err != nil {
			t.Fatal(res.err)
		}
	})
	t.Run("stop", func(t *testing.T) {
		t.Parallel()
		stop := make(chan struct{})
		r := startWait(t, t.Context(), WaitOptions{Wait: time.Hour, Stop: stop})
		r.attempt(t, time.Hour, claimResult{err: heldFor(time.Minute)})
		r.clock.nextWait(t)
		close(stop)
		if res := r.result(t); !errors.Is(res.err, ErrHeld) {
			t.Fatalf("ClaimWait error %v after Stop, want held", res.err)
		}
	})
	t.Run("context", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancelCause(t.Context())
		r := startWait(t, ctx, WaitOptions{Wait: time.Hour})
		r.attempt(t, time.Hour, claimResult{err: heldFor(time.Minute)})
		r.clock.nextWait(t)
		cause := errors.New("interrupted")
		cancel(cause)
		res := r.result(t)
		if !errors.Is(res.err, ErrUnavailable) || !errors.Is(res.err, cause) || res.lease != nil {
			t.Fatalf("ClaimWait = %v, %v after ctx ended; want unavailable with the cause", res.lease, res.err)
		}
	})
}
