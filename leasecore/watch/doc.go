// Package watch follows a lease store's history as it grows: every change
// of holder, as the history records it, whichever process made it
// (docs/design.md, "The watch").
//
// A Hub follows one Service's store for all its watchers with one cursor,
// so the store's load does not grow with the watchers. It runs while it
// has watchers (and a linger after the last leaves), and while it runs it
// also records the expiry of leases that run out with nobody claiming them
// again, so that watchers hear of them.
//
// The package is split by job:
//
//   - watcher.go: Hub.Watch, the Watcher and its goroutine, and what it
//     delivers (Item: events, and the ready mark in order with them);
//   - catchup.go: a watcher that gives a position replays the history with
//     a cursor of its own, then joins the ring;
//   - ring.go: the hub's cursor, the one ring of recent events its live
//     watchers read from, and a watcher's reading of it;
//   - sweep.go: the expiry sweep;
//   - hub.go: the hub's lifecycle (start on the first watcher, linger,
//     stop) and its options.
//
// Positions are the store's event IDs, which only rise, so a position
// above every ID the store has handed out means its history went back (a
// restore from an older copy, an asynchronous failover) or was never this
// store's. Watch refuses such a position (leasecore.ErrPositionAhead), and
// the hub, whose own cursor finds the same when the store goes back under
// it, follows again from the store's newest event and ends every watcher
// with leasecore.ErrPositionAhead: each starts over from the oldest event
// the history holds, so none waits, silent, for IDs that will be handed
// out again to other events.
package watch
