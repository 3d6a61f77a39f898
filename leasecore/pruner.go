package leasecore

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// PruneTask is the task of leasehold's own lease that guards pruning, so
// that of all the sidecars of a fleet one prunes at a time.
const PruneTask = "leasehold:prune"

// DefaultPruneInterval is how often each sidecar tries to prune.
const DefaultPruneInterval = 10 * time.Minute

// PruneResult says what one pruning pass did.
type PruneResult string

const (
	// Pruned: the pass held the prune lease and pruned.
	Pruned PruneResult = "pruned"
	// PruneSkipped: another pruner holds the prune lease; it does the work.
	PruneSkipped PruneResult = "skipped"
	// PrunedUnguarded: the prune lease could not be had because the store
	// was unavailable for it, and the pass pruned anyway. Pruning twice is
	// harmless (it only deletes what the policies say to delete), whereas
	// history that is never pruned grows without bound, so the lock fails
	// open.
	PrunedUnguarded PruneResult = "pruned_unguarded"
)

// Pruner deletes lease history beyond each task's retention policy, after
// recording the expiries nobody recorded (see recordExpiries), guarded
// by the lease PruneTask (ttl three intervals, so a pruner that dies holding
// it delays the next pass by at most that): held by another pruner → skip
// the pass quietly; unavailable → prune anyway, warning once per streak of
// such passes; acquired → prune, then release in a deferred step. Its
// claims and releases act for no credential: leasehold's own work.
type Pruner struct {
	svc      *Service
	interval time.Duration
	owner    string
	log      *slog.Logger

	// OnLocked, when set, is called after a pass has taken the prune lease
	// and before it prunes (tests use it to hold a pass there).
	OnLocked func()

	mu         sync.Mutex
	failedOpen bool // the last pass could not get the lease: a streak is on
}

// NewPruner returns a Pruner for svc that passes every interval
// (DefaultPruneInterval when zero or less) as owner. log may be nil.
func NewPruner(svc *Service, interval time.Duration, owner string, log *slog.Logger) *Pruner {
	if interval <= 0 {
		interval = DefaultPruneInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pruner{svc: svc, interval: interval, owner: owner, log: log}
}

// leaseTTL is the prune lease's ttl: three intervals, within the model's
// bounds.
func (p *Pruner) leaseTTL() time.Duration {
	return min(max(3*p.interval, MinTTL), MaxTTL).Truncate(time.Millisecond)
}

// Once runs one pass and reports what it did and how many events it
// deleted. The error is the pruning's own failure (or the claim's, when it
// was neither held nor unavailable, e.g. invalid).
//
// The pass is guarded by PruneTask, or, when the store is limited to a
// role's scope (it then sees and prunes only that role's tasks' history),
// by that role's own prune lease (PruneTaskFor).
func (p *Pruner) Once(ctx context.Context) (PruneResult, int64, error) {
	task := PruneTask
	if scope, err := p.svc.Scope(ctx); err == nil {
		task = PruneTaskFor(scope)
	} // else the claim meets the same failure, and the pass fails open
	lease, err := p.svc.Claim(ctx, ClaimParams{Task: task, Owner: p.owner, TTL: p.leaseTTL(), Note: "pruning lease history"})
	switch {
	case errors.Is(err, ErrHeld):
		p.endStreak()
		return PruneSkipped, 0, nil
	case errors.Is(err, ErrUnavailable):
		p.mu.Lock()
		first := !p.failedOpen
		p.failedOpen = true
		p.mu.Unlock()
		if first {
			p.log.Warn("cannot take the prune lease; pruning without it until it can be taken (warned once per streak)",
				"lease", task, "err", err)
		}
		n, perr := p.prune(ctx)
		return PrunedUnguarded, n, perr
	case err != nil:
		return "", 0, err
	}
	p.endStreak()
	defer func() {
		// Released whatever the pruning did; the ttl is the backstop.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultOpTimeout)
		defer cancel()
		if _, err := p.svc.Release(rctx, ReleaseParams{Task: task, Owner: p.owner, Token: lease.Token}); err != nil {
			p.log.Warn("releasing the prune lease", "err", err)
		}
	}()
	if p.OnLocked != nil {
		p.OnLocked()
	}
	n, err := p.prune(ctx)
	return Pruned, n, err
}

// prune runs the pass's work, bounded by one interval and by a third of the
// prune lease's ttl (they differ when the ttl is capped at MaxTTL): well
// inside the lease, and far above the Service's per-operation timeout, which
// a large backlog of history could outlast. It first records the expiries
// nobody recorded (recordExpiries), then prunes; a failure of the first does
// not keep it from the second.
func (p *Pruner) prune(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, min(p.interval, p.leaseTTL()/3))
	defer cancel()
	rerr := p.recordExpiries(ctx)
	n, err := p.svc.PruneHistory(ctx)
	return n, errors.Join(rerr, err)
}

// pruneExpiryLimit is how many expiries one RecordExpiries call of a pass
// records; a pass calls again while calls come back full.
const pruneExpiryLimit = 256

// recordExpiries records "expired", at its expiry, for every lease that ran
// out with nobody releasing or claiming it again and whose end no one
// recorded yet (HistoryFeed.RecordExpiries), so that the history holds the
// end of every lease whether or not a watch was running to sweep it
// (docs/design.md, "Expiries nobody claims"). A store that cannot follow
// its history has nothing to record.
func (p *Pruner) recordExpiries(ctx context.Context) error {
	feed, err := p.svc.HistoryFeed()
	if err != nil {
		return nil
	}
	for {
		sw, err := feed.RecordExpiries(ctx, pruneExpiryLimit)
		if err != nil || sw.Recorded < pruneExpiryLimit {
			return err
		}
	}
}

// endStreak notes that the prune lease answered again.
func (p *Pruner) endStreak() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failedOpen {
		p.failedOpen = false
		p.log.Info("the prune lease answers again", "lease", PruneTask)
	}
}

// Run passes at once and then every interval until ctx ends, logging each
// pass that deleted something or failed.
func (p *Pruner) Run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		result, n, err := p.Once(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			p.log.Warn("pruning lease history failed", "result", string(result), "err", err)
		case n > 0:
			p.log.Info("pruned lease history", "result", string(result), "deleted", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
