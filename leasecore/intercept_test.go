package leasecore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/watch"
)

// interceptedKey marks, in a store call's context, the operation an
// interceptor let through: the recording store reads it to tell a call that
// passed the chokepoint from one that did not.
type interceptedKey struct{}

// reach is one store method reached, and the operation whose interceptor
// passed the call on ("" when none did).
type reach struct{ method, op string }

// recordingStore answers every Store method with a plausible result and
// records which method was reached, and through which interceptor call. It
// spells out every method (no embedded Store), so a method added to Store
// does not compile here until it is added, and TestEveryStoreCallIsIntercepted
// then requires a Service call that reaches it.
type recordingStore struct {
	mu      sync.Mutex
	reached []reach
}

func (r *recordingStore) reach(ctx context.Context, method string) {
	op, _ := ctx.Value(interceptedKey{}).(string)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reached = append(r.reached, reach{method, op})
}

func (r *recordingStore) take() []reach {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.reached
	r.reached = nil
	return got
}

func testLease(task, owner string) *leasecore.Lease {
	now := time.Now()
	return &leasecore.Lease{Task: task, Owner: owner, Token: 1, AcquiredAt: now, RenewedAt: now,
		ExpiresAt: now.Add(time.Minute), TTL: time.Minute, TTLRemaining: time.Minute}
}

func (r *recordingStore) Claim(ctx context.Context, p leasecore.ClaimParams) (*leasecore.Lease, error) {
	r.reach(ctx, "Claim")
	return testLease(p.Task, p.Owner), nil
}

func (r *recordingStore) Renew(ctx context.Context, p leasecore.RenewParams) (*leasecore.Lease, error) {
	r.reach(ctx, "Renew")
	return testLease(p.Task, p.Owner), nil
}

func (r *recordingStore) Release(ctx context.Context, _ leasecore.ReleaseParams) (bool, error) {
	r.reach(ctx, "Release")
	return true, nil
}

func (r *recordingStore) Get(ctx context.Context, task string) (*leasecore.Lease, error) {
	r.reach(ctx, "Get")
	return testLease(task, "a"), nil
}

func (r *recordingStore) List(ctx context.Context, _ leasecore.ListParams) ([]leasecore.Lease, error) {
	r.reach(ctx, "List")
	return nil, nil
}

func (r *recordingStore) Ping(ctx context.Context) error {
	r.reach(ctx, "Ping")
	return nil
}

func (r *recordingStore) Migrate(ctx context.Context) error {
	r.reach(ctx, "Migrate")
	return nil
}

func (r *recordingStore) Close() error { return nil }

func (r *recordingStore) CreateTask(ctx context.Context, d leasecore.TaskDecl, _ leasecore.Writer) (*leasecore.TaskDecl, error) {
	r.reach(ctx, "CreateTask")
	return &d, nil
}

func (r *recordingStore) UpdateTask(ctx context.Context, d leasecore.TaskDecl, _ leasecore.Writer) (*leasecore.TaskDecl, error) {
	r.reach(ctx, "UpdateTask")
	return &d, nil
}

func (r *recordingStore) GetTask(ctx context.Context, _ string) (*leasecore.TaskDecl, error) {
	r.reach(ctx, "GetTask")
	return nil, nil
}

func (r *recordingStore) ListTasks(ctx context.Context, _ leasecore.ListParams) ([]leasecore.TaskDecl, error) {
	r.reach(ctx, "ListTasks")
	return nil, nil
}

func (r *recordingStore) DeleteTask(ctx context.Context, _ string, _ leasecore.Writer) (bool, error) {
	r.reach(ctx, "DeleteTask")
	return true, nil
}

func (r *recordingStore) CreatePolicy(ctx context.Context, p leasecore.RetentionPolicy, _ leasecore.Writer) (*leasecore.RetentionPolicy, error) {
	r.reach(ctx, "CreatePolicy")
	return &p, nil
}

