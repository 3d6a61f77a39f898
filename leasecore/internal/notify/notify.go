// Package notify wakes every goroutine waiting for a store's own commits:
// both drivers' HistoryChanges learn from it, at once, that this process
// wrote history, rather than at their next poll of the store.
package notify

import "sync"

// Notifier wakes every goroutine waiting on it: Wait returns a channel that
// the next Notify closes. The zero value is ready to use.
type Notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait returns a channel that the next Notify closes. Taken before a look
// at the store, it also catches a commit made during that look.
func (n *Notifier) Wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

// Notify wakes every goroutine waiting on a channel Wait returned. With
// nobody waiting it costs a lock and nothing else.
func (n *Notifier) Notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}
