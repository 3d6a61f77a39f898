package leasecore

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
)

// The pause between two claims of a held task in ClaimWait starts at
// ClaimRetryMin and doubles up to ClaimRetryMax; it is never longer than the
// holder's lease has left, nor than the wait.
const (
	ClaimRetryMin = 50 * time.Millisecond
	ClaimRetryMax = time.Second
)

// WaitOptions says how ClaimWait waits for a held task.
type WaitOptions struct {
	// Wait is how long to keep trying while the task is held, counted from
	// the first attempt; zero or less tries once.
	Wait time.Duration
	// Wake, when set, is called before each attempt and returns a channel
	// that closes when another attempt is worth making before the pause
	// ends: a sidecar closes it whenever it releases a lease. Taking it
	// before the attempt means a release during the attempt is not missed.
	Wake func() <-chan struct{}
	// Stop, when not nil, ends the wait once closed: ClaimWait then returns
	// the last attempt's HeldError (a sidecar that is shutting down).
	Stop <-chan struct{}
	// OnHeld, when set, is called each time an attempt found the task held
	// and the wait goes on, with that attempt's error and the time left.
	OnHeld func(held *HeldError, left time.Duration)
	// Clock paces the pauses and the wait; nil means SystemClock.
	Clock Clock
}

// ClaimWait calls claim until it returns anything but a HeldError, or until
// opts.Wait has run out, and returns the last result: a lease (or whatever
// claim makes of one), a HeldError once the wait is over, or another error
// at once. claim gets the time left to wait (never negative), so that one
// that asks a sidecar can let the sidecar wait on its side.
//
// Between attempts it pauses (see ClaimRetryMin) until the holder's lease
// would expire, the backoff step ends, or opts.Wake fires, whichever is
// first. When ctx ends it gives up with ErrUnavailable, since the outcome of
// waiting is unknown rather than "held".
//
// Service.Claim fits as claim with a closure:
//
//	lease, err := leasecore.ClaimWait(ctx, leasecore.WaitOptions{Wait: time.Minute},
//		func(ctx context.Context, _ time.Duration) (*leasecore.Lease, error) { return svc.Claim(ctx, p) })
func ClaimWait[T any](ctx context.Context, opts WaitOptions, claim func(ctx context.Context, left time.Duration) (T, error)) (T, error) {
	clock := opts.Clock
	if clock == nil {
		clock = SystemClock
	}
	deadline := clock.Now().Add(opts.Wait)
	retry := backoff.New(ClaimRetryMin, ClaimRetryMax)
	for {
		var woken <-chan struct{}
		if opts.Wake != nil {
			woken = opts.Wake()
		}
		got, err := claim(ctx, max(deadline.Sub(clock.Now()), 0))
		var held *HeldError
		if !errors.As(err, &held) {
			return got, err
		}
		left := deadline.Sub(clock.Now())
		if left <= 0 {
			return got, err
		}
		if opts.OnHeld != nil {
			opts.OnHeld(held, left)
		}
		// A holder whose lease has (nearly) expired is tried again at once,
		// give or take a millisecond, rather than in a busy loop.
		pause := min(retry.Next(), left, max(held.Holder.TTLRemaining, time.Millisecond))
		select {
		case <-ctx.Done():
			var zero T
			return zero, Unavailable("claim", context.Cause(ctx))
		case <-opts.Stop:
			return got, err
		case <-woken:
		case <-clock.After(pause):
		}
	}
}