func (r *recordingStore) UpdatePolicy(ctx context.Context, p leasecore.RetentionPolicy, _ leasecore.Writer) (*leasecore.RetentionPolicy, error) {
	r.reach(ctx, "UpdatePolicy")
	return &p, nil
}

func (r *recordingStore) GetPolicy(ctx context.Context, _ string) (*leasecore.RetentionPolicy, error) {
	r.reach(ctx, "GetPolicy")
	return nil, nil
}

func (r *recordingStore) ListPolicies(ctx context.Context) ([]leasecore.RetentionPolicy, error) {
	r.reach(ctx, "ListPolicies")
	return nil, nil
}

func (r *recordingStore) DeletePolicy(ctx context.Context, _ string, _ leasecore.Writer) (bool, error) {
	r.reach(ctx, "DeletePolicy")
	return true, nil
}

func (r *recordingStore) History(ctx context.Context, _ string, _ int) ([]leasecore.Event, error) {
	r.reach(ctx, "History")
	return nil, nil
}

func (r *recordingStore) PruneHistory(ctx context.Context) (int64, error) {
	r.reach(ctx, "PruneHistory")
	return 0, nil
}

// batchRecordingStore is a recordingStore that is a BatchRenewer and a
// WriteCounter.
type batchRecordingStore struct {
	recordingStore
	swept     chan struct{}
	sweptOnce sync.Once
}

func (r *batchRecordingStore) RenewBatch(ctx context.Context, ps []leasecore.RenewParams) ([]leasecore.RenewResult, error) {
	r.reach(ctx, "RenewBatch")
	rs := make([]leasecore.RenewResult, len(ps))
	for i, p := range ps {
		rs[i].Lease = testLease(p.Task, p.Owner)
	}
	return rs, nil
}

// The batch recording store is also a HistoryFeed, with one event.

// sweptKey's value in the Watch call's context is the store's swept
// channel, closed by the first RecordExpiries, which the watch's hub makes
// in a goroutine of its own: the call waits for it.
type sweptKey struct{}

func (r *batchRecordingStore) FollowHistory(ctx context.Context, after int64) (leasecore.HistoryCursor, error) {
	r.reach(ctx, "FollowHistory")
	return &recordingCursor{r: &r.recordingStore, pos: max(after, 0)}, nil
}

