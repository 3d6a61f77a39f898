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
		if ic == nil {
			return
		}
		outer := s.intercept
		if outer == nil {
			s.intercept = ic
			return
		}
		s.intercept = func(ctx context.Context, op string, call func(context.Context) error) error {
			return outer(ctx, op, func(ctx context.Context) error { return ic(ctx, op, call) })
		}
	}
}

// call makes one store call through the interceptors. Every use of
// s.store by the Service goes through here (TestEveryStoreCallIsIntercepted
// checks it).
func (s *Service) call(ctx context.Context, op string, call func(context.Context) error) error {
	if s.intercept == nil {
		return call(ctx)
	}
	return s.intercept(ctx, op, call)
}
