package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// DefaultMaxStreams caps concurrent keepalive streams per sidecar.
const DefaultMaxStreams = 20000

// Memory per stream. Once a stream has its lease, the handler hijacks the
// connection and returns: net/http's per-request buffers and goroutines go
// away, and what is left of a stream is its connection, one goroutine that
// waits for the client to hang up (a small stack), a Keeper (a timer between
// renewals) and a ping timer. That is what lets one sidecar hold tens of
// thousands of streams (the README's stream benchmark gives the memory).

// streamWriteTimeout bounds one write to a stream. Events are a few hundred
// bytes and the socket's buffer holds thousands of them: a write that cannot
// finish in this time is to a client that stopped reading, and ends its
// stream (and releases its lease).
const streamWriteTimeout = 5 * time.Second

// streams is the sidecar's book of keepalive streams: a cap on how many run
// at once, the streams holding leases (to release them at shutdown), and a
// wake-up for streams waiting on a held task whenever this sidecar releases
// a lease.
type streams struct {
	max     int64
	active  atomic.Int64
	closing chan struct{}
	once    sync.Once

	mu       sync.Mutex
	released chan struct{}        // closed (and replaced) on every local release
	held     map[*stream]struct{} // streams holding a lease, from just before the hijack until they end
	running  sync.WaitGroup       // one per stream in held
}

func newStreams(max int) *streams {
	if max <= 0 {
		max = DefaultMaxStreams
	}
	return &streams{max: int64(max), closing: make(chan struct{}), released: make(chan struct{}), held: make(map[*stream]struct{})}
}

func (s *streams) enter() bool {
	if s.active.Add(1) > s.max {
		s.active.Add(-1)
		return false
	}
	return true
}

func (s *streams) leave() { s.active.Add(-1) }

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
	s.held[st] = struct{}{}
	s.running.Add(1)
	return true
}

