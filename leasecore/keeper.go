package leasecore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Renewer is what a Keeper needs of the lease API; *Service has it.
type Renewer interface {
	Renew(ctx context.Context, p RenewParams) (*Lease, error)
	Release(ctx context.Context, p ReleaseParams) (bool, error)
}

// KeeperConfig says how a Keeper holds a lease.
type KeeperConfig struct {
	// TTL requested at every renewal. Zero keeps the TTL of the lease handed
	// to Keep.
	TTL time.Duration
	// RenewEvery is the pause between confirmed renewals. Zero means
	// TTL × 0.4, the seeds' window: two renewals can fail before the lease
	// is in danger.
	RenewEvery time.Duration
	// RetryEvery is the pause after a renewal that failed for a transient
	// reason (the store was unavailable). Zero means RenewEvery / 4.
	RetryEvery time.Duration
	// Lead is how long before each renewal is due the keeper hands it to its
	// Renewer, for a Renewer that may hold a renewal back that long to send
	// it with others (a Coalescer: set Lead to its Window). The renewal then
	// reaches the store no later than RenewEvery after the previous one.
	// Zero for a Renewer that sends at once; it must be less than
	// RenewEvery.
	Lead time.Duration
	// Clock paces renewals and keeps the local deadline. Nil is SystemClock.
	Clock Clock
	// OnRenew, if set, is called after each confirmed renewal, from the
	// keeper's goroutine; it must not block for long.
	OnRenew func(Lease)
	// ClaimSent, when set, is when the claim that acquired the lease was
	// sent, on Clock: the first deadline is then ClaimSent plus the lease's
	// TTLRemaining, which errs early. Zero: the moment Keep is called,
	// which errs late by the claim's answer trip until the first renewal.
	ClaimSent time.Time
	// Credential is the credential the keeper's renewals and its Release
	// act for (RenewParams.Credential, ReleaseParams.Credential), so that
	// the "lost" or "released" event ending the lease names it: a
	// keepalive stream's credential. Empty: none. It must pass
	// ValidateCredential when set.
	Credential string
}

// withDefaults fills zero fields and checks the timing relationships:
// RetryEvery ≤ RenewEvery < TTL, every one of them positive, and
// 0 ≤ Lead < RenewEvery.
func (c KeeperConfig) withDefaults(lease *Lease) (KeeperConfig, error) {
	if c.TTL == 0 {
		c.TTL = lease.TTL
	}
	if err := ValidateTTL(c.TTL); err != nil || c.TTL == 0 {
		return c, fmt.Errorf("keeper: ttl %s: must be between %s and %s", c.TTL, MinTTL, MaxTTL)
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.TTL * 2 / 5
	}
	if c.RenewEvery <= 0 || c.RenewEvery >= c.TTL {
		return c, fmt.Errorf("keeper: renew interval %s must be positive and shorter than the ttl %s", c.RenewEvery, c.TTL)
	}
	if c.RetryEvery == 0 {
		c.RetryEvery = c.RenewEvery / 4
	}
	if c.RetryEvery <= 0 || c.RetryEvery > c.RenewEvery {
		return c, fmt.Errorf("keeper: retry interval %s must be positive and at most the renew interval %s", c.RetryEvery, c.RenewEvery)
	}
	if c.Lead < 0 || c.Lead >= c.RenewEvery {
		return c, fmt.Errorf("keeper: lead %s must be at least zero and less than the renew interval %s", c.Lead, c.RenewEvery)
	}
	if c.Clock == nil {
		c.Clock = SystemClock
	}
	if err := validateActor(c.Credential); err != nil {
		return c, fmt.Errorf("keeper: %w", err)
	}
	return c, nil
}

// ErrLocalDeadline is the cause of a loss when no renewal could be confirmed
// before the keeper's local deadline (the store kept failing, or answered too
// late): the holder must assume the store has handed the task on.
var ErrLocalDeadline = errors.New("no renewal confirmed before the local deadline")

// ErrStopped is the cause of a keeper's context after Stop.
var ErrStopped = errors.New("keeper stopped")

// Keeper holds an acquired lease in the background: it renews it every
// RenewEvery with one renewal in flight at a time, retries transient store
// failures until its local deadline, and on loss cancels its Context and
// reports why.
//
// The local deadline is (send time of the last confirmed renewal + the
// ttl_remaining the store gave in its answer), read from a monotonic clock.
// Once a renewal is confirmed it never trusts a lease longer than the store
// promised it: the store measured ttl_remaining after the request was sent.
// Before that, the deadline is Keep's start plus the claim's ttl_remaining,
// which may be late by the claim's answer trip (docs/design.md, "The keeper:
// holding a lease in the background").
//
// Between renewals a Keeper is a timer and no goroutine, so one process can
// keep tens of thousands of leases (the sidecar's keepalive streams do).
type Keeper struct {
	renewer Renewer
	cfg     KeeperConfig
	every   time.Duration // the pause between handing renewals over: RenewEvery − Lead
	// renewTTL is what each renewal asks for: zero (keep the lease's ttl)
	// unless the config asks for another. A renewal that keeps its ttl is
	// never refused by a max_ttl declared since the claim: a holder in good
	// standing keeps its lease; the next claim gets the new bound.
	renewTTL time.Duration
	task     string
	owner    string
	token    int64

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	mu       sync.Mutex
	lease    Lease
	deadline time.Time
	lost     error
	timer    Timer // the next renewal, while one is scheduled
	inFlight bool  // a renewal is being sent
	ended    bool  // no renewal will be scheduled again
}

