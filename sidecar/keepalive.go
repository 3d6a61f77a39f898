package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// KeepaliveLease answers GET /v1/leases/{task}/keepalive: claim (waiting up
// to wait_ms while held), then hold the lease for as long as the client stays
// connected, reporting renewals as server-sent events.
func (h *handlers) KeepaliveLease(c echo.Context, task api.Task, params api.KeepaliveLeaseParams) error {
	if err := leasecore.CheckClientTask(task); err != nil {
		return err // 403: leasehold's own tasks are not the clients'
	}
	cred := credentialName(c)
	if err := h.streams.enter(cred); err != nil {
		return tooMany(err, "Too many streams", fmt.Sprintf("this sidecar holds at most %d keepalive streams (--max-streams)", h.streams.max))
	}
	handedOver := false // to the stream, which leaves the book when it ends
	defer func() {
		if !handedOver {
			h.streams.leave(cred)
		}
	}()

	owner := deref(params.Owner)
	if owner == "" {
		owner = leasecore.NewOwner()
	}
	p := leasecore.ClaimParams{Task: task, Owner: owner, TTL: duration(params.TtlMs), Note: deref(params.Note), MinHold: duration(params.MinHoldMs), Credential: cred}
	lease, err := h.claimWaiting(c.Request().Context(), p, duration(params.WaitMs))
	h.metrics.claimed(lease, err)
	if err != nil {
		return respondClaim(c, nil, err)
	}

	// Book the stream before anything is written, so that a shutdown from
	// here on waits for it and its release.
	st := &stream{h: h, task: lease.Task, credential: cred, grant: grantOf(c), started: make(chan struct{})}
	if !h.streams.add(st) {
		h.release(lease, cred)
		return newProblem(http.StatusServiceUnavailable, problemUnavailable, "Shutting down",
			"this sidecar is shutting down; the lease was released: try another sidecar")
	}
	handedOver = true // remove leaves the book
	conn, _, err := c.Response().Hijack()
	if err == nil {
		c.Response().Status = http.StatusOK // for the request metrics; the stream writes its own
		err = st.start(conn, lease)
		if err == nil && st.grant.stale() && !st.allowed() {
			// The book changed after the token was let in and before
			// enforce could see the stream (it is booked now).
			go st.revoke()
		}
	} else {
		close(st.started)
		err = fmt.Errorf("keepalive: take over the connection: %w", err)
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		h.release(lease, cred)
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

// claimWaiting claims p; while the task is held and wait has not run out, it
// tries again as leasecore.ClaimWait paces it, and at once when this sidecar
// releases a lease. It gives up with the HeldError when the sidecar shuts
// down.
func (h *handlers) claimWaiting(ctx context.Context, p leasecore.ClaimParams, wait time.Duration) (*leasecore.Lease, error) {
	opts := leasecore.WaitOptions{Wait: wait, Wake: h.streams.releasedSignal, Stop: h.streams.closing}
	return leasecore.ClaimWait(ctx, opts, func(ctx context.Context, _ time.Duration) (*leasecore.Lease, error) {
		return h.svc.Claim(ctx, p)
	})
}

// release gives back a lease that could not be kept, best effort, acting
// for the credential that claimed it.
func (h *handlers) release(l *leasecore.Lease, credential string) {
	ctx, cancel := context.WithTimeout(context.Background(), leasecore.DefaultOpTimeout)
	defer cancel()
	released, err := h.svc.Release(ctx, leasecore.ReleaseParams{Task: l.Task, Owner: l.Owner, Token: l.Token, Credential: credential})
	h.metrics.released(released, err)
}
