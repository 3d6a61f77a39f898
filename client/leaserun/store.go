package leaserun

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// storeHold is a lease leasehold run holds itself: a Keeper renews it in
// the store.
type storeHold struct {
	store leasecore.Store
	k     *leasecore.Keeper
}

// acquireStore claims the task in the store cfg names (waiting while it is
// held, up to cfg.Wait) and keeps the lease.
func acquireStore(ctx context.Context, cfg *Config, log *slog.Logger) (hold, error) {
	// As serve does at start: the embedded store gets its schema wherever
	// it is opened for writing, so a new SQLite file works at once.
	u, err := storeurl.Parse(cfg.Store)
	if err != nil {
		return nil, leasecore.Unavailable("open", fmt.Errorf("open store: %w", err))
	}
	store, err := cli.OpenMigrated(ctx, u)
	if err != nil {
		return nil, leasecore.Unavailable("open", err)
	}
	svc := leasecore.New(store, leasecore.WithInterceptor(cli.MigrateHint))
	p := leasecore.ClaimParams{Task: cfg.Task, Owner: cfg.Owner, TTL: cfg.TTL, MinHold: cfg.minHold()}
	h, err := claimWaiting(ctx, cfg, log, func(ctx context.Context, _ time.Duration) (hold, error) {
		sent := time.Now()
		lease, err := svc.Claim(ctx, p)
		if err != nil {
			return nil, err
		}
		// The keeper outlives ctx, which ends with a signal: the lease is
		// held until the command has exited. Its deadline counts from the
		// claim's send time, so it errs early.
		k, err := leasecore.Keep(context.WithoutCancel(ctx), svc, lease, leasecore.KeeperConfig{TTL: lease.TTL, ClaimSent: sent})
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leasecore.DefaultOpTimeout)
			defer cancel()
			_, _ = svc.Release(rctx, leasecore.ReleaseParams{Task: lease.Task, Owner: lease.Owner, Token: lease.Token})
			return nil, err
		}
		return &storeHold{store: store, k: k}, nil
	})
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	return h, nil
}

func (h *storeHold) lease() leasecore.Lease { return h.k.Lease() }

// lost: the renew loop ends only when the lease is lost or release stops it.
func (h *storeHold) lost() <-chan struct{} { return h.k.Done() }

func (h *storeHold) cause() error { return h.k.Err() }

func (h *storeHold) deadline() time.Time { return h.k.Deadline() }

func (h *storeHold) release(run *leasecore.RunOutcome) (bool, error) {
	released, err := h.k.ReleaseRun(run)
	_ = h.store.Close()
	if h.k.Err() != nil {
		return false, nil // lost: there was nothing to release
	}
	return released, err
}
