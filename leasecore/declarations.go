package leasecore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/leasecore/internal/snapcache"
)

// DefaultDeclarationsMaxAge is how stale the declarations a Service applies
// to claims may be: a declaration created, changed or deleted by another
// process (Terraform, another sidecar) is honoured by every claim that
// starts at least this long after the change was committed.
const DefaultDeclarationsMaxAge = 5 * time.Second

// WithDeclarations sets how the Service applies task declarations. Claims
// get the declared ttl when they give none and are bounded by max_ttl, from
// a copy of the declarations no older than maxAge (DefaultDeclarationsMaxAge
// when zero or less); renewals that change the ttl are bounded by max_ttl
// from the copy in hand. With require, a claim of an undeclared task is
// refused with *UndeclaredError (tasks under ReservedPrefix excepted).
func WithDeclarations(maxAge time.Duration, require bool) Option {
	return func(s *Service) {
		if maxAge <= 0 {
			maxAge = DefaultDeclarationsMaxAge
		}
		s.decls.copy.MaxAge = maxAge
		s.decls.require = require
	}
}

// declarations is a Service's cached copy of the store's task declarations.
// Claims read it without a round trip; when the copy is older than maxAge,
// the first claim to notice reloads it with one ListTasks and the claims
// arriving meanwhile wait for that load and use its result, so no claim
// applies a copy older than maxAge, counted from when its load was sent
// (snapcache).
type declarations struct {
	copy    snapcache.Cache[map[string]*TaskDecl] // never changed once loaded
	require bool
}

// invalidate marks the copy stale after this Service changed a declaration
// itself: claims that start afterwards load a fresh one, and a load already
// in flight (which may have read the store before the change) is neither
// kept nor joined. Renewals keep bounding ttls by the stale copy until then.
func (d *declarations) invalidate() { d.copy.Invalidate(true) }

// lookupDecl returns the task's declaration (nil when undeclared), reloading
// the copy when it is too old. The caller must not change it: it is the
// copy's own.
func (s *Service) lookupDecl(ctx context.Context, op, task string) (*TaskDecl, error) {
	tasks, err := s.decls.copy.Get(ctx, s.loadDecls)
	if err != nil {
		return nil, Unavailable(op, err)
	}
	return tasks[task], nil
}

