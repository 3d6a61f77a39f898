package leasecore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// HistoryFeed is implemented by a Store whose lease history can be followed
// as it grows, whichever process writes it: the watch (package
// leasecore/watch, through Service.HistoryFeed) is built on it. Both
// drivers implement it.
//
// The history table is the source of truth. A driver's change signal
// (HistoryChanges) only says when to read it again, so a lost or late
// signal delays events and never loses them.
type HistoryFeed interface {
	// FollowHistory returns a cursor positioned after the event whose ID is
	// after: its first Next returns the events with larger IDs. An after
	// below zero means "from now": the cursor starts after the newest event
	// the store has committed. An after above the store's high-water mark
	// (the largest event ID it has ever handed out, which pruning never
	// lowers) fails with a *PositionAheadError: no event of this history
	// has that ID.
	FollowHistory(ctx context.Context, after int64) (HistoryCursor, error)

	// HistoryChanges returns a channel that receives a value, soon, after
	// any process commits history events to the store (coalesced: one
	// value may stand for many commits), until ctx is done; then the
	// channel is closed. poll is how often the driver asks the store
	// whether another process committed, the longest such a commit waits
	// to be signalled; zero or less means the driver's default
	// (DefaultWatchPoll on both drivers). This process's own commits
	// through the store are signalled at once. An error means the signal
	// could not be set up; the caller then reads on a timer.
	HistoryChanges(ctx context.Context, poll time.Duration) (<-chan struct{}, error)

	// RecordExpiries records an "expired" event, at the lease's expiry
	// (the store's time), for no credential, for at most limit leases that
	// ran out unreleased and whose end is not recorded yet, and marks their
	// end recorded: a later claim of the task, or a late renewal, then
	// records no second "expired" for that lease (the renewal still records
	// its "lost"). It is the event the claim or late renewal would have
	// recorded had it come first, so the history holds the same events
	// whether or not a sweep ran. A lease whose row another operation holds
	// at that moment may be left for the next call. It returns how many it
	// recorded and the earliest expiry among the live leases (zero when
	// none is live), so the caller knows when to call again.
	RecordExpiries(ctx context.Context, limit int) (ExpirySweep, error)
}

// HistoryCursor reads a store's history in ID order from a position. It is
// used by one goroutine at a time.
type HistoryCursor interface {
	// Next returns up to limit events after the cursor's position, in ID
	// order, and advances the position past them. It returns only events
	// whose place is settled: once Next has returned an event, no event
	// with a smaller ID can commit later (on PostgreSQL, where IDs are
	// taken before commit, Next holds events back behind an ID that a
	// transaction still in flight may yet commit). It returns no events,
	// and no error, when there are none yet; Pending then says whether
	// events are being held back, so the caller should ask again soon.
	//
	// When the store's high-water mark is below the cursor's position, its
	// history went back (it was restored from an older copy, or failed over
	// to one that had not received the newest events): Next fails with a
	// *PositionAheadError, and the cursor is of no further use. The IDs it
	// would wait for are handed out again, to other events.
	Next(ctx context.Context, limit int) ([]Event, error)
	// Position is the ID after which the next call reads.
	Position() int64
	// Pending reports whether the last Next held events back (see Next).
	Pending() bool
	// Close releases what the cursor holds.
	Close() error
}

// ErrPositionAhead: a watch position, or a cursor's, is above every event
// ID the store has handed out. Either the store's history went back (a
// restore from an older copy, an asynchronous failover that lost the newest
// events) or the position was never this store's. The events after it are
// not this history's: the watcher starts over from the oldest event the
// history holds. The matching *PositionAheadError says where each stood.
var ErrPositionAhead = errors.New("watch position ahead of the store's history")

// PositionAheadError is a position found above the store's high-water mark.
type PositionAheadError struct {
	// Position is the position that was found ahead: the one asked for,
	// or the cursor's.
	Position int64
	// Newest is the store's high-water mark when it was found: the largest
	// event ID it had handed out (0 when none).
	Newest int64
}

func (e *PositionAheadError) Error() string {
	return fmt.Sprintf("position %d is ahead of the store's history, whose newest event id is %d: "+
		"the store was restored from an older copy or failed over to one without its newest events, "+
		"or the position is not this store's; start over from the oldest event", e.Position, e.Newest)
}

// Is makes errors.Is(err, ErrPositionAhead) true.
func (e *PositionAheadError) Is(target error) bool { return target == ErrPositionAhead }

// ExpirySweep is what one RecordExpiries call did.
type ExpirySweep struct {
	Recorded   int       // "expired" events recorded
	NextExpiry time.Time // the earliest expiry among live leases; zero when none
}

// The operations of a HistoryFeed, as Interceptors are told of them.
const (
	OpFollowHistory  = "follow_history"
	OpReadHistory    = "read_history" // HistoryCursor.Next
	OpRecordExpiries = "record_expiries"
)