// HistoryChanges is a signal that lasts as long as the watch, not a store
// operation: it is not intercepted (see storeMethodOps).
func (r *batchRecordingStore) HistoryChanges(ctx context.Context, _ time.Duration) (<-chan struct{}, error) {
	ch := make(chan struct{})
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

func (r *batchRecordingStore) RecordExpiries(ctx context.Context, _ int) (leasecore.ExpirySweep, error) {
	r.reach(ctx, "RecordExpiries")
	r.sweptOnce.Do(func() { close(r.swept) })
	return leasecore.ExpirySweep{}, nil
}

type recordingCursor struct {
	r   *recordingStore
	pos int64
}

func (c *recordingCursor) Next(ctx context.Context, _ int) ([]leasecore.Event, error) {
	c.r.reach(ctx, "Next")
	if c.pos >= 1 {
		return nil, nil
	}
	c.pos = 1
	return []leasecore.Event{{ID: 1, Task: "t", Kind: leasecore.EventAcquired, Owner: "a", Token: 1}}, nil
}

func (c *recordingCursor) Position() int64 { return c.pos }
func (c *recordingCursor) Pending() bool   { return false }
func (c *recordingCursor) Close() error    { return nil }

// The batch recording store is also a RoleScopeStore.

func (r *batchRecordingStore) CreateRoleScope(ctx context.Context, rs leasecore.RoleScope) (*leasecore.RoleScope, error) {
	r.reach(ctx, "CreateRoleScope")
	return &rs, nil
}

func (r *batchRecordingStore) UpdateRoleScope(ctx context.Context, rs leasecore.RoleScope) (*leasecore.RoleScope, error) {
	r.reach(ctx, "UpdateRoleScope")
	return &rs, nil
}

func (r *batchRecordingStore) GetRoleScope(ctx context.Context, _ string) (*leasecore.RoleScope, error) {
	r.reach(ctx, "GetRoleScope")
	return nil, nil
}

func (r *batchRecordingStore) DeleteRoleScope(ctx context.Context, _ string) (bool, error) {
	r.reach(ctx, "DeleteRoleScope")
	return true, nil
}

func (r *batchRecordingStore) Scope(ctx context.Context) (leasecore.Scope, error) {
	r.reach(ctx, "Scope")
	return leasecore.Scope{Role: "r"}, nil
}

func (r *batchRecordingStore) WriteCounts() []leasecore.WriteCount {
	return []leasecore.WriteCount{{Op: "claim", Statements: 1, Operations: 2}}
}

// serviceCalls calls each exported method of *leasecore.Service once, with
// valid input. A method missing here fails TestEveryStoreCallIsIntercepted.
var serviceCalls = map[string]func(ctx context.Context, svc *leasecore.Service) error{
	"Claim": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "a"})
		return err
	},
	"Renew": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.Renew(ctx, leasecore.RenewParams{Task: "t", Owner: "a"})
		return err
	},
	"RenewBatch": func(ctx context.Context, svc *leasecore.Service) error {
		rs := svc.RenewBatch(ctx, []leasecore.RenewParams{{Task: "t", Owner: "a"}, {Task: "u", Owner: "a"}})
		return errors.Join(rs[0].Err, rs[1].Err)
	},
	"Release": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.Release(ctx, leasecore.ReleaseParams{Task: "t", Owner: "a"})
		return err
	},
	"ReleaseHold": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.ReleaseHold(ctx, leasecore.ReleaseParams{Task: "t", Owner: "a"})
		return err
	},
	"Revoke": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.Revoke(ctx, leasecore.RevokeParams{Task: "t", Credential: "ops"})
		return err
	},
	"Get": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.Get(ctx, "t")
		return err
	},
	"List": func(ctx context.Context, svc *leasecore.Service) error {
		_, _, err := svc.List(ctx, leasecore.ListParams{Limit: 10})
		return err
	},
	"Ping":    func(ctx context.Context, svc *leasecore.Service) error { return svc.Ping(ctx) },
	"Migrate": func(ctx context.Context, svc *leasecore.Service) error { return svc.Migrate(ctx) },
	"CreateTask": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.CreateTask(ctx, leasecore.TaskDecl{Name: "t", TTL: time.Minute}, leasecore.Writer{})
		return err
	},
	"UpdateTask": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.UpdateTask(ctx, leasecore.TaskDecl{Name: "t", TTL: time.Minute}, leasecore.Writer{})
		return err
	},
	"DeclareTask": func(ctx context.Context, svc *leasecore.Service) error {
		_, _, err := svc.DeclareTask(ctx, leasecore.TaskDecl{Name: "t", TTL: time.Minute}, leasecore.Writer{})
		return err
	},
	"GetTask": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.GetTask(ctx, "t")
		return err
	},
	"ListTasks": func(ctx context.Context, svc *leasecore.Service) error {
		_, _, err := svc.ListTasks(ctx, leasecore.ListParams{})
		return err
	},
	"DeleteTask": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.DeleteTask(ctx, "t", leasecore.Writer{})
		return err
	},
	"CreatePolicy": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.CreatePolicy(ctx, leasecore.RetentionPolicy{Name: "p", KeepLast: 1}, leasecore.Writer{})
		return err
	},
	"UpdatePolicy": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.UpdatePolicy(ctx, leasecore.RetentionPolicy{Name: "p", KeepLast: 1}, leasecore.Writer{})
		return err
	},
	"DeclarePolicy": func(ctx context.Context, svc *leasecore.Service) error {
		_, _, err := svc.DeclarePolicy(ctx, leasecore.RetentionPolicy{Name: "p", KeepLast: 1}, leasecore.Writer{})
		return err
	},
	"GetPolicy": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.GetPolicy(ctx, "p")
		return err
	},
	"ListPolicies": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.ListPolicies(ctx)
		return err
	},
	"DeletePolicy": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.DeletePolicy(ctx, "p", leasecore.Writer{})
		return err
	},
	"History": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.History(ctx, "t", 10)
		return err
	},
	"PruneHistory": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.PruneHistory(ctx)
		return err
	},
	// The watch (package watch) over the Service's HistoryFeed, from the
	// start: the watcher's catch-up reads with a cursor of its own, and the
	// hub follows and sweeps.
	"HistoryFeed": func(ctx context.Context, svc *leasecore.Service) error {
		w, err := watch.New(svc).Watch(ctx, watch.Params{Since: 0})
		if err != nil {
			return err
		}
		defer w.Close()
		// Event 1 comes replayed (before the ready mark) or live (after
		// it), as the hub's position was when the watch began.
		for ready, got := false, false; !ready || !got; {
			it := <-w.Items()
			switch {
			case it.Ready:
				ready = true
			case it.Event.ID != 1:
				return fmt.Errorf("watch sent %+v, want event 1", it)
			default:
				got = true
			}
		}
		select {
		case <-ctx.Value(sweptKey{}).(chan struct{}):
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("the watch's hub never swept expiries")
		}
	},
	// The role scopes: the plain recording store has no roles, and
	// answers NoRolesError without a store call; Scope is unrestricted.
	"CreateRoleScope": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.CreateRoleScope(ctx, leasecore.RoleScope{Role: "r", Prefixes: []string{"p/"}})
		return noRolesOK(err)
	},
	"UpdateRoleScope": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.UpdateRoleScope(ctx, leasecore.RoleScope{Role: "r", Prefixes: []string{"p/"}})
		return noRolesOK(err)
	},
	"GetRoleScope": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.GetRoleScope(ctx, "r")
		return noRolesOK(err)
	},
	"DeleteRoleScope": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.DeleteRoleScope(ctx, "r")
		return noRolesOK(err)
	},
	"Scope": func(ctx context.Context, svc *leasecore.Service) error {
		_, err := svc.Scope(ctx)
		return err
	},
	// WriteCounts reads the driver's counters in memory: no store call.
	"WriteCounts": func(_ context.Context, svc *leasecore.Service) error {
		if len(svc.WriteCounts()) == 0 {
			return errors.New("no write counts")
		}
		return nil
	},
}