// loadDecls reads every declaration, for the copy.
func (s *Service) loadDecls(ctx context.Context) (map[string]*TaskDecl, error) {
	ctx, cancel := context.WithTimeout(ctx, s.loadTimeout())
	defer cancel()
	var list []TaskDecl
	err := s.call(ctx, OpListTasks, func(ctx context.Context) (err error) {
		list, err = s.store.ListTasks(ctx, ListParams{}) // every declaration: the copy is the whole catalog
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read task declarations: %w", err)
	}
	tasks := make(map[string]*TaskDecl, len(list))
	for i := range list {
		tasks[list[i].Name] = &list[i]
	}
	return tasks, nil
}

func (s *Service) loadTimeout() time.Duration {
	if s.opTimeout > 0 {
		return s.opTimeout
	}
	return DefaultOpTimeout
}

// ReservedPrefix starts the names of leasehold's own tasks (PruneTask).
// They may be claimed without a declaration even where declarations are
// required.
const ReservedPrefix = "leasehold:"

// IsReserved reports whether task is one of leasehold's own (ReservedPrefix).
func IsReserved(task string) bool { return strings.HasPrefix(task, ReservedPrefix) }

// ErrReserved: a client asked to claim, renew, release or keep alive one of
// leasehold's own tasks. The matching *ReservedError names the task.
var ErrReserved = errors.New("reserved task")

// ReservedError refuses a client's write of one of leasehold's own tasks:
// a client holding leasehold:prune would stop pruning for the whole fleet.
// A Service does not refuse them, since leasehold's own code (the pruner)
// claims them through one; the places where clients' requests enter (the
// sidecar's handlers, leasehold run) call CheckClientTask. Reads (get,
// history, declarations) stay open to clients.
type ReservedError struct{ Task string }

func (e *ReservedError) Error() string {
	return fmt.Sprintf("task %q is reserved: names starting %q are leasehold's own (such as the pruner's lease %s); "+
		"clients may read them but not claim, renew, release or keep them alive", e.Task, ReservedPrefix, PruneTask)
}

// Unwrap makes errors.Is(err, ErrReserved) true.
func (e *ReservedError) Unwrap() error { return ErrReserved }

// ReservedRule is the rule a reserved task breaks, as a problem's
// invalid_params states it.
var ReservedRule = fmt.Sprintf("must not start with %q: those tasks are leasehold's own", ReservedPrefix)

// CheckClientTask returns a *ReservedError when a client may not write task
// (claim, renew, release, keepalive), and nil otherwise. It does not check
// the name rule: Validate does.
func CheckClientTask(task string) error {
	if IsReserved(task) {
		return &ReservedError{Task: task}
	}
	return nil
}

// applyClaimDecl applies the task's declaration to a claim: the declared
// ttl when none is given, the declared minimum hold when none is given,
// the declared max_ttl as a bound, and, where
// declarations are required, a refusal of an undeclared task. It reloads
// the copy of the declarations when it is older than the staleness bound.
// leasehold's own tasks (ReservedPrefix) take their ttls from leasehold,
// not from declarations, which cannot stop the pruner from taking its lease;
// a declaration of one sets only its retention policy.
func (s *Service) applyClaimDecl(ctx context.Context, task string, ttl, minHold *time.Duration) error {
	if IsReserved(task) {
		return nil
	}
	decl, err := s.lookupDecl(ctx, "claim", task)
	if err != nil {
		return err
	}
	if decl == nil {
		if s.decls.require {
			return &UndeclaredError{Task: task}
		}
		return nil
	}
	if *ttl == 0 {
		*ttl = decl.TTL
	}
	if *minHold == 0 {
		*minHold = decl.MinHold
	}
	return checkMaxTTL(decl, task, *ttl)
}

// checkRenewDecl bounds a renewal's new ttl by the task's declared max_ttl,
// as the copy of the declarations in hand has it, however old. A renewal
// never reads declarations from the store: it must not wait for, or fail
// on, anything but its own statement (a keeper's renewals ride out a store
// outage on that alone). Claims keep the copy fresh.
func (s *Service) checkRenewDecl(task string, ttl time.Duration) error {
	if IsReserved(task) {
		return nil
	}
	tasks, _ := s.decls.copy.Latest()
	if decl := tasks[task]; decl != nil {
		return checkMaxTTL(decl, task, ttl)
	}
	return nil
}

func checkMaxTTL(decl *TaskDecl, task string, ttl time.Duration) error {
	if decl.MaxTTL != 0 && ttl > decl.MaxTTL {
		return &ValidationError{Field: "TTL", Rule: fmt.Sprintf("must be at most %d, the max_ttl of task %q", decl.MaxTTL.Milliseconds(), task)}
	}
	return nil
}

// Outcomes a catalog write may return besides success.
var catalogOutcomes = []error{ErrNotFound, ErrExists, ErrInUse, ErrManaged}

// CreateTask declares a task, managed by w; see CatalogStore.CreateTask.
func (s *Service) CreateTask(ctx context.Context, d TaskDecl, w Writer) (*TaskDecl, error) {
	return s.putTask(ctx, OpCreateTask, d, w, s.store.CreateTask)
}

// UpdateTask replaces a task's declaration, refused with *ManagedError
// when w may not change it; see CatalogStore.UpdateTask.
func (s *Service) UpdateTask(ctx context.Context, d TaskDecl, w Writer) (*TaskDecl, error) {
	return s.putTask(ctx, OpUpdateTask, d, w, s.store.UpdateTask)
}

// DeclareTask creates the declaration, or replaces it when the task is
// declared already (as UpdateTask, and refused as it is), and reports
// whether it created it.
func (s *Service) DeclareTask(ctx context.Context, d TaskDecl, w Writer) (*TaskDecl, bool, error) {
	// Update first: a declaration is changed more often than it is made.
	// A create that finds the name taken (declared meanwhile) updates once
	// more; a second miss is an answer, not a loop.
	got, err := s.UpdateTask(ctx, d, w)
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.Kind != "task" {
		return got, false, err
	}
	got, err = s.CreateTask(ctx, d, w)
	if errors.Is(err, ErrExists) {
		got, err = s.UpdateTask(ctx, d, w)
		return got, false, err
	}
	return got, err == nil, err
}

func (s *Service) putTask(ctx context.Context, op string, d TaskDecl, w Writer, put func(context.Context, TaskDecl, Writer) (*TaskDecl, error)) (*TaskDecl, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out *TaskDecl
	err := s.call(ctx, op, func(ctx context.Context) (err error) {
		out, err = put(ctx, d, w)
		return err
	})
	s.decls.invalidate()
	if err != nil {
		return nil, outcome(op, err, catalogOutcomes...)
	}
	if out == nil {
		return nil, Unavailable(op, errors.New("driver returned neither a declaration nor an error"))
	}
	return out, nil
}

// GetTask returns a task's declaration, or nil when it is not declared.
func (s *Service) GetTask(ctx context.Context, name string) (*TaskDecl, error) {
	if err := ValidateTask(name); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var d *TaskDecl
	err := s.call(ctx, OpGetTask, func(ctx context.Context) (err error) {
		d, err = s.store.GetTask(ctx, name)
		return err
	})
	if err != nil {
		return nil, outcome(OpGetTask, err)
	}
	return d, nil
}

// ListTasks returns one page of the declarations, ordered by name (see
// ListParams; ListParams{} is every declaration), and next, the name to
// pass as After for the following page: empty when this page is the last.
func (s *Service) ListTasks(ctx context.Context, p ListParams) (decls []TaskDecl, next string, err error) {
	if err := p.Validate(); err != nil {
		return nil, "", err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err = s.call(ctx, OpListTasks, func(ctx context.Context) (err error) {
		decls, err = s.store.ListTasks(ctx, p.ask())
		return err
	})
	if err != nil {
		return nil, "", outcome(OpListTasks, err)
	}
	decls, next = page(p, decls, func(d *TaskDecl) string { return d.Name })
	return decls, next, nil
}

// DeleteTask removes a declaration and reports whether there was one;
// *ManagedError when w may not remove it.
func (s *Service) DeleteTask(ctx context.Context, name string, w Writer) (bool, error) {
	if err := ValidateTask(name); err != nil {
		return false, err
	}
	if err := w.Validate(); err != nil {
		return false, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var ok bool
	err := s.call(ctx, OpDeleteTask, func(ctx context.Context) (err error) {
		ok, err = s.store.DeleteTask(ctx, name, w)
		return err
	})
	s.decls.invalidate()
	if err != nil {
		return false, outcome(OpDeleteTask, err, ErrManaged)
	}
	return ok, nil
}

// CreatePolicy stores a new retention policy, managed by w; see
// CatalogStore.
func (s *Service) CreatePolicy(ctx context.Context, p RetentionPolicy, w Writer) (*RetentionPolicy, error) {
	return s.putPolicy(ctx, OpCreatePolicy, p, w, s.store.CreatePolicy)
}

// UpdatePolicy replaces a retention policy, refused with *ManagedError when
// w may not change it; see CatalogStore.
func (s *Service) UpdatePolicy(ctx context.Context, p RetentionPolicy, w Writer) (*RetentionPolicy, error) {
	return s.putPolicy(ctx, OpUpdatePolicy, p, w, s.store.UpdatePolicy)
}

// DeclarePolicy creates the policy, or replaces it when it exists (as
// UpdatePolicy, and refused as it is), and reports whether it created it.
func (s *Service) DeclarePolicy(ctx context.Context, p RetentionPolicy, w Writer) (*RetentionPolicy, bool, error) {
	got, err := s.UpdatePolicy(ctx, p, w)
	if !errors.Is(err, ErrNotFound) {
		return got, false, err
	}
	got, err = s.CreatePolicy(ctx, p, w)
	if errors.Is(err, ErrExists) {
		got, err = s.UpdatePolicy(ctx, p, w)
		return got, false, err
	}
	return got, err == nil, err
}

func (s *Service) putPolicy(ctx context.Context, op string, p RetentionPolicy, w Writer, put func(context.Context, RetentionPolicy, Writer) (*RetentionPolicy, error)) (*RetentionPolicy, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out *RetentionPolicy
	err := s.call(ctx, op, func(ctx context.Context) (err error) {
		out, err = put(ctx, p, w)
		return err
	})
	if err != nil {
		return nil, outcome(op, err, catalogOutcomes...)
	}
	if out == nil {
		return nil, Unavailable(op, errors.New("driver returned neither a policy nor an error"))
	}
	return out, nil
}

// GetPolicy returns a retention policy, or nil when there is none.
func (s *Service) GetPolicy(ctx context.Context, name string) (*RetentionPolicy, error) {
	if err := ValidatePolicyName("Name", name); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var p *RetentionPolicy
	err := s.call(ctx, OpGetPolicy, func(ctx context.Context) (err error) {
		p, err = s.store.GetPolicy(ctx, name)
		return err
	})
	if err != nil {
		return nil, outcome(OpGetPolicy, err)
	}
	return p, nil
}

// ListPolicies returns every retention policy, ordered by name.
func (s *Service) ListPolicies(ctx context.Context) ([]RetentionPolicy, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var ps []RetentionPolicy
	err := s.call(ctx, OpListPolicies, func(ctx context.Context) (err error) {
		ps, err = s.store.ListPolicies(ctx)
		return err
	})
	if err != nil {
		return nil, outcome(OpListPolicies, err)
	}
	return ps, nil
}

// DeletePolicy removes a retention policy and reports whether there was
// one; *InUseError when it is the default or tasks name it, *ManagedError
// when w may not remove it.
func (s *Service) DeletePolicy(ctx context.Context, name string, w Writer) (bool, error) {
	if err := ValidatePolicyName("Name", name); err != nil {
		return false, err
	}
	if err := w.Validate(); err != nil {
		return false, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var ok bool
	err := s.call(ctx, OpDeletePolicy, func(ctx context.Context) (err error) {
		ok, err = s.store.DeletePolicy(ctx, name, w)
		return err
	})
	if err != nil {
		return false, outcome(OpDeletePolicy, err, ErrInUse, ErrManaged)
	}
	return ok, nil
}

// History returns the task's newest events, newest first, at most limit.
func (s *Service) History(ctx context.Context, task string, limit int) ([]Event, error) {
	if err := ValidateTask(task); err != nil {
		return nil, err
	}
	if err := ValidateHistoryLimit(limit); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var evs []Event
	err := s.call(ctx, OpHistory, func(ctx context.Context) (err error) {
		evs, err = s.store.History(ctx, task, limit)
		return err
	})
	if err != nil {
		return nil, outcome(OpHistory, err)
	}
	return evs, nil
}

// PruneHistory runs one pruning pass; see CatalogStore.PruneHistory. It is
// not guarded by the prune lease: Pruner is.
func (s *Service) PruneHistory(ctx context.Context) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int64
	err := s.call(ctx, OpPrune, func(ctx context.Context) (err error) {
		n, err = s.store.PruneHistory(ctx)
		return err
	})
	if err != nil {
		return 0, outcome(OpPrune, err)
	}
	return n, nil
}