// remove strikes an ended stream from the book.
func (s *streams) remove(st *stream) {
	s.mu.Lock()
	delete(s.held, st)
	s.mu.Unlock()
	s.running.Done()
	s.leave()
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

// KeepaliveLease answers GET /v1/leases/{task}/keepalive: claim (waiting up
// to wait_ms while held), then hold the lease for as long as the client stays
// connected, reporting renewals as server-sent events.
func (h *handlers) KeepaliveLease(c echo.Context, task api.Task, params api.KeepaliveLeaseParams) error {
	if err := leasecore.CheckClientTask(task); err != nil {
		return err // 403: leasehold's own tasks are not the clients'
	}
	if !h.streams.enter() {
		return newProblem(http.StatusServiceUnavailable, problemUnavailable, "Too many streams",
			fmt.Sprintf("this sidecar already holds %d keepalive streams (--max-streams); try another sidecar or later", h.streams.max))
	}
	handedOver := false // to the stream, which leaves the book when it ends
	defer func() {
		if !handedOver {
			h.streams.leave()
		}
	}()

	owner := deref(params.Owner)
	if owner == "" {
		owner = newOwner()
	}
	p := leasecore.ClaimParams{Task: task, Owner: owner, TTL: duration(params.TtlMs), Note: deref(params.Note)}
	lease, err := h.claimWaiting(c.Request().Context(), p, duration(params.WaitMs))
	h.metrics.claimed(lease, err)
	if err != nil {
		return respondClaim(c, nil, err)
	}

	// Book the stream before anything is written, so that a shutdown from
	// here on waits for it and its release.
	st := &stream{h: h, task: lease.Task, started: make(chan struct{})}
	if !h.streams.add(st) {
		h.release(lease)
		return newProblem(http.StatusServiceUnavailable, problemUnavailable, "Shutting down",
			"this sidecar is shutting down; the lease was released: try another sidecar")
	}
	handedOver = true // remove leaves the book
	conn, _, err := c.Response().Hijack()
	if err == nil {
		c.Response().Status = http.StatusOK // for the request metrics; the stream writes its own
		err = st.start(conn, lease)
	} else {
		close(st.started)
		err = fmt.Errorf("keepalive: take over the connection: %w", err)
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		h.release(lease)
		h.streams.remove(st)
		if conn != nil {
			// The response is the connection's now: nothing more to answer.
			h.log.Info("keepalive stream ended before it started; its lease was released", "task", lease.Task, "err", err)
			return nil
		}
		return err
	}
	return nil
}

// stream is one keepalive stream holding its lease, after the hijack.
type stream struct {
	h      *handlers
	conn   net.Conn
	task   string
	keeper *leasecore.Keeper

	started     chan struct{} // closed when start returns; keeper is set if it succeeded
	releaseOnce sync.Once

	mu       sync.Mutex
	ping     *time.Timer
	interval time.Duration
	closed   bool // the connection is closed: nothing more is written
}

// streamHeader starts the response: an event stream that ends when the
// connection closes.
const streamHeader = "HTTP/1.1 200 OK\r\n" +
	"Content-Type: text/event-stream\r\n" +
	"Cache-Control: no-store\r\n" +
	"X-Accel-Buffering: no\r\n" + // proxies must not hold events back
	"Connection: close\r\n\r\n"

// start sends the header and the acquired event, then starts the keeper, the
// pings and the goroutine that waits for the client to hang up. On error
// nothing was started and the caller releases the lease and strikes the
// stream from the book.
func (st *stream) start(conn net.Conn, lease *leasecore.Lease) error {
	defer close(st.started)
	st.conn = conn
	acquired, err := eventBytes("acquired", apiLease(lease))
	if err != nil {
		return err
	}
	if err := st.write(append([]byte(streamHeader), acquired...)); err != nil {
		return err
	}
	renewer, lead := st.h.renewerFor(lease.TTL)
	k, err := leasecore.Keep(context.Background(), renewer, lease, leasecore.KeeperConfig{Lead: lead, OnRenew: st.renewed})
	if err != nil {
		return err
	}
	st.keeper = k
	context.AfterFunc(k.Context(), st.keeperEnded)
	st.mu.Lock()
	st.interval = pingInterval(lease.TTL)
	st.ping = time.AfterFunc(st.interval, st.sendPing)
	st.mu.Unlock()
	go st.watch()
	return nil
}

// watch waits for the connection to end (the client hung up, or the stream
// closed it), then ends the stream.
func (st *stream) watch() {
	var b [64]byte
	for {
		if _, err := st.conn.Read(b[:]); err != nil {
			break // a client has nothing to send; whatever it sends is ignored
		}
	}
	st.end()
}

// end releases the lease unless that was done already (shutdown) or it was
// lost, closes the connection and strikes the stream from the book.
func (st *stream) end() {
	st.close()
	st.mu.Lock()
	st.ping.Stop()
	st.mu.Unlock()
	st.releaseLease()
	st.h.streams.remove(st)
}

// releaseLease releases the stream's lease once; a second caller waits for
// the first release to finish.
func (st *stream) releaseLease() {
	st.releaseOnce.Do(func() {
		ok, err := st.keeper.Release()
		st.h.metrics.released(ok, err)
		if ok {
			st.h.streams.noteRelease()
		}
	})
}

// renewed is the keeper's OnRenew: tell the client.
func (st *stream) renewed(l leasecore.Lease) {
	st.h.metrics.renewed(nil)
	_ = st.write(mustEvent("renewed", apiLease(&l)))
}

// keeperEnded runs when the keeper's context ends: when the lease was lost,
// say why and close the stream; otherwise the stream stopped the keeper
// itself and has nothing to add.
func (st *stream) keeperEnded() {
	<-st.keeper.Done()
	lost := st.keeper.Err()
	if lost == nil {
		return
	}
	st.h.metrics.renewed(lost)
	_ = st.write(mustEvent("lost", lostEvent(lost)))
	st.close()
}

// shutdown releases the lease first, then says so, then closes the stream.
// A stream still starting is waited for; one whose start failed is left to
// the handler, which releases its lease.
func (st *stream) shutdown() {
	<-st.started
	if st.keeper == nil {
		return
	}
	st.releaseLease()
	_ = st.write(mustEvent("released", api.KeepaliveReleased{Reason: api.Shutdown}))
	st.close()
}

// sendPing writes a comment line, which reveals a dead client, and arms the
// next one.
func (st *stream) sendPing() {
	if st.write([]byte(": ping\n\n")) != nil {
		return
	}
	st.mu.Lock()
	if !st.closed {
		st.ping.Reset(st.interval)
	}
	st.mu.Unlock()
}

// write sends b whole, or fails and closes the stream: a client that cannot
// take an event in streamWriteTimeout is treated as gone.
func (st *stream) write(b []byte) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return net.ErrClosed
	}
	_ = st.conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := st.conn.Write(b); err != nil {
		st.closed = true
		st.conn.Close()
		return err
	}
	return nil
}