// noRolesOK is err, except the NoRolesError of a store without roles.
func noRolesOK(err error) error {
	if errors.Is(err, leasecore.ErrNoRoles) {
		return nil
	}
	return err
}

// storeMethodOps is the operation each store method is called under. A
// Store method added without an entry here fails the test.
var storeMethodOps = map[string][]string{
	"Claim":      {leasecore.OpClaim},
	"Renew":      {leasecore.OpRenew, leasecore.OpRenewBatch}, // a store that is no BatchRenewer renews a batch one Renew each
	"RenewBatch": {leasecore.OpRenewBatch},
	"Release":    {leasecore.OpRelease},
	"Get":        {leasecore.OpGet},
	"List":       {leasecore.OpList},
	"Ping":       {leasecore.OpPing},
	"Migrate":    {leasecore.OpMigrate},
	"CreateTask": {leasecore.OpCreateTask},
	"UpdateTask": {leasecore.OpUpdateTask},
	// The recording store has every task and policy: a declare is an update.
	"DeclareTask":   {leasecore.OpUpdateTask},
	"DeclarePolicy": {leasecore.OpUpdatePolicy},
	"GetTask":       {leasecore.OpGetTask},
	"ListTasks":     {leasecore.OpListTasks},
	"DeleteTask":    {leasecore.OpDeleteTask},
	"CreatePolicy":  {leasecore.OpCreatePolicy},
	"UpdatePolicy":  {leasecore.OpUpdatePolicy},
	"GetPolicy":     {leasecore.OpGetPolicy},
	"ListPolicies":  {leasecore.OpListPolicies},
	"DeletePolicy":  {leasecore.OpDeletePolicy},
	"History":       {leasecore.OpHistory},
	"PruneHistory":  {leasecore.OpPrune},
	// HistoryFeed's and its cursor's. HistoryChanges is not here: it sets
	// up a change signal that lasts the watch, not a store operation, and
	// the history is read, under OpReadHistory, whatever it says.
	"FollowHistory":  {leasecore.OpFollowHistory},
	"Next":           {leasecore.OpReadHistory},
	"RecordExpiries": {leasecore.OpRecordExpiries},
	// RoleScopeStore's. Scope is also called by Pruner (under OpScope).
	"CreateRoleScope": {leasecore.OpCreateRoleScope},
	"UpdateRoleScope": {leasecore.OpUpdateRoleScope},
	"GetRoleScope":    {leasecore.OpGetRoleScope},
	"DeleteRoleScope": {leasecore.OpDeleteRoleScope},
	"Scope":           {leasecore.OpScope},
}

