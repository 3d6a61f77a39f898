package sidecar

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// Memory per stream. Once a stream has its lease, the handler hijacks the
// connection and returns: net/http's per-request buffers and goroutines go
// away, and what is left of a stream is its connection, one goroutine that
// waits for the client to hang up (a small stack), a Keeper (a timer between
// renewals) and a ping timer. That is what lets one sidecar hold tens of
// thousands of streams (docs/benchmarks.md's stream benchmark gives the memory).

// streamWriteTimeout bounds one write to a stream. Events are a few hundred
// bytes and the socket's buffer holds thousands of them: a write that cannot
// finish in this time is to a client that stopped reading, and ends its
// stream (and releases its lease).
const streamWriteTimeout = 5 * time.Second

// stream is one keepalive stream holding its lease, after the hijack.
type stream struct {
	h      *handlers
	conn   net.Conn
	task   string
	keeper *leasecore.Keeper
	// credential names the credential the stream acts for: its renewals'
	// and its release's history events carry it.
	credential string
	// grant is how the stream's token was let in: while the stream runs,
	// the token must keep hold on the task (streams.enforce).
	grant grant
	// seq orders the streams for a hand-over that takes several at once
	// (streams.handOver), so that two never wait for each other.
	seq uint64

	started chan struct{} // closed when start returns; keeper is set if it succeeded
	// gate stands between the keeper and the store: a hand-over closes it
	// so that no renewal is in flight while the lease is released.
	gate renewGate

	// relMu is held by whoever is ending the stream's lease: the stream
	// itself (releaseLease: the client hung up, or shutdown) or a release
	// request of this sidecar that took the lease over (takeOver until
	// handedOver), so that the lease is released once, by one of them.
	relMu sync.Mutex
	gone  bool // under relMu: the lease was released, or handed over: nothing more to release

	mu       sync.Mutex
	ping     *time.Timer
	interval time.Duration
	closed   bool // the connection is closed: nothing more is written
}

