package sidecar

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/sidecar/auth"
)

// slots caps how many streams of one kind (keepalive, watch) run at once,
// and shares the cap fairly among the credentials that may open them, so
// that one team's streams cannot take another's away.
//
// Each credential of the book with the kind's right is guaranteed
// max ÷ N slots (N such credentials); a credential past its guarantee may
// borrow only slots no other credential is guaranteed and not using. A
// sidecar with one credential (or none: every caller is anonymous) lets it
// use the whole cap; a sidecar with many lets any of them use what the
// others leave, while each keeps its guarantee. This is Kubernetes API
// Priority and Fairness's borrowing in its simplest form: equal shares, no
// queue. When the file changes, usage above a new, smaller guarantee is
// kept (nothing is cut) and counts as borrowed until it drains.
type slots struct {
	max    int64
	right  auth.Right // the right that opens this kind of stream
	book   *auth.Book // nil: no shares
	active atomic.Int64

	mu   sync.Mutex
	used map[string]int64 // by credential name; "" is the anonymous caller
}

func newSlots(max int64, right auth.Right) slots {
	return slots{max: max, right: right, used: make(map[string]int64)}
}

// shareAmong makes the credentials of book share the cap.
func (s *slots) shareAmong(book *auth.Book) { s.book = book }

// enter takes a slot for the credential named name, or says why not.
func (s *slots) enter(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := s.active.Load()
	if total >= s.max {
		return errAllTaken
	}
	if s.book != nil {
		holders := 0
		for _, c := range s.book.Credentials() {
			if c.Has(s.right) {
				holders++
			}
		}
		if g := s.max / int64(max(holders, 1)); holders > 1 && s.used[name] >= g {
			// Past its guarantee: borrow only what no other credential
			// is guaranteed and not using.
			reserved := int64(0)
			for _, c := range s.book.Credentials() {
				if c.Name != name && c.Has(s.right) {
					reserved += max(g-s.used[c.Name], 0)
				}
			}
			if total+reserved >= s.max {
				return &shareTaken{name: name, used: s.used[name], share: g, holders: holders}
			}
		}
	}
	s.used[name]++
	s.active.Add(1)
	return nil
}

// leave gives back a slot the credential named name took.
func (s *slots) leave(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used[name]--; s.used[name] <= 0 {
		delete(s.used, name)
	}
	s.active.Add(-1)
}

// errAllTaken: every slot of the sidecar is taken.
var errAllTaken = errors.New("all slots are taken")

// shareTaken: the credential holds its guaranteed share and nothing is
// free to borrow without taking another credential's.
type shareTaken struct {
	name        string
	used, share int64
	holders     int
}

func (e *shareTaken) Error() string {
	return fmt.Sprintf("%s already has %d of them, past its guaranteed share of %d (the cap shared among the %d credentials that may open them); "+
		"what is left is kept for the others", auth.Principal(e.name), e.used, e.share, e.holders)
}

// tooMany is the 503 of a stream refused a slot: the sidecar's cap
// (capDetail) is reached, or the caller's share of it is.
func tooMany(err error, title, capDetail string) error {
	var share *shareTaken
	if errors.As(err, &share) {
		return newProblem(http.StatusServiceUnavailable, problemUnavailable, title, capDetail+": "+share.Error()+"; close some, or try another sidecar or later")
	}
	return newProblem(http.StatusServiceUnavailable, problemUnavailable, title, capDetail+", and all are taken; try another sidecar or later")
}
