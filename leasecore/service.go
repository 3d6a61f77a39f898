package leasecore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Service is the lease API for Go programs: it checks every input rule before
// the store is asked, applies defaults, and guarantees that whatever a driver
// returns reaches the caller as one of the outcomes of the model:
//
//	lease, err := svc.Claim(ctx, leasecore.ClaimParams{Task: "nightly", Owner: me, TTL: time.Minute})
//	switch {
//	case err == nil:                                // acquired: lease is non-nil
//	case errors.Is(err, leasecore.ErrHeld):         // another owner; errors.As gives *HeldError
//	case errors.Is(err, leasecore.ErrUnavailable):  // the store failed; never "held"
//	case errors.Is(err, leasecore.ErrInvalid):      // errors.As gives *ValidationError
//	}
//
// The lease pointer is non-nil exactly when err is nil.
type Service struct {
	store        Store         // called only through s.call and storeCall
	holds        HoldReleaser  // store's, nil when it keeps no minimum holds
	interceptors []Interceptor // outermost first
	opTimeout    time.Duration
	decls        declarations // applied to claims and renewals
}

// DefaultOpTimeout bounds one store operation whose context has no deadline
// of its own, so a hung store answers "unavailable" rather than never.
const DefaultOpTimeout = 5 * time.Second

// Option configures a Service.
type Option func(*Service)

// WithOpTimeout sets the bound for one store operation whose context has no
// deadline (default DefaultOpTimeout); zero or less means no bound.
func WithOpTimeout(d time.Duration) Option { return func(s *Service) { s.opTimeout = d } }

// New returns a Service over store.
func New(store Store, opts ...Option) *Service {
	s := &Service{store: store, opTimeout: DefaultOpTimeout}
	s.holds, _ = store.(HoldReleaser)
	s.decls.copy.MaxAge = DefaultDeclarationsMaxAge
	for _, o := range opts {
		o(s)
	}
	return s
}

// bound applies the operation timeout when ctx has no deadline.
func (s *Service) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || s.opTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opTimeout)
}

