package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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

// streams is the sidecar's book of keepalive streams: a cap on how many run
// at once, the signal that the sidecar is shutting down, and a wake-up for
// streams waiting on a held task whenever this sidecar releases a lease.
type streams struct {
	max     int64
	active  atomic.Int64
	closing chan struct{}
	once    sync.Once

	mu       sync.Mutex
	released chan struct{} // closed (and replaced) on every local release
}

func newStreams(max int) *streams {
	if max <= 0 {
		max = DefaultMaxStreams
	}
	return &streams{max: int64(max), closing: make(chan struct{}), released: make(chan struct{})}
}

func (s *streams) enter() bool {
	if s.active.Add(1) > s.max {
		s.active.Add(-1)
		return false
	}
	return true
}

func (s *streams) leave() { s.active.Add(-1) }

// shutdown tells every stream to release its lease and end.
func (s *streams) shutdown() { s.once.Do(func() { close(s.closing) }) }

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
	if !h.streams.enter() {
		return newProblem(http.StatusServiceUnavailable, problemUnavailable, "Too many streams",
			fmt.Sprintf("this sidecar already holds %d keepalive streams (--max-streams); try another sidecar or later", h.streams.max))
	}
	defer h.streams.leave()

	owner := deref(params.Owner)
	if owner == "" {
		owner = newOwner()
	}
	p := leasecore.ClaimParams{Task: task, Owner: owner, TTL: duration(params.TtlMs), Note: deref(params.Note)}
	ctx := c.Request().Context()
	lease, err := h.claimWaiting(ctx, p, duration(params.WaitMs))
	h.metrics.claimed(lease, err)
	if err != nil {
		return respondClaim(c, nil, err)
	}

	renewed := make(chan leasecore.Lease, 1)
	k, err := leasecore.Keep(ctx, h.svc, lease, leasecore.KeeperConfig{OnRenew: func(l leasecore.Lease) {
		h.metrics.renewed(nil)
		// Keep only the newest renewal if the writer is behind.
		select {
		case <-renewed:
		default:
		}
		renewed <- l
	}})
	if err != nil {
		h.release(lease)
		return err
	}
	done := false // the lease was released (or lost) and needs nothing more
	release := func() {
		if done {
			return
		}
		done = true
		released, err := k.Release()
		h.metrics.released(released, err)
		if released {
			h.streams.noteRelease()
		}
	}
	defer release()

	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "text/event-stream")
	w.Header().Set(echo.HeaderCacheControl, "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // proxies must not hold events back
	w.WriteHeader(http.StatusOK)
	if err := writeEvent(w, "acquired", apiLease(lease)); err != nil {
		return nil // the client is gone; the deferred release runs
	}

	ping := time.NewTicker(pingInterval(lease.TTL))
	defer ping.Stop()
	for {
		select {
		case l := <-renewed:
			if err := writeEvent(w, "renewed", apiLease(&l)); err != nil {
				return nil
			}
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return nil
			}
			w.Flush()
		case <-k.Done():
			if lost := k.Err(); lost != nil {
				h.metrics.renewed(lost)
				_ = writeEvent(w, "lost", lostEvent(lost))
			}
			// Otherwise the client went away: nothing to say, and the
			// deferred release ends the lease.
			return nil
		case <-h.streams.closing:
			release() // first release, then say so
			_ = writeEvent(w, "released", api.KeepaliveReleased{Reason: api.Shutdown})
			return nil
		}
	}
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

func writeEvent(w *echo.Response, name string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		return err
	}
	w.Flush()
	return nil
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
