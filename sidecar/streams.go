package sidecar

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// DefaultMaxStreams caps concurrent keepalive streams per sidecar.
const DefaultMaxStreams = 20000

// streams is the sidecar's book of keepalive streams: a cap on how many run
// at once, the streams holding leases (to release them at shutdown, and to
// hand a lease over to a release request of this sidecar: handOver), and a
// wake-up for streams waiting on a held task whenever this sidecar releases
// a lease.
type streams struct {
	slots
	closing chan struct{}
	once    sync.Once

	mu       sync.Mutex
	released chan struct{}        // closed (and replaced) on every local release
	held     map[*stream]struct{} // streams holding a lease, from just before the hijack until they end
	running  sync.WaitGroup       // one per stream in held
	seq      uint64               // the last stream.seq given
}

func newStreams(max int) *streams {
	if max <= 0 {
		max = DefaultMaxStreams
	}
	return &streams{slots: newSlots(int64(max), auth.Hold), closing: make(chan struct{}), released: make(chan struct{}), held: make(map[*stream]struct{})}
}

// shutdown tells streams waiting for a lease to give up, and every stream
// holding one to release it, say so and end; then it waits for them, until
// ctx ends.
func (s *streams) shutdown(ctx context.Context) error {
	s.once.Do(func() { close(s.closing) })
	s.mu.Lock()
	for st := range s.held {
		go st.shutdown()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("keepalive streams still ending: %w", ctx.Err())
	}
}

// add books a stream that holds its lease; false once shutdown has begun.
func (s *streams) add(st *stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closing:
		return false
	default:
	}
	s.seq++
	st.seq = s.seq
	s.held[st] = struct{}{}
	s.running.Add(1)
	return true
}

// handOver hands the lease on task that this sidecar's streams hold under
// owner (any owner when empty) and token (any when 0) over to a release
// request, before the request asks the store: each such stream stops
// renewing (stream.takeOver) and no longer counts for held-here. It
// returns them; the caller releases the lease, then tells each how that
// went (stream.handedOver), which ends them with their last event, or
// lets them renew again when the release failed. Several streams of one
// owner may hold the same lease (a second keepalive of the same owner
// refreshes the first's); they are taken in the order they were booked,
// so that two hand-overs never wait for each other.
func (s *streams) handOver(task, owner string, token int64) []*stream {
	s.mu.Lock()
	var found []*stream
	for st := range s.held {
		if st.task == task {
			found = append(found, st)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(found, func(a, b *stream) int { return cmp.Compare(a.seq, b.seq) })
	taken := found[:0]
	for _, st := range found {
		if st.takeOver(owner, token) {
			taken = append(taken, st)
		}
	}
	return taken
}

// enforce ends, each time the credentials book changes, the streams whose
// token no longer has hold on their task (removed from the file, narrowed,
// revoked, or past a rotation's grace), until shutdown. A nil book (no
// tokens) has nothing to enforce.
func (s *streams) enforce(book *auth.Book) {
	if book == nil {
		return
	}
	changed := book.Changed()
	for {
		select {
		case <-s.closing:
			return
		case <-changed:
		}
		changed = book.Changed() // before the walk: a change during it is seen next
		s.mu.Lock()
		var ended []*stream
		for st := range s.held {
			if !st.allowed() {
				ended = append(ended, st)
			}
		}
		s.mu.Unlock()
		for _, st := range ended {
			go st.revoke()
		}
	}
}

// remove strikes an ended stream from the book.
func (s *streams) remove(st *stream) {
	s.mu.Lock()
	delete(s.held, st)
	s.mu.Unlock()
	s.running.Done()
	s.leave(st.credential)
}

// holder returns the lease on task that one of the booked streams holds
// (stream.holds), if any. It walks the book: a probe every few seconds
// costs a pass over at most --max-streams entries, and no store call.
func (s *streams) holder(task string) (leasecore.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for st := range s.held {
		if st.task != task {
			continue
		}
		if l, ok := st.holds(); ok {
			return l, true
		}
	}
	return leasecore.Lease{}, false
}

// releasedSignal returns a channel closed at the next local release.
func (s *streams) releasedSignal() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released
}

// noteRelease wakes the streams waiting for a held task.
func (s *streams) noteRelease() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.released)
	s.released = make(chan struct{})
}
