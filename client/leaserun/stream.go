package leaserun

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	lhclient "github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/leasecore"
)

// streamHold is a lease a sidecar holds for us over a keepalive stream
// (the Go client's Holder).
type streamHold struct{ h *lhclient.Holder }

// acquireSidecar opens a keepalive stream on the sidecar at cfg.Addr (asking
// it to wait, and asking again while cfg.Wait has time left) and keeps it.
func acquireSidecar(ctx context.Context, cfg *Config, log *slog.Logger) (hold, error) {
	opts := []lhclient.Option{lhclient.WithOwner(cfg.Owner)}
	if cfg.BearerToken != "" {
		opts = append(opts, lhclient.WithToken(cfg.BearerToken))
	}
	c, err := lhclient.New(cfg.Addr, opts...)
	if err != nil { // Config.check refused a bad address already
		return nil, fmt.Errorf("%w: --addr %q: %v", leasecore.ErrInvalid, cli.RedactAddr(cfg.Addr), err)
	}
	return claimWaiting(ctx, cfg, log, func(ctx context.Context, wait time.Duration) (hold, error) {
		// The stream outlives ctx, which ends with a signal: the lease is
		// held until the command has exited.
		h, err := c.Keepalive(ctx, lhclient.KeepaliveParams{Task: cfg.Task, Owner: cfg.Owner, TTL: cfg.TTL, Wait: wait, MinHold: cfg.minHold()})
		if err != nil {
			return nil, err
		}
		return streamHold{h}, nil
	})
}

func (s streamHold) lease() leasecore.Lease { return s.h.Lease() }

func (s streamHold) lost() <-chan struct{} { return s.h.Lost() }

func (s streamHold) cause() error { return s.h.Err() }

func (s streamHold) deadline() time.Time { return s.h.Deadline() }

// release gives the lease back with the run's outcome, which the history
// keeps, then closes the stream (Holder.ReleaseRun). Without an outcome it
// only closes the stream, which is how a client releases: the sidecar does
// it (owner- and token-checked) when the connection ends; it reports true
// unless the lease was lost.
func (s streamHold) release(run *leasecore.RunOutcome) (bool, error) {
	if run == nil {
		return s.h.Close() == nil, nil
	}
	released, err := s.h.ReleaseRun(context.Background(), run)
	if err != nil {
		return s.h.Err() == nil, err
	}
	return released, nil
}
