package leasecore

import "time"

// Clock is the keeper's source of local, monotonic time. Liveness is the
// store's business; a Clock only paces renewals and keeps the holder's local
// deadline. Tests inject a fake.
type Clock interface {
	// Now returns the current time; only differences between two Now values
	// are used, so a real clock's monotonic reading is what counts.
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless the
	// returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started, and reports whether it
	// did.
	Stop() bool
}

// SystemClock is the real clock.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (systemClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(d, f)
}