// Keep starts keeping lease, which must just have been acquired. The
// returned Keeper's Context is derived from ctx and cancelled when the lease
// is lost, when ctx ends, or by Stop.
func Keep(ctx context.Context, r Renewer, lease *Lease, cfg KeeperConfig) (*Keeper, error) {
	if lease == nil {
		return nil, errors.New("keeper: no lease to keep")
	}
	start := cfg.Clock
	if start == nil {
		start = SystemClock
	}
	// The claim's ttl_remaining was measured by the store before its answer
	// reached us: counted from the claim's send time it errs early. When
	// that is not known, this first deadline may be late by the answer's
	// trip; the first renewal, due long before the deadline, replaces it
	// with one taken from that renewal's send time.
	now := start.Now()
	if !cfg.ClaimSent.IsZero() && cfg.ClaimSent.Before(now) {
		now = cfg.ClaimSent
	}
	cfg, err := cfg.withDefaults(lease)
	if err != nil {
		return nil, err
	}
	kctx, cancel := context.WithCancelCause(ctx)
	k := &Keeper{
		renewer: r, cfg: cfg, every: cfg.RenewEvery - cfg.Lead, renewTTL: cfg.TTL,
		task: lease.Task, owner: lease.Owner, token: lease.Token,
		ctx: kctx, cancel: cancel, done: make(chan struct{}),
		lease: *lease, deadline: now.Add(lease.TTLRemaining),
	}
	if k.renewTTL == lease.TTL {
		k.renewTTL = 0
	}
	k.mu.Lock()
	k.schedule(k.every)
	k.mu.Unlock()
	// Whatever ends the context (a loss, Stop, the parent) ends the keeper.
	context.AfterFunc(kctx, k.end)
	return k, nil
}

// Context is cancelled when the lease is lost (context.Cause says why), when
// the parent context ends, or after Stop.
func (k *Keeper) Context() context.Context { return k.ctx }

// Done is closed when the keeper has ended, for whatever reason, and no
// renewal is in flight any more.
func (k *Keeper) Done() <-chan struct{} { return k.done }

// Err returns the loss, or nil while the lease is held (and after a plain
// Stop). A loss matches ErrLost (*LostError: the store refused the renewal),
// ErrForbidden (the store's role may no longer act on the task: its scope
// changed) or ErrLocalDeadline (no renewal could be confirmed in time).
func (k *Keeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// Lease returns the lease as last confirmed by the store.
func (k *Keeper) Lease() Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

// Deadline returns the local time until which the lease is known to be held.
func (k *Keeper) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline
}

// Stop ends the keeper (cancelling a renewal in flight and the keeper's
// Context, with cause ErrStopped unless the lease was lost first) and waits
// for it, without releasing the lease. It returns the loss, if the lease was
// lost before it stopped.
func (k *Keeper) Stop() error {
	k.cancel(ErrStopped)
	<-k.done
	return k.Err()
}

// Release stops the keeper, waits for it, then releases the lease (owner-
// and token-checked), whether or not it was lost: a lease that was taken
// over is not released, by the store's rules. The release runs with its own
// bounded context, so it happens even when the keeper's parent context has
// ended.
func (k *Keeper) Release() (bool, error) { return k.ReleaseRun(nil) }

// ReleaseRun is Release, telling the store what the job run under the
// lease did (ReleaseParams.Run), which the released event keeps.
func (k *Keeper) ReleaseRun(run *RunOutcome) (bool, error) {
	_ = k.Stop()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.ctx), DefaultOpTimeout)
	defer cancel()
	return k.renewer.Release(ctx, ReleaseParams{Task: k.task, Owner: k.owner, Token: k.token, Credential: k.cfg.Credential, Run: run})
}

// schedule sets the timer for the next renewal in d, never past the
// deadline: when that comes, the lease is lost. k.mu is held.
func (k *Keeper) schedule(d time.Duration) {
	if k.ended {
		return
	}
	if until := k.deadline.Sub(k.cfg.Clock.Now()); d > until {
		d = max(until, 0)
	}
	k.timer = k.cfg.Clock.AfterFunc(d, k.renew)
}

// end runs once the keeper's context is done: no renewal is scheduled again,
// and done closes now, or when the renewal in flight returns.
func (k *Keeper) end() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ended = true
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
	if !k.inFlight {
		k.finish()
	}
}

// finish closes done, once. k.mu is held and k.ended is set.
func (k *Keeper) finish() {
	select {
	case <-k.done:
	default:
		close(k.done)
	}
}