// notCalledByService are the Store methods a Service never calls: the
// store is closed by whoever opened it.
var notCalledByService = []string{"Close"}

// TestEveryStoreCallIsIntercepted is the chokepoint's guarantee: every
// exported Service method is called, and every Store method the Service
// reaches is reached through the interceptor, under its operation's name,
// with the context the interceptor passed on. Every method of Store (and of
// BatchRenewer) must be reached by some Service call, so a Store method
// added later that a Service calls around the chokepoint, or never, fails
// here.
func TestEveryStoreCallIsIntercepted(t *testing.T) {
	t.Parallel()
	svcType := reflect.TypeFor[*leasecore.Service]()
	for i := range svcType.NumMethod() {
		if name := svcType.Method(i).Name; serviceCalls[name] == nil {
			t.Errorf("Service.%s is not called by this test: add it to serviceCalls", name)
		}
	}
	want := map[string]bool{"RenewBatch": true, // BatchRenewer's
		"FollowHistory": true, "RecordExpiries": true, "Next": true, // HistoryFeed's and HistoryCursor's
		"CreateRoleScope": true, "UpdateRoleScope": true, "GetRoleScope": true, "DeleteRoleScope": true, "Scope": true} // RoleScopeStore's
	storeType := reflect.TypeFor[leasecore.Store]()
	for i := range storeType.NumMethod() {
		name := storeType.Method(i).Name
		if !slices.Contains(notCalledByService, name) {
			want[name] = true
		}
	}
	for name := range want {
		if storeMethodOps[name] == nil {
			t.Errorf("Store.%s has no operation in storeMethodOps: name the Op a Service calls it under", name)
		}
	}

	reached := map[string]bool{}
	for _, batch := range []bool{false, true} {
		var rec *recordingStore
		var store leasecore.Store
		ctx := t.Context()
		if batch {
			b := &batchRecordingStore{swept: make(chan struct{})}
			rec, store = &b.recordingStore, b
			ctx = context.WithValue(ctx, sweptKey{}, b.swept)
		} else {
			rec = &recordingStore{}
			store = rec
		}
		var mu sync.Mutex
		var intercepted []string
		svc := leasecore.New(store, leasecore.WithInterceptor(func(ctx context.Context, op string, call func(context.Context) error) error {
			mu.Lock()
			intercepted = append(intercepted, op)
			mu.Unlock()
			return call(context.WithValue(ctx, interceptedKey{}, op))
		}))
		for name, call := range serviceCalls {
			if (name == "WriteCounts" || name == "HistoryFeed") && !batch {
				continue // the plain recording store counts nothing and has no history feed
			}
			if err := call(ctx, svc); err != nil {
				t.Errorf("batch store %v: Service.%s: %v", batch, name, err)
			}
			for _, r := range rec.take() {
				reached[r.method] = true
				if r.op == "" {
					t.Errorf("batch store %v: Service.%s reached Store.%s around the interceptor", batch, name, r.method)
				} else if !slices.Contains(storeMethodOps[r.method], r.op) {
					t.Errorf("batch store %v: Service.%s reached Store.%s under operation %q, want one of %q",
						batch, name, r.method, r.op, storeMethodOps[r.method])
				}
			}
		}
		mu.Lock()
		if len(intercepted) == 0 {
			t.Errorf("batch store %v: the interceptor saw no call", batch)
		}
		mu.Unlock()
	}
	for name := range want {
		if !reached[name] {
			t.Errorf("Store.%s is reached by no Service call: a Service must call it through the interceptor", name)
		}
	}
}

