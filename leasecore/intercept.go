package leasecore

import "context"

// Interceptor is the one chokepoint of a Service's store calls: every call
// a Service makes to its Store passes through the Service's interceptors
// (WithInterceptor), so a program adds a gate, timing or tracing to all of
// them in one place, including store methods added later.
//
// op names the store operation (one of the Op constants). call makes the
// store call and returns the driver's error as the driver returned it,
// before the Service classifies it; its results reach the Service, not the
// interceptor. An interceptor calls call at most once, with ctx or a
// context derived from it, and returns its error, or an error of its own
// that wraps it (to add a remedy, say); or it returns an error of its own
// without calling it, and the store is not asked. An error that is not a
// model outcome reaches the Service's caller as ErrUnavailable.
type Interceptor func(ctx context.Context, op string, call func(context.Context) error) error

// The operations an Interceptor is told about: one per Store method a
// Service calls (Close is never called by a Service: whoever opened the
// store closes it). Service.RenewBatch is one OpRenewBatch, whether the
// store renews the batch itself (BatchRenewer) or one Renew per lease.
const (
	OpClaim        = "claim"
	OpRenew        = "renew"
	OpRenewBatch   = "renew_batch"
	OpRelease      = "release"
	OpGet          = "get"
	OpList         = "list"
	OpPing         = "ping"
	OpMigrate      = "migrate"
	OpCreateTask   = "create_task"
	OpUpdateTask   = "update_task"
	OpGetTask      = "get_task"
	OpListTasks    = "list_tasks" // also the Service's loads of the declarations it applies
	OpDeleteTask   = "delete_task"
	OpCreatePolicy = "create_policy"
	OpUpdatePolicy = "update_policy"
	OpGetPolicy    = "get_policy"
	OpListPolicies = "list_policies"
	OpDeletePolicy = "delete_policy"
	OpHistory      = "history"
	OpPrune        = "prune"
)

// WithInterceptor adds ic to the Service's interceptors. The first one
// added is the outermost: it sees a call first, and its error last.
func WithInterceptor(ic Interceptor) Option {
	return func(s *Service) {
		if ic != nil {
			s.interceptors = append(s.interceptors, ic)
		}
	}
}

// storeCall is one store call on its way through the interceptors: the
// function each interceptor is handed as call is the frame's next, bound
// once per call, so that a call costs the same two allocations however many
// interceptors it passes (nested closures would cost one per interceptor,
// and a closure over the caller's variables one more per variable).
type storeCall struct {
	s    *Service
	op   string
	i    int                                           // the interceptor next runs
	do   func(c *storeCall, ctx context.Context) error // the store call itself
	next func(context.Context) error                   // c.advance

	fn func(context.Context) error // the store call, for Service.call

	// The hot operations' arguments and results (see doClaim), held here
	// rather than captured by a closure.
	claim    ClaimParams
	renew    RenewParams
	release  ReleaseParams
	lease    *Lease
	released ReleaseResult
}

// advance runs the next interceptor, or the store call after the last.
func (c *storeCall) advance(ctx context.Context) error {
	if c.i == len(c.s.interceptors) {
		return c.do(c, ctx)
	}
	ic := c.s.interceptors[c.i]
	c.i++
	return ic(ctx, c.op, c.next)
}

// run makes the frame's store call through the interceptors.
func (c *storeCall) run(ctx context.Context) error {
	if len(c.s.interceptors) == 0 {
		return c.do(c, ctx)
	}
	c.next = c.advance
	return c.advance(ctx)
}

// call makes one store call through the interceptors. Every use of
// s.store by the Service goes through here or through a storeCall's do
// (TestEveryStoreCallIsIntercepted checks it).
func (s *Service) call(ctx context.Context, op string, call func(context.Context) error) error {
	c := &storeCall{s: s, op: op, do: doFn, fn: call}
	return c.run(ctx)
}

func doFn(c *storeCall, ctx context.Context) error { return c.fn(ctx) }

// The store calls of the hot operations, made without a closure.

func doClaim(c *storeCall, ctx context.Context) (err error) {
	c.lease, err = c.s.store.Claim(ctx, c.claim)
	return err
}

func doRenew(c *storeCall, ctx context.Context) (err error) {
	c.lease, err = c.s.store.Renew(ctx, c.renew)
	return err
}

func doRelease(c *storeCall, ctx context.Context) (err error) {
	if c.s.holds != nil {
		c.released, err = c.s.holds.ReleaseHold(ctx, c.release)
		return err
	}
	c.released.Released, err = c.s.store.Release(ctx, c.release)
	return err
}