// start sends the header and the acquired event, then starts the keeper, the
// pings and the goroutine that waits for the client to hang up. On error
// nothing was started and the caller releases the lease and strikes the
// stream from the book.
func (st *stream) start(conn net.Conn, lease *leasecore.Lease) error {
	defer close(st.started)
	st.conn = conn
	acquired, err := eventBytes("acquired", api.FromLease(lease))
	if err != nil {
		return err
	}
	if err := st.write(append([]byte(streamHeader), acquired...)); err != nil {
		return err
	}
	renewer, lead := st.h.renewerFor(lease.TTL)
	st.gate.inner = renewer
	k, err := leasecore.Keep(context.Background(), &st.gate, lease, leasecore.KeeperConfig{Lead: lead, OnRenew: st.renewed, Credential: st.credential})
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
// the first release to finish, and so does a caller while a release
// request has the lease (takeOver): when that one released it, there is
// nothing left to do.
func (st *stream) releaseLease() {
	st.relMu.Lock()
	defer st.relMu.Unlock()
	if st.gone {
		return
	}
	st.gone = true
	ok, err := st.keeper.Release()
	st.h.metrics.released(ok, err)
	if ok {
		st.h.streams.noteRelease()
	}
}

// holds returns the stream's lease while the stream holds it: its start
// has finished, no release request is giving the lease up (takeOver), and
// its keeper has neither lost the lease, nor been stopped (a release stops
// it first), nor let its local deadline pass (a loss its timer has yet to
// report). It asks the store nothing.
func (st *stream) holds() (leasecore.Lease, bool) {
	select {
	case <-st.started:
	default:
		return leasecore.Lease{}, false // still sending the acquired event
	}
	k := st.keeper
	if k == nil || k.Context().Err() != nil || st.gate.closed() || !time.Now().Before(k.Deadline()) {
		return leasecore.Lease{}, false
	}
	return k.Lease(), true
}

// takeOver readies the stream for a release of its lease by a request of
// this sidecar (POST …/release or …/revoke), when the stream holds the
// lease under owner (any, when empty) and token (any, when 0): it stops the
// stream's renewals (the one in flight is cancelled and waited for, so that
// none reaches the store after the release is sent) and keeps the lease
// from the stream's own release until handedOver says how the request's
// release went. It reports whether it took the lease over; a stream still
// sending its acquired event is waited for.
func (st *stream) takeOver(owner string, token int64) bool {
	<-st.started
	if st.keeper == nil {
		return false // its start failed: the keepalive handler releases its lease
	}
	st.relMu.Lock()
	l := st.keeper.Lease()
	if st.gone || st.keeper.Context().Err() != nil || (owner != "" && l.Owner != owner) || (token != 0 && l.Token != token) {
		st.relMu.Unlock()
		return false
	}
	st.gate.close()
	return true
}

// handOff is how the release of a lease that streams handed over went,
// and what each of them says.
type handOff struct {
	// err: the release failed (the store did not answer): the streams
	// renew again, as though it had not been asked.
	err error
	// ended: the release ended the streams' lease; otherwise it was not
	// live any more (lost, or ended elsewhere).
	ended bool
	// event is the streams' last event when the release ended their lease.
	event []byte
	// gone is the lost event's detail when it had not.
	gone string
}

// handedOver ends the stream after a release of its lease that it handed
// over (takeOver): its keeper stopped, its last event, its connection
// closed; or, when the release failed, lets it renew again.
func (st *stream) handedOver(o handOff) {
	defer st.relMu.Unlock()
	if o.err != nil {
		st.gate.open()
		return
	}
	st.gone = true
	_ = st.keeper.Stop() // waits for a renewed event it was writing
	if o.ended {
		_ = st.write(o.event)
	} else {
		_ = st.write(mustEvent("lost", api.KeepaliveLost{Reason: api.KeepaliveLostReasonNotHeld, Detail: o.gone}))
	}
	st.close()
}

// renewed is the keeper's OnRenew: tell the client.
func (st *stream) renewed(l leasecore.Lease) {
	st.h.metrics.renewed(nil)
	_ = st.write(mustEvent("renewed", api.FromLease(&l)))
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

// renewGate is the Renewer a stream's keeper renews through: the store's
// (inner), with a gate that a hand-over closes (takeOver). A closed gate
// cancels the renewal in flight and waits for it to return; later renewals
// wait at the gate until it opens again (the release failed) or the keeper
// stops (the lease was released). A renewal cancelled there is one the
// keeper tries again; one already sent in a batch may reach the store
// after the release, which refuses it (a renewal never revives a released
// lease) to nobody: no event, no count.
type renewGate struct {
	inner leasecore.Renewer

	mu     sync.Mutex
	shut   chan struct{}      // non-nil while the gate is closed; closed when it opens
	cancel context.CancelFunc // cancels the renewal in flight; nil when none
	done   chan struct{}      // closed when the renewal in flight returns
}

var _ leasecore.Renewer = (*renewGate)(nil)

// Renew waits while the gate is closed, then renews through inner.
func (g *renewGate) Renew(ctx context.Context, p leasecore.RenewParams) (*leasecore.Lease, error) {
	g.mu.Lock()
	for g.shut != nil {
		shut := g.shut
		g.mu.Unlock()
		select {
		case <-shut:
		case <-ctx.Done():
			return nil, leasecore.Unavailable("renew", ctx.Err())
		}
		g.mu.Lock()
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	g.cancel, g.done = cancel, done
	g.mu.Unlock()

	lease, err := g.inner.Renew(rctx, p)

	g.mu.Lock()
	cancel()
	g.cancel, g.done = nil, nil
	close(done)
	g.mu.Unlock()
	return lease, err
}

// Release passes through: the keeper releases after it has stopped.
func (g *renewGate) Release(ctx context.Context, p leasecore.ReleaseParams) (bool, error) {
	return g.inner.Release(ctx, p)
}

// close shuts the gate and returns once no renewal is in flight.
func (g *renewGate) close() {
	g.mu.Lock()
	if g.shut == nil {
		g.shut = make(chan struct{})
	}
	cancel, done := g.cancel, g.done
	g.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// open lets renewals through again.
func (g *renewGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

// closed says whether the gate is shut (a release of the lease is under way).
func (g *renewGate) closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shut != nil
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
	_ = st.write(mustEvent("released", api.KeepaliveReleased{Reason: api.KeepaliveReleasedReasonShutdown}))
	st.close()
}

// allowed reports whether the stream's token still has hold on its task.
func (st *stream) allowed() bool {
	cred, ok := st.grant.current()
	return ok && cred.Allows(auth.Hold, st.task)
}

// revoke ends a stream whose token no longer has hold on its task: it
// stops renewing, says lost (forbidden), and closes. The lease is not
// released: it runs out at its expiry, so that a holder that stops its job
// by its local deadline (leasehold run) is never overlapped by a next
// holder, as when renewals fail. A stream still starting is waited for;
// one whose lease is being released or was lost has nothing to add.
func (st *stream) revoke() {
	<-st.started
	if st.keeper == nil {
		return
	}
	st.relMu.Lock()
	if st.gone || st.keeper.Context().Err() != nil {
		st.relMu.Unlock()
		return
	}
	st.gone = true // nothing left to release: the stream's end must not
	st.relMu.Unlock()
	_ = st.keeper.Stop() // waits for a renewed event it was writing
	st.h.metrics.renewed(leasecore.ErrForbidden)
	_ = st.write(mustEvent("lost", api.KeepaliveLost{Reason: api.KeepaliveLostReasonForbidden,
		Detail: auth.Principal(st.credential) + " no longer has hold on task " + strconv.Quote(st.task) + " (removed, narrowed, revoked or rotated out of the credentials file): " +
			"the stream stopped renewing; the lease was not released and ends at its expiry"}))
	st.close()
}

// sendPing writes a comment line, which reveals a dead client, and arms the
// next one.
func (st *stream) sendPing() {
	if st.write(pingComment) != nil {
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

// pingInterval spaces the comment lines that reveal a dead client: often
// enough to notice it within a fraction of the ttl, never more than every
// 15 s nor less than every 100 ms.
func pingInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/5, 100*time.Millisecond), 15*time.Second)
}

// lostEvent is the data of the lost event for the keeper's error.
func lostEvent(err error) api.KeepaliveLost {
	var lost *leasecore.LostError
	if errors.As(err, &lost) {
		return api.KeepaliveLost{Reason: api.KeepaliveLostReason(lost.Reason), Detail: err.Error()}
	}
	if errors.Is(err, leasecore.ErrForbidden) {
		return api.KeepaliveLost{Reason: api.KeepaliveLostReasonForbidden, Detail: err.Error()}
	}
	return api.KeepaliveLost{Reason: api.KeepaliveLostReasonDeadline, Detail: err.Error()}
}