// TestInterceptorsNestAndGate: the first interceptor added is the
// outermost, and one that returns without calling keeps the store unasked
// and the caller told unavailable.
func TestInterceptorsNestAndGate(t *testing.T) {
	t.Parallel()
	rec := &recordingStore{}
	var order []string
	closed := true
	gate := errors.New("gate closed")
	svc := leasecore.New(rec,
		leasecore.WithInterceptor(func(ctx context.Context, op string, call func(context.Context) error) error {
			order = append(order, "outer "+op)
			err := call(ctx)
			order = append(order, "outer done")
			return err
		}),
		leasecore.WithInterceptor(func(ctx context.Context, op string, call func(context.Context) error) error {
			order = append(order, "inner "+op)
			if closed {
				return gate
			}
			return call(ctx)
		}))
	_, err := svc.Get(t.Context(), "t")
	if !errors.Is(err, leasecore.ErrUnavailable) || !errors.Is(err, gate) {
		t.Errorf("get through a closed gate: %v, want unavailable wrapping the gate's error", err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("a closed gate reached the store: %v", got)
	}
	if want := []string{"outer get", "inner get", "outer done"}; !slices.Equal(order, want) {
		t.Errorf("interceptors ran %q, want %q", order, want)
	}
	closed = false
	if _, err := svc.Get(t.Context(), "t"); err != nil {
		t.Errorf("get through an open gate: %v", err)
	}
	if got := rec.take(); len(got) != 1 || got[0].method != "Get" {
		t.Errorf("an open gate reached %v, want Get once", got)
	}
}

// TestInterceptorsCostNoAllocations: a claim passing four interceptors
// allocates no more than one passing one; the chain is walked, not built
// per call.
func TestInterceptorsCostNoAllocations(t *testing.T) {
	pass := func(ctx context.Context, _ string, call func(context.Context) error) error { return call(ctx) }
	allocs := func(n int) float64 {
		opts := []leasecore.Option{leasecore.WithOpTimeout(0)}
		for range n {
			opts = append(opts, leasecore.WithInterceptor(pass))
		}
		svc := leasecore.New(&recordingStore{}, opts...)
		p := leasecore.ClaimParams{Task: "t", Owner: "o"}
		return testing.AllocsPerRun(50, func() {
			if _, err := svc.Claim(context.Background(), p); err != nil {
				t.Fatal(err)
			}
		})
	}
	if one, four := allocs(1), allocs(4); four != one {
		t.Errorf("a claim allocates %v times through four interceptors, %v through one; want the same", four, one)
	}
}

// hungStore never answers a claim: it returns only when the call's context
// ends.
type hungStore struct{ recordingStore }

func (h *hungStore) Claim(ctx context.Context, _ leasecore.ClaimParams) (*leasecore.Lease, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestHungStoreAnswersUnavailable: a claim whose context has no deadline,
// to a store that never answers, ends as unavailable once the operation
// timeout has passed, through the interceptors, rather than never.
func TestHungStoreAnswersUnavailable(t *testing.T) {
	t.Parallel()
	pass := func(ctx context.Context, _ string, call func(context.Context) error) error { return call(ctx) }
	svc := leasecore.New(&hungStore{}, leasecore.WithOpTimeout(time.Millisecond), leasecore.WithInterceptor(pass))
	lease, err := svc.Claim(context.Background(), leasecore.ClaimParams{Task: "t", Owner: "o"})
	if lease != nil || !errors.Is(err, leasecore.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("claim to a hung store = %v, %v; want unavailable after the operation timeout", lease, err)
	}
}