// renew is the timer's call: send one renewal, then decide what follows.
func (k *Keeper) renew() {
	clk := k.cfg.Clock
	k.mu.Lock()
	if k.ended {
		k.mu.Unlock()
		return
	}
	k.timer = nil
	sent := clk.Now()
	deadline := k.deadline
	if !sent.Before(deadline) {
		k.mu.Unlock()
		k.lose(fmt.Errorf("lease on %q: %w", k.task, ErrLocalDeadline))
		return
	}
	k.inFlight = true
	k.mu.Unlock()

	// The renewal may take until the deadline and no longer: an answer
	// after it could not be trusted anyway.
	rctx, cancel := context.WithTimeout(k.ctx, deadline.Sub(sent))
	lease, err := k.renewer.Renew(rctx, RenewParams{Task: k.task, Owner: k.owner, TTL: k.renewTTL, Token: k.token, Credential: k.cfg.Credential})
	cancel()

	k.mu.Lock()
	if k.ended {
		// Stopped (or the parent ended) while the renewal was in flight:
		// its answer no longer matters.
		k.inFlight = false
		k.finish()
		k.mu.Unlock()
		return
	}
	switch {
	case err == nil:
		k.lease = *lease
		k.deadline = sent.Add(lease.TTLRemaining)
		if k.cfg.OnRenew != nil {
			// Still in flight: Stop waits for OnRenew to return.
			k.mu.Unlock()
			k.cfg.OnRenew(*lease)
			k.mu.Lock()
		}
		k.inFlight = false
		if k.ended {
			k.finish()
			break
		}
		// The next renewal is due RenewEvery after this one was handed
		// over: a slow answer shortens the pause instead of stacking
		// renewals.
		k.schedule(k.every - clk.Now().Sub(sent))
	case errors.Is(err, ErrLost), errors.Is(err, ErrInvalid), errors.Is(err, ErrForbidden):
		k.inFlight = false
		k.mu.Unlock()
		k.lose(err)
		return
	default:
		// Transient (unavailable, or our own timeout): try again soon,
		// until the deadline says otherwise.
		k.inFlight = false
		k.schedule(k.cfg.RetryEvery)
	}
	k.mu.Unlock()
}

// lose records the loss and ends the keeper through its context.
func (k *Keeper) lose(err error) {
	k.mu.Lock()
	if k.lost == nil && !k.ended {
		k.lost = err
	}
	k.mu.Unlock()
	k.cancel(err)
}

// BodyOutcome is the outcome of a Go body run under a lease: exit status 0
// when it returned nil, else no exit status and its error (truncated to
// MaxNoteBytes at a rune boundary); the duration in whole milliseconds; lost.
func BodyOutcome(err error, d time.Duration, lost bool) *RunOutcome {
	run := &RunOutcome{ExitCode: 0, Duration: d.Truncate(time.Millisecond), Lost: lost}
	if err != nil {
		run.ExitCode, run.Error = NoExitCode, TruncateText(err.Error())
	}
	return run
}

// TruncateText is s made fit for a note or a run's error: valid UTF-8
// without NUL, at most MaxNoteBytes bytes, cut at a rune boundary.
func TruncateText(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= MaxNoteBytes {
		return s
	}
	cut := MaxNoteBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Run claims p, and if it is acquired runs body while a Keeper holds the
// lease. body's context is cancelled when the lease is lost (context.Cause
// says why). When body returns, the renew loop is stopped and awaited, then
// the lease is released, whatever body returned, with the run's outcome
// (ReleaseParams.Run: exit status 0 when body returned nil, else its error;
// its duration; whether the lease was lost), which the history keeps.
//
// ran reports whether body ran. A held task is (false, nil): somebody else
// is doing the job. An unavailable store or invalid input is (false, err).
// When body ran, err is body's error, or the loss if body succeeded after
// the lease was lost (its work may have overlapped another holder's).
//
// The claim, the renewals and the release all act for p.Credential:
// cfg.Credential must be empty or the same (the first is checked before
// anything is claimed).
func Run(ctx context.Context, svc *Service, p ClaimParams, cfg KeeperConfig, body func(ctx context.Context) error) (ran bool, err error) {
	switch cfg.Credential {
	case "":
		cfg.Credential = p.Credential
	case p.Credential:
	default:
		return false, fmt.Errorf("keeper: credential %q differs from the claim's %q: Run acts for one credential", cfg.Credential, p.Credential)
	}
	lease, err := svc.Claim(ctx, p)
	if errors.Is(err, ErrHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	k, err := Keep(ctx, svc, lease, cfg)
	if err != nil {
		// Give back what we just took; the configuration was at fault.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultOpTimeout)
		defer cancel()
		_, _ = svc.Release(rctx, ReleaseParams{Task: lease.Task, Owner: lease.Owner, Token: lease.Token, Credential: p.Credential})
		return false, err
	}
	start := time.Now()
	bodyErr := body(k.Context())
	lost := k.Stop()
	_, _ = k.ReleaseRun(BodyOutcome(bodyErr, time.Since(start), lost != nil)) // the TTL is the backstop for a release that fails
	if bodyErr != nil {
		return true, bodyErr
	}
	return true, lost
}