// close closes the connection once; watch then ends the stream.
func (st *stream) close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.closed {
		st.closed = true
		st.conn.Close()
	}
}

// renewerFor picks how a stream's lease is renewed. A lease whose renewals
// are due every ttl × 0.4 ≥ 4 windows goes through the coalescer, which
// sends the renewals of many streams in one statement: the keeper hands each
// renewal over one window early, so it is never later for waiting in a
// batch. A shorter ttl has too little room for that and renews directly
// (the store still batches concurrent renewals).
func (h *handlers) renewerFor(ttl time.Duration) (leasecore.Renewer, time.Duration) {
	w := h.renewals.Window()
	if ttl*2/5 >= 4*w {
		return h.renewals, w
	}
	return h.svc, 0
}

// claimWaiting claims p; while the task is held and wait has not run out, it
// tries again when this sidecar releases a lease, when the holder's lease
// would expire, or after a backoff (50 ms doubling to 1 s), whichever is
// first.
func (h *handlers) claimWaiting(ctx context.Context, p leasecore.ClaimParams, wait time.Duration) (*leasecore.Lease, error) {
	deadline := time.Now().Add(wait)
	backoff := 50 * time.Millisecond
	for {
		woken := h.streams.releasedSignal()
		lease, err := h.svc.Claim(ctx, p)
		var held *leasecore.HeldError
		if !errors.As(err, &held) {
			return lease, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, err
		}
		pause := min(backoff, left, max(held.Holder.TTLRemaining, time.Millisecond))
		backoff = min(backoff*2, time.Second)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, leasecore.Unavailable("claim", ctx.Err())
		case <-h.streams.closing:
			t.Stop()
			return nil, err
		case <-woken:
		case <-t.C:
		}
		t.Stop()
	}
}

// release gives back a lease that could not be kept, best effort.
func (h *handlers) release(l *leasecore.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), leasecore.DefaultOpTimeout)
	defer cancel()
	released, err := h.svc.Release(ctx, leasecore.ReleaseParams{Task: l.Task, Owner: l.Owner, Token: l.Token})
	h.metrics.released(released, err)
}

// pingInterval spaces the comment lines that reveal a dead client: often
// enough to notice it within a fraction of the ttl, never more than every
// 15 s nor less than every 100 ms.
func pingInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/5, 100*time.Millisecond), 15*time.Second)
}

// eventBytes formats one server-sent event.
func eventBytes(name string, data any) ([]byte, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", name, b), nil
}

// mustEvent is eventBytes for the API's own types, which always marshal.
func mustEvent(name string, data any) []byte {
	b, err := eventBytes(name, data)
	if err != nil {
		panic(err)
	}
	return b
}

func lostEvent(err error) api.KeepaliveLost {
	var lost *leasecore.LostError
	if errors.As(err, &lost) {
		return api.KeepaliveLost{Reason: api.KeepaliveLostReason(lost.Reason), Detail: err.Error()}
	}
	return api.KeepaliveLost{Reason: api.KeepaliveLostReasonDeadline, Detail: err.Error()}
}

// newOwner makes an owner for a client that named none:
// <hostname>#<pid>#<random>, unique across replicas and restarts.
func newOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "leasehold"
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s#%d#%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