// Claim acquires or refreshes a lease; see Store.Claim.
func (s *Service) Claim(ctx context.Context, p ClaimParams) (*Lease, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.TTL = p.TTL.Truncate(time.Millisecond)
	p.MinHold = p.MinHold.Truncate(time.Millisecond)
	if err := s.applyClaimDecl(ctx, p.Task, &p.TTL, &p.MinHold); err != nil {
		return nil, err
	}
	if p.TTL == 0 {
		p.TTL = DefaultTTL
	}
	if p.MinHold != 0 && s.holds == nil {
		return nil, &ValidationError{Field: "MinHold", Rule: "is not kept by this store: it does not implement leasecore.HoldReleaser"}
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := &storeCall{s: s, op: OpClaim, do: doClaim, claim: p}
	if err := c.run(ctx); err != nil {
		return nil, outcome(OpClaim, err, ErrHeld)
	}
	return mustLease(OpClaim, c.lease)
}

// Renew extends the owner's live lease; see Store.Renew.
func (s *Service) Renew(ctx context.Context, p RenewParams) (*Lease, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.TTL = p.TTL.Truncate(time.Millisecond)
	if p.TTL != 0 {
		if err := s.checkRenewDecl(p.Task, p.TTL); err != nil {
			return nil, err
		}
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := &storeCall{s: s, op: OpRenew, do: doRenew, renew: p}
	if err := c.run(ctx); err != nil {
		return nil, outcome(OpRenew, err, ErrLost)
	}
	return mustLease(OpRenew, c.lease)
}

// RenewBatch renews many leases at once, each judged on its own as by
// Renew, and returns one result per element of ps, in order. A lease that
// fails validation gets its *ValidationError and is not sent. With a store
// that is a BatchRenewer the valid renewals go in its few round trips;
// otherwise they are sent as concurrent Renew calls. A batch that fails as
// a whole gives every lease in it the same unavailable error.
func (s *Service) RenewBatch(ctx context.Context, ps []RenewParams) []RenewResult {
	results := make([]RenewResult, len(ps))
	valid := make([]RenewParams, 0, len(ps))
	at := make([]int, 0, len(ps)) // valid[j] is ps[at[j]]
	for i, p := range ps {
		if err := p.Validate(); err != nil {
			results[i].Err = err
			continue
		}
		p.TTL = p.TTL.Truncate(time.Millisecond)
		if p.TTL != 0 {
			if err := s.checkRenewDecl(p.Task, p.TTL); err != nil {
				results[i].Err = err
				continue
			}
		}
		valid = append(valid, p)
		at = append(at, i)
	}
	if len(valid) == 0 {
		return results
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var got []RenewResult
	err := s.call(ctx, OpRenewBatch, func(ctx context.Context) (err error) {
		got, err = renewBatch(ctx, s.store, valid)
		return err
	})
	for j := range valid {
		if err != nil {
			results[at[j]] = RenewResult{Err: outcome("renew", err)}
			continue
		}
		results[at[j]] = renewResult(got[j].Lease, got[j].Err)
	}
	return results
}

// renewBatch renews ps on store: through its BatchRenewer when it has one,
// otherwise with one concurrent Renew call each.
func renewBatch(ctx context.Context, store Store, ps []RenewParams) ([]RenewResult, error) {
	if br, ok := store.(BatchRenewer); ok {
		got, err := br.RenewBatch(ctx, ps)
		if err == nil && len(got) != len(ps) {
			err = fmt.Errorf("driver answered %d of %d renewals", len(got), len(ps))
		}
		return got, err
	}
	results := make([]RenewResult, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			lease, err := store.Renew(ctx, p)
			results[i] = RenewResult{Lease: lease, Err: err}
		})
	}
	wg.Wait()
	return results, nil
}

// renewResult normalises one renewal's answer as Renew does.
func renewResult(lease *Lease, err error) RenewResult {
	if err != nil {
		return RenewResult{Err: outcome("renew", err, ErrLost)}
	}
	lease, err = mustLease("renew", lease)
	return RenewResult{Lease: lease, Err: err}
}

// Release ends the owner's live lease; see Store.Release.
func (s *Service) Release(ctx context.Context, p ReleaseParams) (bool, error) {
	res, err := s.ReleaseHold(ctx, p)
	return res.Released, err
}

// ReleaseHold ends the owner's live lease as Release does, and says until
// when the lease's minimum hold keeps the task from others (HoldReleaser).
func (s *Service) ReleaseHold(ctx context.Context, p ReleaseParams) (ReleaseResult, error) {
	if err := p.Validate(); err != nil {
		return ReleaseResult{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := &storeCall{s: s, op: OpRelease, do: doRelease, release: p}
	if err := c.run(ctx); err != nil {
		return ReleaseResult{}, outcome(OpRelease, err)
	}
	return c.released, nil
}

// RevokedDetail is the detail of the "released" event a revoke records:
// the lease was ended by an operator, not by its owner. The event's
// Credential names the operator's credential.
const RevokedDetail = "revoked by an operator"

// RevokeParams are the inputs of a revoke: an operator's release of
// whoever's lease.
type RevokeParams struct {
	Task string
	// Token, when non-zero, must be the live lease's: only that grant is
	// ended.
	Token int64
	// Credential names the operator's credential, as
	// ReleaseParams.Credential does.
	Credential string
}

// Revoke ends the task's live lease whoever holds it, and returns the
// lease it ended (as it was just before), or nil when there was none, or
// it had another token than p.Token. It reads the live lease and releases
// it as its owner, with its token and RevokedDetail: if the lease changed
// hands in between, the token no longer matches and nothing is released,
// so a revoke never ends a grant it did not see. The holder learns of it
// at its next renewal (lost, not_held).
func (s *Service) Revoke(ctx context.Context, p RevokeParams) (*Lease, error) {
	if err := firstError(ValidateTask(p.Task), validateToken(p.Token), validateActor(p.Credential)); err != nil {
		return nil, err
	}
	lease, err := s.Get(ctx, p.Task)
	if err != nil || lease == nil || (p.Token != 0 && p.Token != lease.Token) {
		return nil, err
	}
	released, err := s.Release(ctx, ReleaseParams{
		Task: p.Task, Owner: lease.Owner, Token: lease.Token, Credential: p.Credential, Detail: RevokedDetail,
	})
	if err != nil || !released {
		return nil, err
	}
	return lease, nil
}

// Get returns the task's live lease, or nil when there is none.
func (s *Service) Get(ctx context.Context, task string) (*Lease, error) {
	if err := ValidateTask(task); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var lease *Lease
	err := s.call(ctx, OpGet, func(ctx context.Context) (err error) {
		lease, err = s.store.Get(ctx, task)
		return err
	})
	if err != nil {
		return nil, outcome(OpGet, err)
	}
	return lease, nil
}

// List returns one page of the live leases, ordered by task (see
// ListParams; ListParams{} is every live lease), and next, the task to
// pass as After for the following page: empty when this page is the last.
func (s *Service) List(ctx context.Context, p ListParams) (leases []Lease, next string, err error) {
	if err := p.Validate(); err != nil {
		return nil, "", err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err = s.call(ctx, OpList, func(ctx context.Context) (err error) {
		leases, err = s.store.List(ctx, p.ask())
		return err
	})
	if err != nil {
		return nil, "", outcome(OpList, err)
	}
	leases, next = page(p, leases, func(l *Lease) string { return l.Task })
	return leases, next, nil
}

// Ping reports whether the store answers and has its schema.
func (s *Service) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.call(ctx, OpPing, s.store.Ping); err != nil {
		return outcome(OpPing, err)
	}
	return nil
}

// Migrate creates or upgrades the store's schema; see Store.Migrate. It is
// not bounded by the operation timeout (a migration may wait for another
// process's), and its error is the driver's, unclassified: a failed
// migration is no outcome of the lease model, and callers tell an
// unreachable store (ErrUnavailable) from one that cannot be used.
func (s *Service) Migrate(ctx context.Context) error {
	return s.call(ctx, OpMigrate, s.store.Migrate)
}

// WriteCounts returns the store's cumulative write counts when it keeps
// them (WriteCounter), and nil otherwise. It reads counters the driver
// keeps in memory and asks the database nothing, so it is no store call
// and passes no interceptor: it answers before the schema is migrated.
func (s *Service) WriteCounts() []WriteCount {
	if wc, ok := s.store.(WriteCounter); ok {
		return wc.WriteCounts()
	}
	return nil
}

// outcome passes through the domain errors an operation may return and turns
// anything else into ErrUnavailable: a driver bug or an unexpected error must
// never reach a caller as "held" or as an unclassified failure. ErrForbidden
// passes for every operation: a store limited to some tasks (a PostgreSQL
// role with a RoleScope) refuses any operation on the others.
func outcome(op string, err error, allowed ...error) error {
	if errors.Is(err, ErrForbidden) {
		return err
	}
	for _, a := range allowed {
		if errors.Is(err, a) {
			return err
		}
	}
	return Unavailable(op, err)
}

func mustLease(op string, lease *Lease) (*Lease, error) {
	if lease == nil {
		return nil, Unavailable(op, fmt.Errorf("driver returned neither a lease nor an error"))
	}
	return lease, nil
}
