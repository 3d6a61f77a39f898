package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// The catalog cases: task declarations, retention policies, the input rules
// of both, and claims that honour declarations. They run on the shared data
// with names of their own, except where a case needs the whole database (the
// default policy as Migrate creates it): those use a database of their own
// (see isolated).

// uniquePolicy returns a retention policy name no other case (and no earlier
// run over the same data) uses: label, which should be short, plus a random
// suffix, within MaxPolicyNameLen.
func uniquePolicy(t testing.TB, label string) string {
	t.Helper()
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatalf("random suffix: %v", err)
	}
	name := "p-" + label + "-" + hex.EncodeToString(r[:])
	if err := leasecore.ValidatePolicyName("Name", name); err != nil {
		t.Fatalf("uniquePolicy made an invalid name %q: %v", name, err)
	}
	return name
}

// storeClock reads the store's clock through a lease of its own: every
// reading is a same-owner refresh, whose renewed_at is the store's now. The
// task is undeclared, so its refreshes record no history and no declaration
// applies to them.
type storeClock struct {
	t    *testing.T
	svc  *leasecore.Service
	task string
}

func newStoreClock(t *testing.T, svc *leasecore.Service) *storeClock {
	return &storeClock{t: t, svc: svc, task: uniqueTask(t) + "-clock"}
}

// now returns the store's clock, read by a write that follows every write
// the case made before it.
func (c *storeClock) now() time.Time {
	c.t.Helper()
	return claim(c.t, c.svc, c.task, "clock", longTTL).RenewedAt
}

// waitPast waits until the store's clock is past at.
func (c *storeClock) waitPast(at time.Time) {
	c.t.Helper()
	poll(c.t, 10*time.Millisecond, "the store's clock to pass "+at.UTC().Format(time.RFC3339Nano), func() bool {
		return c.now().After(at)
	})
}

// checkWithin fails t unless lo ≤ x ≤ hi, to the model's precision.
func checkWithin(t *testing.T, what string, x, lo, hi time.Time) {
	t.Helper()
	if x.Before(lo.Add(-precision)) || x.After(hi.Add(precision)) {
		t.Errorf("%s %s, want the store's clock between %s and %s", what,
			x.UTC().Format(time.RFC3339Nano), lo.UTC().Format(time.RFC3339Nano), hi.UTC().Format(time.RFC3339Nano))
	}
}

func showDecl(d *leasecore.TaskDecl) string {
	if d == nil {
		return "<none>"
	}
	return fmt.Sprintf("{name %s ttl %v (%q) max_ttl %v (%q) description %q policy %q managed_by %q created %s updated %s}", d.Name, d.TTL, d.TTLSpelling,
		d.MaxTTL, d.MaxTTLSpelling, d.Description, d.RetentionPolicy, d.ManagedBy, d.CreatedAt.UTC().Format(time.RFC3339Nano), d.UpdatedAt.UTC().Format(time.RFC3339Nano))
}

func showPolicy(p *leasecore.RetentionPolicy) string {
	if p == nil {
		return "<none>"
	}
	return fmt.Sprintf("{name %s keep_for %v (%q) keep_last %d managed_by %q created %s updated %s}", p.Name, p.KeepFor, p.KeepForSpelling, p.KeepLast,
		p.ManagedBy, p.CreatedAt.UTC().Format(time.RFC3339Nano), p.UpdatedAt.UTC().Format(time.RFC3339Nano))
}

// checkDecl fails t unless got declares what want does (times aside, and
// the manager when want names none), with store times, updated_at not
// before created_at.
func checkDecl(t *testing.T, what string, got *leasecore.TaskDecl, want leasecore.TaskDecl) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: no declaration, want %s", what, showDecl(&want))
	}
	if got.Name != want.Name || got.TTL != want.TTL || got.MaxTTL != want.MaxTTL ||
		got.Description != want.Description || got.RetentionPolicy != want.RetentionPolicy ||
		got.TTLSpelling != want.TTLSpelling || got.MaxTTLSpelling != want.MaxTTLSpelling ||
		(want.ManagedBy != "" && got.ManagedBy != want.ManagedBy) {
		t.Errorf("%s: %s, want %s", what, showDecl(got), showDecl(&want))
	}
	if got.CreatedAt.IsZero() || got.UpdatedAt.IsZero() || got.UpdatedAt.Before(got.CreatedAt) {
		t.Errorf("%s: created_at %v, updated_at %v: want store times, updated not before created", what, got.CreatedAt, got.UpdatedAt)
	}
}

// sameDecl fails t unless got is want, times included.
func sameDecl(t *testing.T, what string, got, want *leasecore.TaskDecl) {
	t.Helper()
	checkDecl(t, what, got, *want)
	if !sameInstant(got.CreatedAt, want.CreatedAt) || !sameInstant(got.UpdatedAt, want.UpdatedAt) {
		t.Errorf("%s: %s, want the times of %s", what, showDecl(got), showDecl(want))
	}
}

// checkPolicy is checkDecl for a policy.
func checkPolicy(t *testing.T, what string, got *leasecore.RetentionPolicy, want leasecore.RetentionPolicy) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: no policy, want %s", what, showPolicy(&want))
	}
	if got.Name != want.Name || got.KeepFor != want.KeepFor || got.KeepLast != want.KeepLast || got.KeepForSpelling != want.KeepForSpelling ||
		(want.ManagedBy != "" && got.ManagedBy != want.ManagedBy) {
		t.Errorf("%s: %s, want %s", what, showPolicy(got), showPolicy(&want))
	}
	if got.CreatedAt.IsZero() || got.UpdatedAt.IsZero() || got.UpdatedAt.Before(got.CreatedAt) {
		t.Errorf("%s: created_at %v, updated_at %v: want store times, updated not before created", what, got.CreatedAt, got.UpdatedAt)
	}
}

// samePolicy fails t unless got is want, times included.
func samePolicy(t *testing.T, what string, got, want *leasecore.RetentionPolicy) {
	t.Helper()
	checkPolicy(t, what, got, *want)
	if !sameInstant(got.CreatedAt, want.CreatedAt) || !sameInstant(got.UpdatedAt, want.UpdatedAt) {
		t.Errorf("%s: %s, want the times of %s", what, showPolicy(got), showPolicy(want))
	}
}

func createTask(t *testing.T, svc *leasecore.Service, d leasecore.TaskDecl) *leasecore.TaskDecl {
	t.Helper()
	got, err := svc.CreateTask(t.Context(), d, leasecore.Writer{})
	if err != nil {
		t.Fatalf("create task %s: %v", d.Name, err)
	}
	want := d
	if want.RetentionPolicy == "" {
		want.RetentionPolicy = leasecore.DefaultPolicy
	}
	want.ManagedBy = leasecore.ManagedByOperator // the zero Writer's
	checkDecl(t, "create task "+d.Name, got, want)
	return got
}

func updateTask(t *testing.T, svc *leasecore.Service, d leasecore.TaskDecl) *leasecore.TaskDecl {
	t.Helper()
	got, err := svc.UpdateTask(t.Context(), d, leasecore.Writer{})
	if err != nil {
		t.Fatalf("update task %s: %v", d.Name, err)
	}
	want := d
	if want.RetentionPolicy == "" {
		want.RetentionPolicy = leasecore.DefaultPolicy
	}
	want.ManagedBy = leasecore.ManagedByOperator
	checkDecl(t, "update task "+d.Name, got, want)
	return got
}

func getTask(t *testing.T, svc *leasecore.Service, name string) *leasecore.TaskDecl {
	t.Helper()
	d, err := svc.GetTask(t.Context(), name)
	if err != nil {
		t.Fatalf("get task %s: %v", name, err)
	}
	if d != nil && d.Name != name {
		t.Errorf("get task %s returned %s", name, showDecl(d))
	}
	return d
}

// mustNoTask fails t unless name is not declared.
func mustNoTask(t *testing.T, svc *leasecore.Service, name string) {
	t.Helper()
	if d := getTask(t, svc, name); d != nil {
		t.Fatalf("task %s is declared as %s, want no declaration", name, showDecl(d))
	}
}

func createPolicy(t *testing.T, svc *leasecore.Service, p leasecore.RetentionPolicy) *leasecore.RetentionPolicy {
	t.Helper()
	got, err := svc.CreatePolicy(t.Context(), p, leasecore.Writer{})
	if err != nil {
		t.Fatalf("create policy %s: %v", p.Name, err)
	}
	want := p
	want.ManagedBy = leasecore.ManagedByOperator
	checkPolicy(t, "create policy "+p.Name, got, want)
	return got
}

func getPolicy(t *testing.T, svc *leasecore.Service, name string) *leasecore.RetentionPolicy {
	t.Helper()
	p, err := svc.GetPolicy(t.Context(), name)
	if err != nil {
		t.Fatalf("get policy %s: %v", name, err)
	}
	if p != nil && p.Name != name {
		t.Errorf("get policy %s returned %s", name, showPolicy(p))
	}
	return p
}

// mustNoPolicy fails t unless policy name does not exist.
func mustNoPolicy(t *testing.T, svc *leasecore.Service, name string) {
	t.Helper()
	if p := getPolicy(t, svc, name); p != nil {
		t.Fatalf("policy %s exists as %s, want none", name, showPolicy(p))
	}
}

// tasksListed returns every declaration after checking that the list is
// strictly ordered by name (bytewise).
func tasksListed(t *testing.T, svc *leasecore.Service) []leasecore.TaskDecl {
	t.Helper()
	all, _, err := svc.ListTasks(t.Context(), leasecore.ListParams{})
	if err != nil {
		t.Fatalf("list tasks: %v", err)
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].Name >= all[i].Name {
			t.Errorf("task list not strictly ordered by name (bytewise): %q before %q", all[i-1].Name, all[i].Name)
		}
	}
	return all
}

// findTask returns name's entry in the task list, or nil.
func findTask(t *testing.T, svc *leasecore.Service, name string) *leasecore.TaskDecl {
	t.Helper()
	for _, d := range tasksListed(t, svc) {
		if d.Name == name {
			return &d
		}
	}
	return nil
}

// policiesListed is tasksListed for policies.
func policiesListed(t *testing.T, svc *leasecore.Service) []leasecore.RetentionPolicy {
	t.Helper()
	all, err := svc.ListPolicies(t.Context())
	if err != nil {
		t.Fatalf("list policies: %v", err)
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].Name >= all[i].Name {
			t.Errorf("policy list not strictly ordered by name (bytewise): %q before %q", all[i-1].Name, all[i].Name)
		}
	}
	return all
}

// mustOutcome fails t unless err is sentinel and none of the model's other
// outcomes.
func mustOutcome(t *testing.T, what string, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: got %v, want %v", what, err, sentinel)
	}
	for _, other := range []error{leasecore.ErrUnavailable, leasecore.ErrInvalid, leasecore.ErrHeld, leasecore.ErrLost,
		leasecore.ErrNotFound, leasecore.ErrExists, leasecore.ErrInUse, leasecore.ErrUndeclared, leasecore.ErrManaged} {
		if other != sentinel && errors.Is(err, other) {
			t.Errorf("%s: %v is %v and also %v", what, err, sentinel, other)
		}
	}
}

// mustNotFound fails t unless err says the kind ("task" or "retention
// policy") named name does not exist.
func mustNotFound(t *testing.T, what string, err error, kind, name string) {
	t.Helper()
	mustOutcome(t, what, err, leasecore.ErrNotFound)
	var nf *leasecore.NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("%s: %v (%T) is ErrNotFound but no *NotFoundError", what, err, err)
	}
	if nf.Kind != kind || nf.Name != name {
		t.Errorf("%s: NotFoundError{Kind: %q, Name: %q}, want {%q, %q}", what, nf.Kind, nf.Name, kind, name)
	}
}

// mustExists fails t unless err says the kind named name exists already.
func mustExists(t *testing.T, what string, err error, kind, name string) {
	t.Helper()
	mustOutcome(t, what, err, leasecore.ErrExists)
	var ee *leasecore.ExistsError
	if !errors.As(err, &ee) {
		t.Fatalf("%s: %v (%T) is ErrExists but no *ExistsError", what, err, err)
	}
	if ee.Kind != kind || ee.Name != name {
		t.Errorf("%s: ExistsError{Kind: %q, Name: %q}, want {%q, %q}", what, ee.Kind, ee.Name, kind, name)
	}
}

// mustInUse fails t unless err refuses to delete policy because exactly
// tasks (in this order; none for the default policy) name it.
func mustInUse(t *testing.T, what string, err error, policy string, tasks []string) {
	t.Helper()
	mustOutcome(t, what, err, leasecore.ErrInUse)
	var iu *leasecore.InUseError
	if !errors.As(err, &iu) {
		t.Fatalf("%s: %v (%T) is ErrInUse but no *InUseError", what, err, err)
	}
	if iu.Policy != policy || !slices.Equal(iu.Tasks, tasks) {
		t.Errorf("%s: InUseError{Policy: %q, Tasks: %q}, want {%q, %q}", what, iu.Policy, iu.Tasks, policy, tasks)
	}
}

// declService returns a Service over the suite's store that applies
// declarations at most a millisecond old, so a change made through another
// Service is honoured at once (polling absorbs the millisecond).
func (s *suite) declService(require bool) *leasecore.Service {
	return leasecore.New(s.store, leasecore.WithDeclarations(time.Millisecond, require), leasecore.WithOpTimeout(sharedOpTimeout))
}

// A declaration is stored as given, the default policy filled in when it
// names none, with created_at = updated_at from the store's clock; get and
// list show it.
func (s *suite) testTaskCreate(t *testing.T) {
	clock := newStoreClock(t, s.svc)
	name := uniqueTask(t)
	before := clock.now()
	d := leasecore.TaskDecl{Name: name, TTL: 90 * time.Second, MaxTTL: 10 * time.Minute, Description: "entries pruner — nightly",
		TTLSpelling: "90s", MaxTTLSpelling: "600s"}
	got := createTask(t, s.svc, d)
	after := clock.now()

	if got.RetentionPolicy != leasecore.DefaultPolicy {
		t.Errorf("a declaration naming no policy got %q, want %q", got.RetentionPolicy, leasecore.DefaultPolicy)
	}
	checkWithin(t, "created_at", got.CreatedAt, before, after)
	if !sameInstant(got.UpdatedAt, got.CreatedAt) {
		t.Errorf("new declaration: updated_at %v, want created_at %v", got.UpdatedAt, got.CreatedAt)
	}
	sameDecl(t, "get after create", getTask(t, s.svc, name), got)
	sameDecl(t, "list entry after create", findTask(t, s.svc, name), got)

	named := createTask(t, s.svc, leasecore.TaskDecl{Name: name + "-named", TTL: time.Second, RetentionPolicy: leasecore.DefaultPolicy})
	sameDecl(t, "get a declaration naming the default policy", getTask(t, s.svc, named.Name), named)
}

// Declaring a task that is declared already is refused with *ExistsError,
// and the declaration is left as it was.
func (s *suite) testTaskCreateExisting(t *testing.T) {
	name := uniqueTask(t)
	first := createTask(t, s.svc, leasecore.TaskDecl{Name: name, TTL: time.Minute, Description: "first"})
	again, err := s.svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: name, TTL: 2 * time.Minute, Description: "second"}, leasecore.Writer{})
	if again != nil {
		t.Errorf("second create returned %s along with %v", showDecl(again), err)
	}
	mustExists(t, "second create", err, "task", name)
	sameDecl(t, "declaration after a refused create", getTask(t, s.svc, name), first)
}

// An update replaces ttl, max_ttl, description and policy, keeps
// created_at, and moves updated_at on by the store's clock.
func (s *suite) testTaskUpdate(t *testing.T) {
	clock := newStoreClock(t, s.svc)
	name := uniqueTask(t)
	policy := createPolicy(t, s.svc, leasecore.RetentionPolicy{Name: uniquePolicy(t, "upd"), KeepFor: time.Hour, KeepLast: 7})
	first := createTask(t, s.svc, leasecore.TaskDecl{Name: name, TTL: time.Minute, MaxTTL: 2 * time.Minute, Description: "before"})
	clock.waitPast(first.UpdatedAt.Add(5 * precision))

	before := clock.now()
	want := leasecore.TaskDecl{Name: name, TTL: 20 * time.Second, MaxTTL: 30 * time.Second, Description: "after", RetentionPolicy: policy.Name,
		TTLSpelling: "20000ms", MaxTTLSpelling: "0.5m"}
	got := updateTask(t, s.svc, want)
	after := clock.now()
	if !sameInstant(got.CreatedAt, first.CreatedAt) {
		t.Errorf("update moved created_at %v → %v", first.CreatedAt, got.CreatedAt)
	}
	if !got.UpdatedAt.After(first.UpdatedAt) {
		t.Errorf("update: updated_at %v, want after %v (the store's clock moved on)", got.UpdatedAt, first.UpdatedAt)
	}
	checkWithin(t, "updated_at", got.UpdatedAt, before, after)
	sameDecl(t, "get after update", getTask(t, s.svc, name), got)
	sameDecl(t, "list entry after update", findTask(t, s.svc, name), got)

	// Back to no bound, no description, the default policy, no spellings.
	cleared := updateTask(t, s.svc, leasecore.TaskDecl{Name: name, TTL: 45 * time.Second})
	if !sameInstant(cleared.CreatedAt, first.CreatedAt) || cleared.UpdatedAt.Before(got.UpdatedAt) {
		t.Errorf("second update: %s, want created_at %v kept and updated_at not before %v", showDecl(cleared), first.CreatedAt, got.UpdatedAt)
	}
	sameDecl(t, "get after the second update", getTask(t, s.svc, name), cleared)
}

// Updating a task that is not declared is refused with *NotFoundError (kind
// "task") and declares nothing.
func (s *suite) testTaskUpdateMissing(t *testing.T) {
	name := uniqueTask(t)
	got, err := s.svc.UpdateTask(t.Context(), leasecore.TaskDecl{Name: name, TTL: time.Minute}, leasecore.Writer{})
	if got != nil {
		t.Errorf("update of a missing task returned %s along with %v", showDecl(got), err)
	}
	mustNotFound(t, "update of a task never declared", err, "task", name)
	mustNoTask(t, s.svc, name)
}

// A declaration naming a policy that does not exist is refused with
// *NotFoundError (kind "retention policy"), on create and on update, and
// nothing is written.
func (s *suite) testTaskMissingPolicy(t *testing.T) {
	name := uniqueTask(t)
	missing := uniquePolicy(t, "missing")
	got, err := s.svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: name, TTL: time.Minute, RetentionPolicy: missing}, leasecore.Writer{})
	if got != nil {
		t.Errorf("create naming a missing policy returned %s along with %v", showDecl(got), err)
	}
	mustNotFound(t, "create naming a missing policy", err, "retention policy", missing)
	mustNoTask(t, s.svc, name)
	if d := findTask(t, s.svc, name); d != nil {
		t.Errorf("task list shows %s after a refused create", showDecl(d))
	}

	first := createTask(t, s.svc, leasecore.TaskDecl{Name: name, TTL: time.Minute, Description: "kept"})
	got, err = s.svc.UpdateTask(t.Context(), leasecore.TaskDecl{Name: name, TTL: 2 * time.Minute, RetentionPolicy: missing}, leasecore.Writer{})
	if got != nil {
		t.Errorf("update naming a missing policy returned %s along with %v", showDecl(got), err)
	}
	mustNotFound(t, "update naming a missing policy", err, "retention policy", missing)
	sameDecl(t, "declaration after a refused update", getTask(t, s.svc, name), first)
	mustNoPolicy(t, s.svc, missing)
}

// Deleting a declaration reports true, then false; the task's lease and
// history are left alone, and the task may be declared again.
func (s *suite) testTaskDelete(t *testing.T) {
	name := uniqueTask(t)
	first := createTask(t, s.svc, leasecore.TaskDecl{Name: name, TTL: time.Minute})
	l := claim(t, s.svc, name, "a", time.Minute)
	evs := events(t, s.svc, name)

	for i, want := range []bool{true, false} {
		ok, err := s.svc.DeleteTask(t.Context(), name, leasecore.Writer{})
		if err != nil || ok != want {
			t.Fatalf("delete %d of %s = (%v, %v), want (%v, nil)", i+1, name, ok, err, want)
		}
		mustNoTask(t, s.svc, name)
	}
	if d := findTask(t, s.svc, name); d != nil {
		t.Errorf("task list shows %s after delete", showDecl(d))
	}
	checkSame(t, "lease after its declaration was deleted", get(t, s.svc, name), l)
	if got := events(t, s.svc, name); !sameEvents(got, evs) {
		t.Errorf("history after the declaration was deleted:\n%s\nwant as before:\n%s", showEvents(got), showEvents(evs))
	}

	again := createTask(t, s.svc, leasecore.TaskDecl{Name: name, TTL: 2 * time.Minute})
	if again.CreatedAt.Before(first.CreatedAt) {
		t.Errorf("declared again: created_at %v, before the first declaration's %v", again.CreatedAt, first.CreatedAt)
	}
	if ok, err := s.svc.DeleteTask(t.Context(), uniqueTask(t), leasecore.Writer{}); ok || err != nil {
		t.Errorf("delete of a task never declared = (%v, %v), want (false, nil)", ok, err)
	}
}

// Declarations are listed ordered by name, bytewise; get of an undeclared
// task is nil.
func (s *suite) testTaskList(t *testing.T) {
	base := uniqueTask(t)
	names := []string{base + "-b", base + "-B", base + "-a", base + "-A.1", base + "-_"}
	for i, n := range names {
		createTask(t, s.svc, leasecore.TaskDecl{Name: n, TTL: time.Duration(i+1) * time.Second})
	}
	var mine []string
	for _, d := range tasksListed(t, s.svc) {
		if strings.HasPrefix(d.Name, base+"-") {
			mine = append(mine, d.Name)
		}
	}
	want := slices.Clone(names)
	slices.Sort(want)
	if !slices.Equal(mine, want) {
		t.Errorf("listed %q, want %q", mine, want)
	}
	if d := getTask(t, s.svc, base+"-none"); d != nil {
		t.Errorf("get of an undeclared task = %s, want nil", showDecl(d))
	}
}

// ListTasks pages by name as List does: the first Limit declarations after
// After, and next naming the last when more follow.
func (s *suite) testTaskListPages(t *testing.T) {
	base := uniqueTask(t)
	var want []string
	for i := range 5 {
		name := fmt.Sprintf("%s/%d", base, i)
		createTask(t, s.svc, leasecore.TaskDecl{Name: name, TTL: time.Second})
		want = append(want, name)
	}
	var got []string
	after := base
	for range 2 {
		decls, next, err := s.svc.ListTasks(t.Context(), leasecore.ListParams{After: after, Limit: 2})
		if err != nil {
			t.Fatalf("list tasks after %q: %v", after, err)
		}
		if len(decls) != 2 || next != decls[1].Name {
			t.Fatalf("list tasks after %q limit 2: %d declarations, next %q; want 2 and next naming the last", after, len(decls), next)
		}
		for _, d := range decls {
			got = append(got, d.Name)
		}
		after = next
	}
	if !slices.Equal(got, want[:4]) {
		t.Errorf("two pages of 2: %q, want %q", got, want[:4])
	}
	decls, _, err := s.svc.ListTasks(t.Context(), leasecore.ListParams{After: want[3], Limit: 1})
	if err != nil || len(decls) != 1 || decls[0].Name != want[4] {
		t.Errorf("list tasks after %q limit 1: %v %v, want %q", want[3], decls, err, want[4])
	}
	_, _, err = s.svc.ListTasks(t.Context(), leasecore.ListParams{Limit: leasecore.MaxListLimit + 1})
	mustInvalid(t, err, "Limit")
}

// ListTasks with a Prefix holds only the declarations whose name starts
// with it, and its next never names one outside it (as List's).
func (s *suite) testTaskListPrefix(t *testing.T) {
	base := uniqueTask(t)
	for _, name := range []string{"a/1", "a/2", "ab", "b/1"} {
		createTask(t, s.svc, leasecore.TaskDecl{Name: base + "/" + name, TTL: time.Second})
	}
	decls, next, err := s.svc.ListTasks(t.Context(), leasecore.ListParams{Prefix: base + "/a/", Limit: 1})
	if err != nil || len(decls) != 1 || decls[0].Name != base+"/a/1" || next != base+"/a/1" {
		t.Fatalf("list tasks prefix a/ limit 1: %v next %q err %v, want a/1 and next a/1", decls, next, err)
	}
	decls, next, err = s.svc.ListTasks(t.Context(), leasecore.ListParams{Prefix: base + "/a/", After: next, Limit: 1})
	if err != nil || len(decls) != 1 || decls[0].Name != base+"/a/2" || next != "" {
		t.Errorf("list tasks prefix a/ after a/1 limit 1: %v next %q err %v, want a/2 and no next (ab and b/1 are outside)", decls, next, err)
	}
}

// After Migrate, the default policy exists with keep_for 720h and
// keep_last 1000 and is the only policy; it can be changed (and Migrate
// again keeps the change) but never deleted, and cannot be created again.
func (s *suite) testPolicyDefaultAfterMigrate(t *testing.T) {
	st := s.isolated(t)
	svc := leasecore.New(st)
	def := getPolicy(t, svc, leasecore.DefaultPolicy)
	checkPolicy(t, "default policy after Migrate", def,
		leasecore.RetentionPolicy{Name: leasecore.DefaultPolicy, KeepFor: leasecore.DefaultKeepFor, KeepLast: leasecore.DefaultKeepLast})
	if def != nil && def.KeepFor != 720*time.Hour {
		t.Errorf("default keep_for %v, want 720h", def.KeepFor)
	}
	all := policiesListed(t, svc)
	if len(all) != 1 || all[0].Name != leasecore.DefaultPolicy {
		t.Errorf("policies of a new database: %d, want only the default", len(all))
	}
	if tasks := tasksListed(t, svc); len(tasks) != 0 {
		t.Errorf("a new database declares %d tasks, want none", len(tasks))
	}

	_, err := svc.CreatePolicy(t.Context(), leasecore.RetentionPolicy{Name: leasecore.DefaultPolicy, KeepLast: 1}, leasecore.Writer{})
	mustExists(t, "create the default policy", err, "retention policy", leasecore.DefaultPolicy)

	changed, err := svc.UpdatePolicy(t.Context(), leasecore.RetentionPolicy{Name: leasecore.DefaultPolicy, KeepFor: time.Hour, KeepLast: 5}, leasecore.Writer{})
	if err != nil {
		t.Fatalf("update the default policy: %v", err)
	}
	checkPolicy(t, "default policy updated", changed, leasecore.RetentionPolicy{Name: leasecore.DefaultPolicy, KeepFor: time.Hour, KeepLast: 5})
	if !sameInstant(changed.CreatedAt, def.CreatedAt) {
		t.Errorf("update moved the default policy's created_at %v → %v", def.CreatedAt, changed.CreatedAt)
	}
	samePolicy(t, "default policy read after the update", getPolicy(t, svc, leasecore.DefaultPolicy), changed)

	ok, err := svc.DeletePolicy(t.Context(), leasecore.DefaultPolicy, leasecore.Writer{})
	if ok {
		t.Error("delete of the default policy reported true")
	}
	mustInUse(t, "delete the default policy", err, leasecore.DefaultPolicy, nil)
	if err := st.Migrate(opCtx(t)); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	samePolicy(t, "default policy after Migrate again", getPolicy(t, svc, leasecore.DefaultPolicy), changed)
}

// The default policy of the shared data cannot be deleted either: the
// refusal names no tasks, whatever tasks name it.
func (s *suite) testPolicyDeleteDefault(t *testing.T) {
	createTask(t, s.svc, leasecore.TaskDecl{Name: uniqueTask(t), TTL: time.Minute, RetentionPolicy: leasecore.DefaultPolicy})
	ok, err := s.svc.DeletePolicy(t.Context(), leasecore.DefaultPolicy, leasecore.Writer{})
	if ok {
		t.Error("delete of the default policy reported true")
	}
	mustInUse(t, "delete the default policy", err, leasecore.DefaultPolicy, nil)
	if getPolicy(t, s.svc, leasecore.DefaultPolicy) == nil {
		t.Fatal("the default policy is gone after a refused delete")
	}
}

// A policy is stored as given with store times, listed in name order, and
// updated in place (created_at kept, updated_at moved on); updating a policy
// that does not exist is refused with *NotFoundError.
func (s *suite) testPolicyCreateUpdate(t *testing.T) {
	clock := newStoreClock(t, s.svc)
	name := uniquePolicy(t, "cu")
	before := clock.now()
	first := createPolicy(t, s.svc, leasecore.RetentionPolicy{Name: name, KeepFor: 48 * time.Hour, KeepLast: 10, KeepForSpelling: "2880m"})
	after := clock.now()
	checkWithin(t, "created_at", first.CreatedAt, before, after)
	if !sameInstant(first.UpdatedAt, first.CreatedAt) {
		t.Errorf("new policy: updated_at %v, want created_at %v", first.UpdatedAt, first.CreatedAt)
	}
	samePolicy(t, "get after create", getPolicy(t, s.svc, name), first)
	var listed *leasecore.RetentionPolicy
	for _, p := range policiesListed(t, s.svc) {
		if p.Name == name {
			listed = &p
		}
	}
	samePolicy(t, "list entry after create", listed, first)

	clock.waitPast(first.UpdatedAt.Add(5 * precision))
	got, err := s.svc.UpdatePolicy(t.Context(), leasecore.RetentionPolicy{Name: name}, leasecore.Writer{})
	if err != nil {
		t.Fatalf("update policy: %v", err)
	}
	checkPolicy(t, "update to no bounds", got, leasecore.RetentionPolicy{Name: name})
	if !sameInstant(got.CreatedAt, first.CreatedAt) || !got.UpdatedAt.After(first.UpdatedAt) {
		t.Errorf("update: %s, want created_at %v kept and updated_at after %v", showPolicy(got), first.CreatedAt, first.UpdatedAt)
	}
	samePolicy(t, "get after update", getPolicy(t, s.svc, name), got)

	missing := uniquePolicy(t, "missing")
	p, err := s.svc.UpdatePolicy(t.Context(), leasecore.RetentionPolicy{Name: missing, KeepLast: 1}, leasecore.Writer{})
	if p != nil {
		t.Errorf("update of a missing policy returned %s along with %v", showPolicy(p), err)
	}
	mustNotFound(t, "update of a missing policy", err, "retention policy", missing)
	mustNoPolicy(t, s.svc, missing)
}

// Creating a policy that exists is refused with *ExistsError, and the policy
// is left as it was.
func (s *suite) testPolicyCreateExisting(t *testing.T) {
	name := uniquePolicy(t, "ce")
	first := createPolicy(t, s.svc, leasecore.RetentionPolicy{Name: name, KeepLast: 3})
	again, err := s.svc.CreatePolicy(t.Context(), leasecore.RetentionPolicy{Name: name, KeepLast: 4}, leasecore.Writer{})
	if again != nil {
		t.Errorf("second create returned %s along with %v", showPolicy(again), err)
	}
	mustExists(t, "second create", err, "retention policy", name)
	samePolicy(t, "policy after a refused create", getPolicy(t, s.svc, name), first)
	_, err = s.svc.CreatePolicy(t.Context(), leasecore.RetentionPolicy{Name: leasecore.DefaultPolicy, KeepLast: 4}, leasecore.Writer{})
	mustExists(t, "create the default policy", err, "retention policy", leasecore.DefaultPolicy)
}

// A policy that declarations name cannot be deleted: *InUseError lists
// exactly those tasks, by name, and nothing is deleted. Once no task names
// it, it is deleted (true), and a second delete reports false.
func (s *suite) testPolicyDeleteInUse(t *testing.T) {
	policy := createPolicy(t, s.svc, leasecore.RetentionPolicy{Name: uniquePolicy(t, "inuse"), KeepLast: 3})
	base := uniqueTask(t)
	t2 := createTask(t, s.svc, leasecore.TaskDecl{Name: base + "-2", TTL: time.Minute, RetentionPolicy: policy.Name})
	t1 := createTask(t, s.svc, leasecore.TaskDecl{Name: base + "-1", TTL: time.Minute, RetentionPolicy: policy.Name})
	other := createTask(t, s.svc, leasecore.TaskDecl{Name: base + "-3", TTL: time.Minute})

	ok, err := s.svc.DeletePolicy(t.Context(), policy.Name, leasecore.Writer{})
	if ok {
		t.Error("delete of a policy in use reported true")
	}
	mustInUse(t, "delete a policy two tasks name", err, policy.Name, []string{t1.Name, t2.Name})
	samePolicy(t, "policy after a refused delete", getPolicy(t, s.svc, policy.Name), policy)
	sameDecl(t, "task after a refused delete of its policy", getTask(t, s.svc, t1.Name), t1)
	sameDecl(t, "task after a refused delete of its policy", getTask(t, s.svc, t2.Name), t2)
	sameDecl(t, "task of another policy", getTask(t, s.svc, other.Name), other)

	updateTask(t, s.svc, leasecore.TaskDecl{Name: t1.Name, TTL: time.Minute})
	_, err = s.svc.DeletePolicy(t.Context(), policy.Name, leasecore.Writer{})
	mustInUse(t, "delete a policy one task names", err, policy.Name, []string{t2.Name})

	if ok, err := s.svc.DeleteTask(t.Context(), t2.Name, leasecore.Writer{}); !ok || err != nil {
		t.Fatalf("delete task %s = (%v, %v)", t2.Name, ok, err)
	}
	for i, want := range []bool{true, false} {
		ok, err := s.svc.DeletePolicy(t.Context(), policy.Name, leasecore.Writer{})
		if err != nil || ok != want {
			t.Fatalf("delete %d of the unused policy = (%v, %v), want (%v, nil)", i+1, ok, err, want)
		}
		mustNoPolicy(t, s.svc, policy.Name)
	}
	_, err = s.svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: t2.Name, TTL: time.Minute, RetentionPolicy: policy.Name}, leasecore.Writer{})
	mustNotFound(t, "declare a task naming the deleted policy", err, "retention policy", policy.Name)
}

// A policy no task names is deleted (true), then gone (false); deleting a
// policy that never existed reports false.
func (s *suite) testPolicyDeleteUnused(t *testing.T) {
	name := createPolicy(t, s.svc, leasecore.RetentionPolicy{Name: uniquePolicy(t, "du"), KeepFor: time.Hour}).Name
	for i, want := range []bool{true, false} {
		ok, err := s.svc.DeletePolicy(t.Context(), name, leasecore.Writer{})
		if err != nil || ok != want {
			t.Fatalf("delete %d = (%v, %v), want (%v, nil)", i+1, ok, err, want)
		}
	}
	mustNoPolicy(t, s.svc, name)
	for _, p := range policiesListed(t, s.svc) {
		if p.Name == name {
			t.Errorf("policy list shows the deleted policy %s", showPolicy(&p))
		}
	}
	if ok, err := s.svc.DeletePolicy(t.Context(), uniquePolicy(t, "never"), leasecore.Writer{}); ok || err != nil {
		t.Errorf("delete of a policy never created = (%v, %v), want (false, nil)", ok, err)
	}
}

// catalogRow is a catalog call that breaks one rule of field.
type catalogRow struct {
	name, field string
	// call makes the refused call; task and policy are unique valid names
	// the call may use, which must not be written afterwards.
	call func(ctx context.Context, svc *leasecore.Service, task, policy string) error
}

// taskRules are declarations that each break one rule, with the field named.
var taskRules = []struct {
	name, field string
	edit        func(d *leasecore.TaskDecl)
}{
	{"name empty", "Name", func(d *leasecore.TaskDecl) { d.Name = "" }},
	{"name with space", "Name", func(d *leasecore.TaskDecl) { d.Name = "nightly report" }},
	{"name of 201 chars", "Name", func(d *leasecore.TaskDecl) { d.Name = strings.Repeat("t", leasecore.MaxTaskLen+1) }},
	{"name non-ASCII", "Name", func(d *leasecore.TaskDecl) { d.Name = "tâche" }},
	{"ttl missing", "TTL", func(d *leasecore.TaskDecl) { d.TTL = 0 }},
	{"ttl 99ms", "TTL", func(d *leasecore.TaskDecl) { d.TTL = leasecore.MinTTL - time.Millisecond }},
	{"ttl above 24h", "TTL", func(d *leasecore.TaskDecl) { d.TTL = leasecore.MaxTTL + time.Millisecond }},
	{"ttl negative", "TTL", func(d *leasecore.TaskDecl) { d.TTL = -time.Second }},
	{"max_ttl 99ms", "MaxTTL", func(d *leasecore.TaskDecl) { d.MaxTTL = leasecore.MinTTL - time.Millisecond }},
	{"max_ttl above 24h", "MaxTTL", func(d *leasecore.TaskDecl) { d.MaxTTL = leasecore.MaxTTL + time.Millisecond }},
	{"max_ttl negative", "MaxTTL", func(d *leasecore.TaskDecl) { d.MaxTTL = -time.Second }},
	{"ttl above max_ttl", "TTL", func(d *leasecore.TaskDecl) { d.TTL, d.MaxTTL = 2*time.Minute, time.Minute }},
	{"description of 1025 bytes", "Description", func(d *leasecore.TaskDecl) {
		d.Description = strings.Repeat("d", leasecore.MaxDescriptionLen+1)
	}},
	{"description invalid UTF-8", "Description", func(d *leasecore.TaskDecl) { d.Description = "bad \xc3\x28" }},
	{"description with NUL", "Description", func(d *leasecore.TaskDecl) { d.Description = "a\x00b" }},
	{"retention_policy with space", "RetentionPolicy", func(d *leasecore.TaskDecl) { d.RetentionPolicy = "audit log" }},
	{"retention_policy of 65 chars", "RetentionPolicy", func(d *leasecore.TaskDecl) {
		d.RetentionPolicy = strings.Repeat("p", leasecore.MaxPolicyNameLen+1)
	}},
	{"retention_policy non-ASCII", "RetentionPolicy", func(d *leasecore.TaskDecl) { d.RetentionPolicy = "pölicy" }},
	{"ttl spelling of another duration", "TTLSpelling", func(d *leasecore.TaskDecl) { d.TTLSpelling = "61s" }},
	{"ttl spelling no duration", "TTLSpelling", func(d *leasecore.TaskDecl) { d.TTLSpelling = "a minute" }},
	{"max_ttl spelling of 33 bytes", "MaxTTLSpelling", func(d *leasecore.TaskDecl) {
		d.MaxTTLSpelling = strings.Repeat("0", leasecore.MaxSpellingLen-2) + "10m"
	}},
	{"max_ttl spelling without max_ttl", "MaxTTLSpelling", func(d *leasecore.TaskDecl) { d.MaxTTL, d.MaxTTLSpelling = 0, "10m" }},
}

// policyRules are policies that each break one rule, with the field named.
var policyRules = []struct {
	name, field string
	edit        func(p *leasecore.RetentionPolicy)
}{
	{"name empty", "Name", func(p *leasecore.RetentionPolicy) { p.Name = "" }},
	{"name of 65 chars", "Name", func(p *leasecore.RetentionPolicy) { p.Name = strings.Repeat("p", leasecore.MaxPolicyNameLen+1) }},
	{"name with space", "Name", func(p *leasecore.RetentionPolicy) { p.Name = "audit log" }},
	{"name with hash", "Name", func(p *leasecore.RetentionPolicy) { p.Name = "audit#1" }},
	{"keep_for negative", "KeepFor", func(p *leasecore.RetentionPolicy) { p.KeepFor = -time.Second }},
	{"keep_for above the bound", "KeepFor", func(p *leasecore.RetentionPolicy) { p.KeepFor = leasecore.MaxKeepFor + time.Second }},
	{"keep_last negative", "KeepLast", func(p *leasecore.RetentionPolicy) { p.KeepLast = -1 }},
	{"keep_last above the bound", "KeepLast", func(p *leasecore.RetentionPolicy) { p.KeepLast = leasecore.MaxKeepLast + 1 }},
	{"keep_for spelling of another duration", "KeepForSpelling", func(p *leasecore.RetentionPolicy) { p.KeepFor, p.KeepForSpelling = time.Hour, "59m" }},
}

// catalogRows are the refused catalog calls.
func catalogRows() []catalogRow {
	var rows []catalogRow
	for _, r := range taskRules {
		rows = append(rows,
			catalogRow{"create task " + r.name, r.field, func(ctx context.Context, svc *leasecore.Service, task, _ string) error {
				d := leasecore.TaskDecl{Name: task, TTL: time.Minute, MaxTTL: 10 * time.Minute, Description: "ok"}
				r.edit(&d)
				return errOf(svc.CreateTask(ctx, d, leasecore.Writer{}))
			}},
			catalogRow{"update task " + r.name, r.field, func(ctx context.Context, svc *leasecore.Service, task, _ string) error {
				d := leasecore.TaskDecl{Name: task, TTL: time.Minute}
				r.edit(&d)
				return errOf(svc.UpdateTask(ctx, d, leasecore.Writer{}))
			}},
		)
	}
	for _, r := range policyRules {
		rows = append(rows,
			catalogRow{"create policy " + r.name, r.field, func(ctx context.Context, svc *leasecore.Service, _, policy string) error {
				p := leasecore.RetentionPolicy{Name: policy, KeepFor: time.Hour, KeepLast: 10}
				r.edit(&p)
				return errOf(svc.CreatePolicy(ctx, p, leasecore.Writer{}))
			}},
			catalogRow{"update policy " + r.name, r.field, func(ctx context.Context, svc *leasecore.Service, _, policy string) error {
				p := leasecore.RetentionPolicy{Name: policy, KeepFor: time.Hour, KeepLast: 10}
				r.edit(&p)
				return errOf(svc.UpdatePolicy(ctx, p, leasecore.Writer{}))
			}},
		)
	}
	for _, limit := range []int{0, -1, leasecore.MaxHistoryLimit + 1} {
		rows = append(rows, catalogRow{fmt.Sprintf("history limit %d", limit), "Limit",
			func(ctx context.Context, svc *leasecore.Service, task, _ string) error {
				return errOf(svc.History(ctx, task, limit))
			}})
	}
	const badTask, badPolicy = "nightly report", "audit log"
	rows = append(rows,
		catalogRow{"history task with space", "Task", func(ctx context.Context, svc *leasecore.Service, _, _ string) error {
			return errOf(svc.History(ctx, badTask, 10))
		}},
		catalogRow{"get task with space", "Task", func(ctx context.Context, svc *leasecore.Service, _, _ string) error {
			return errOf(svc.GetTask(ctx, badTask))
		}},
		catalogRow{"delete task with space", "Task", func(ctx context.Context, svc *leasecore.Service, _, _ string) error {
			return errOf(svc.DeleteTask(ctx, badTask, leasecore.Writer{}))
		}},
		catalogRow{"get policy with space", "Name", func(ctx context.Context, svc *leasecore.Service, _, _ string) error {
			return errOf(svc.GetPolicy(ctx, badPolicy))
		}},
		catalogRow{"delete policy with space", "Name", func(ctx context.Context, svc *leasecore.Service, _, _ string) error {
			return errOf(svc.DeletePolicy(ctx, badPolicy, leasecore.Writer{}))
		}},
	)
	return rows
}

// Every catalog input that breaks a rule is refused through Service with
// ErrInvalid and a *ValidationError naming the field, and nothing is
// written: no declaration or policy appears, and an existing one is left
// as it was.
func (s *suite) testCatalogValidationRefused(t *testing.T) {
	for _, r := range catalogRows() {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			task, policy := uniqueTask(t), uniquePolicy(t, "v")
			mustInvalid(t, r.call(t.Context(), s.svc, task, policy), r.field)
			mustNoTask(t, s.svc, task)
			mustNoPolicy(t, s.svc, policy)
		})
	}
	// The same refusals leave existing entries untouched.
	task, policy := uniqueTask(t), uniquePolicy(t, "v")
	decl := createTask(t, s.svc, leasecore.TaskDecl{Name: task, TTL: time.Minute, Description: "kept"})
	pol := createPolicy(t, s.svc, leasecore.RetentionPolicy{Name: policy, KeepFor: time.Hour, KeepLast: 2})
	for _, r := range catalogRows() {
		if !strings.HasPrefix(r.name, "update ") {
			continue
		}
		if err := r.call(t.Context(), s.svc, task, policy); !errors.Is(err, leasecore.ErrInvalid) {
			t.Errorf("%s of an existing entry: got %v, want ErrInvalid", r.name, err)
		}
	}
	sameDecl(t, "declaration after refused updates", getTask(t, s.svc, task), decl)
	samePolicy(t, "policy after refused updates", getPolicy(t, s.svc, policy), pol)
}

// Catalog input at the edge of every rule is accepted and read back as
// stored: durations are kept to whole milliseconds (ttls) and whole seconds
// (keep_for).
func (s *suite) testCatalogValidationAccepted(t *testing.T) {
	long := uniquePolicy(t, "edge")
	long += strings.Repeat("x", leasecore.MaxPolicyNameLen-len(long))
	policies := []struct {
		give, want leasecore.RetentionPolicy
	}{
		{leasecore.RetentionPolicy{Name: long, KeepFor: time.Hour, KeepLast: 1}, leasecore.RetentionPolicy{Name: long, KeepFor: time.Hour, KeepLast: 1}},
		{leasecore.RetentionPolicy{Name: uniquePolicy(t, "none")}, leasecore.RetentionPolicy{}},
		{leasecore.RetentionPolicy{Name: uniquePolicy(t, "max"), KeepFor: leasecore.MaxKeepFor, KeepLast: leasecore.MaxKeepLast},
			leasecore.RetentionPolicy{KeepFor: leasecore.MaxKeepFor, KeepLast: leasecore.MaxKeepLast}},
		{leasecore.RetentionPolicy{Name: uniquePolicy(t, "trunc"), KeepFor: 1500 * time.Millisecond, KeepLast: 2},
			leasecore.RetentionPolicy{KeepFor: time.Second, KeepLast: 2}},
	}
	for _, c := range policies {
		c.want.Name = c.give.Name
		got, err := s.svc.CreatePolicy(t.Context(), c.give, leasecore.Writer{})
		if err != nil {
			t.Fatalf("create %s: %v", showPolicy(&c.give), err)
		}
		checkPolicy(t, "accepted policy", got, c.want)
		samePolicy(t, "accepted policy read back", getPolicy(t, s.svc, c.give.Name), got)
	}

	base := uniqueTask(t)
	tasks := []struct {
		give, want leasecore.TaskDecl
	}{
		{leasecore.TaskDecl{TTL: leasecore.MaxTTL, MaxTTL: leasecore.MaxTTL}, leasecore.TaskDecl{TTL: leasecore.MaxTTL, MaxTTL: leasecore.MaxTTL}},
		{leasecore.TaskDecl{TTL: leasecore.MinTTL, MaxTTL: leasecore.MinTTL}, leasecore.TaskDecl{TTL: leasecore.MinTTL, MaxTTL: leasecore.MinTTL}},
		{leasecore.TaskDecl{TTL: time.Minute, MaxTTL: time.Minute}, leasecore.TaskDecl{TTL: time.Minute, MaxTTL: time.Minute}},
		{leasecore.TaskDecl{TTL: 1500*time.Millisecond + 999*time.Microsecond, MaxTTL: 2*time.Second + time.Microsecond},
			leasecore.TaskDecl{TTL: 1500 * time.Millisecond, MaxTTL: 2 * time.Second}},
		{leasecore.TaskDecl{TTL: time.Minute, Description: strings.Repeat("é", leasecore.MaxDescriptionLen/2)},
			leasecore.TaskDecl{TTL: time.Minute, Description: strings.Repeat("é", leasecore.MaxDescriptionLen/2)}},
		{leasecore.TaskDecl{TTL: time.Minute, RetentionPolicy: long}, leasecore.TaskDecl{TTL: time.Minute, RetentionPolicy: long}},
	}
	for i, c := range tasks {
		c.give.Name = fmt.Sprintf("%s-%d/a.b_c:d@e-f", base, i)
		c.want.Name = c.give.Name
		if c.want.RetentionPolicy == "" {
			c.want.RetentionPolicy = leasecore.DefaultPolicy
		}
		got, err := s.svc.CreateTask(t.Context(), c.give, leasecore.Writer{})
		if err != nil {
			t.Fatalf("create %s: %v", showDecl(&c.give), err)
		}
		checkDecl(t, "accepted declaration", got, c.want)
		sameDecl(t, "accepted declaration read back", getTask(t, s.svc, c.give.Name), got)
	}
	name := base + strings.Repeat("x", leasecore.MaxTaskLen-len(base))
	createTask(t, s.svc, leasecore.TaskDecl{Name: name, TTL: time.Minute})
}

// A claim without a ttl gets the task's declared ttl; a ttl given wins;
// an undeclared task gets the model's default. A change to the declaration
// is honoured by later claims: at once through the Service that made it,
// and within the staleness bound through another one.
func (s *suite) testDeclaredDefaultTTL(t *testing.T) {
	svc := s.declService(false)
	name := uniqueTask(t)
	createTask(t, svc, leasecore.TaskDecl{Name: name, TTL: 45 * time.Second, MaxTTL: 2 * time.Minute})

	l := claimOK(t, svc, leasecore.ClaimParams{Task: name, Owner: "a", TTL: 45 * time.Second})
	claimTTL := func(what string, ttl, want time.Duration) *leasecore.Lease {
		t.Helper()
		l, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: name, Owner: "a", TTL: ttl})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		checkLease(t, what, l)
		if l.TTL != want {
			t.Errorf("%s: ttl %v, want %v", what, l.TTL, want)
		}
		return l
	}
	if got := claimTTL("claim without a ttl of a declared task", 0, 45*time.Second); got.Token != l.Token {
		t.Errorf("refresh changed the token %d → %d", l.Token, got.Token)
	}
	claimTTL("claim with a ttl within max_ttl", 90*time.Second, 90*time.Second)

	undeclared := name + "-undeclared"
	if u := claimOK(t, svc, leasecore.ClaimParams{Task: undeclared, Owner: "a"}); u.TTL != leasecore.DefaultTTL {
		t.Errorf("claim without a ttl of an undeclared task: ttl %v, want %v", u.TTL, leasecore.DefaultTTL)
	}

	updateTask(t, svc, leasecore.TaskDecl{Name: name, TTL: 20 * time.Second})
	claimTTL("claim without a ttl after the Service updated the declaration", 0, 20*time.Second)

	// Through another Service: honoured once the copy is older than the
	// bound (a millisecond here).
	updateTask(t, s.svc, leasecore.TaskDecl{Name: name, TTL: 25 * time.Second})
	var last *leasecore.Lease
	poll(t, 5*time.Millisecond, "a claim to honour a declaration changed elsewhere", func() bool {
		var err error
		last, err = svc.Claim(t.Context(), leasecore.ClaimParams{Task: name, Owner: "a"})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		return last.TTL == 25*time.Second
	})
	if ok, err := s.svc.DeleteTask(t.Context(), name, leasecore.Writer{}); !ok || err != nil {
		t.Fatalf("delete %s = (%v, %v)", name, ok, err)
	}
	poll(t, 5*time.Millisecond, "a claim to see a declaration deleted elsewhere", func() bool {
		var err error
		last, err = svc.Claim(t.Context(), leasecore.ClaimParams{Task: name, Owner: "a"})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		return last.TTL == leasecore.DefaultTTL
	})
}

// A max_ttl declared below a live lease's ttl does not end the lease: a
// renewal that keeps its ttl (what a keeper sends) is granted; one asking
// for more than the new bound is refused once the Service's copy of the
// declarations has it (any claim reloads a stale copy); the next claim is
// bounded.
func (s *suite) testDeclaredMaxTTLLoweredUnderALiveLease(t *testing.T) {
	svc := s.declService(false)
	name := uniqueTask(t)
	l := claimOK(t, svc, leasecore.ClaimParams{Task: name, Owner: "a", TTL: 2 * time.Minute})
	createTask(t, svc, leasecore.TaskDecl{Name: name, TTL: 30 * time.Second, MaxTTL: time.Minute})
	time.Sleep(2 * time.Millisecond) // past declService's staleness bound
	if _, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: name, Owner: "b"}); !errors.Is(err, leasecore.ErrHeld) {
		t.Fatalf("claim by another owner while the lease is live: %v, want held", err)
	}
	kept := renewOK(t, svc, leasecore.RenewParams{Task: name, Owner: "a", Token: l.Token})
	if kept.TTL != 2*time.Minute {
		t.Errorf("renewal keeping its ttl: ttl %s, want the lease's 2m", kept.TTL)
	}
	_, err := svc.Renew(t.Context(), leasecore.RenewParams{Task: name, Owner: "a", Token: l.Token, TTL: 2 * time.Minute})
	mustInvalid(t, err, "TTL")
	releaseOK(t, svc, name, "a", l.Token)
	_, err = svc.Claim(t.Context(), leasecore.ClaimParams{Task: name, Owner: "a", TTL: 2 * time.Minute})
	mustInvalid(t, err, "TTL")
}

// leasehold's own tasks take their ttls from leasehold: a declaration of
// one (here with a max_ttl the pruner's lease would exceed) does not bound
// their claims, and does not make them required.
func (s *suite) testDeclaredReservedTasks(t *testing.T) {
	svc := s.declService(true)
	name := leasecore.ReservedPrefix + uniqueTask(t)
	createTask(t, svc, leasecore.TaskDecl{Name: name, TTL: time.Second, MaxTTL: time.Second})
	l := claimOK(t, svc, leasecore.ClaimParams{Task: name, Owner: "pruner", TTL: time.Hour})
	if l.TTL != time.Hour {
		t.Errorf("reserved task claimed with ttl %s, want the 1h asked for", l.TTL)
	}
	renewOK(t, svc, leasecore.RenewParams{Task: name, Owner: "pruner", Token: l.Token, TTL: time.Hour})
	other := leasecore.ReservedPrefix + uniqueTask(t) + "-undeclared"
	claimOK(t, svc, leasecore.ClaimParams{Task: other, Owner: "pruner", TTL: time.Minute})
}

// A claim or renewal asking for more than the declared max_ttl is refused
// with a *ValidationError on ttl_ms that names the limit, and nothing is
// written; at the limit it is granted.
func (s *suite) testDeclaredMaxTTL(t *testing.T) {
	svc := s.declService(false)
	name := uniqueTask(t)
	createTask(t, svc, leasecore.TaskDecl{Name: name, TTL: 30 * time.Second, MaxTTL: time.Minute})

	refused := func(what string, err error) {
		t.Helper()
		mustInvalid(t, err, "TTL")
		var ve *leasecore.ValidationError
		if errors.As(err, &ve) && !strings.Contains(ve.Rule, "60000") {
			t.Errorf("%s: rule %q does not name the limit, 60000 ms", what, ve.Rule)
		}
	}
	_, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: name, Owner: "a", TTL: 2 * time.Minute})
	refused("claim above max_ttl", err)
	mustGone(t, s.svc, name)
	if evs := events(t, s.svc, name); len(evs) != 0 {
		t.Errorf("a refused claim recorded history:\n%s", showEvents(evs))
	}

	l := claimOK(t, svc, leasecore.ClaimParams{Task: name, Owner: "a", TTL: time.Minute})
	_, err = svc.Renew(t.Context(), leasecore.RenewParams{Task: name, Owner: "a", TTL: time.Minute + time.Millisecond})
	refused("renew above max_ttl", err)
	_, err = svc.Claim(t.Context(), leasecore.ClaimParams{Task: name, Owner: "a", TTL: 2 * time.Minute})
	refused("refresh above max_ttl", err)
	checkSame(t, "lease after refused renewal and refresh", get(t, s.svc, name), l)

	got := svc.RenewBatch(t.Context(), []leasecore.RenewParams{
		{Task: name, Owner: "a", TTL: 2 * time.Minute},
		{Task: name, Owner: "a", Token: l.Token},
	})
	if len(got) != 2 {
		t.Fatalf("RenewBatch of 2 gave %d results", len(got))
	}
	refused("batch renewal above max_ttl", got[0].Err)
	if got[1].Err != nil || got[1].Lease == nil || got[1].Lease.TTL != time.Minute || got[1].Lease.RenewCount != 1 {
		t.Errorf("batch renewal keeping the ttl: %s, %v; want renewed once with ttl 1m", show(got[1].Lease), got[1].Err)
	}
	renewOK(t, svc, leasecore.RenewParams{Task: name, Owner: "a", TTL: time.Minute})
}

// With declarations required, a claim of an undeclared task is refused with
// *UndeclaredError and writes nothing, while a declared task is claimed
// with its declared ttl.
func (s *suite) testDeclaredRequired(t *testing.T) {
	svc := s.declService(true)
	undeclared := uniqueTask(t)
	for _, ttl := range []time.Duration{0, time.Minute} {
		l, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: undeclared, Owner: "a", TTL: ttl})
		if l != nil {
			t.Errorf("claim of an undeclared task returned %s along with %v", show(l), err)
		}
		mustOutcome(t, "claim of an undeclared task", err, leasecore.ErrUndeclared)
		var ue *leasecore.UndeclaredError
		if !errors.As(err, &ue) || ue.Task != undeclared {
			t.Errorf("claim of an undeclared task: %v (%T), want *UndeclaredError{Task: %q}", err, err, undeclared)
		}
	}
	mustGone(t, s.svc, undeclared)
	if evs := events(t, s.svc, undeclared); len(evs) != 0 {
		t.Errorf("a refused claim recorded history:\n%s", showEvents(evs))
	}

	declared := uniqueTask(t) + "-declared"
	createTask(t, svc, leasecore.TaskDecl{Name: declared, TTL: 40 * time.Second})
	l, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: declared, Owner: "a"})
	if err != nil {
		t.Fatalf("claim of a declared task with declarations required: %v", err)
	}
	if l.TTL != 40*time.Second {
		t.Errorf("claim of a declared task: ttl %v, want the declared 40s", l.TTL)
	}
}

// catalogCall is one catalog operation, through a Service and on the raw
// store, with the op name an *UnavailableError carries.
type catalogCall struct {
	op       string
	viaSvc   func(ctx context.Context, svc *leasecore.Service) error
	viaStore func(ctx context.Context, cat leasecore.CatalogStore) error
}

func catalogCalls(task, policy string) []catalogCall {
	d := leasecore.TaskDecl{Name: task, TTL: time.Minute, RetentionPolicy: leasecore.DefaultPolicy}
	p := leasecore.RetentionPolicy{Name: policy, KeepLast: 1}
	return []catalogCall{
		{"create_task",
			func(ctx context.Context, svc *leasecore.Service) error {
				return errOf(svc.CreateTask(ctx, d, leasecore.Writer{}))
			},
			func(ctx context.Context, cat leasecore.CatalogStore) error {
				return errOf(cat.CreateTask(ctx, d, leasecore.Writer{}))
			}},
		{"update_task",
			func(ctx context.Context, svc *leasecore.Service) error {
				return errOf(svc.UpdateTask(ctx, d, leasecore.Writer{}))
			},
			func(ctx context.Context, cat leasecore.CatalogStore) error {
				return errOf(cat.UpdateTask(ctx, d, leasecore.Writer{}))
			}},
		{"get_task",
			func(ctx context.Context, svc *leasecore.Service) error { return errOf(svc.GetTask(ctx, task)) },
			func(ctx context.Context, cat leasecore.CatalogStore) error { return errOf(cat.GetTask(ctx, task)) }},
		{"list_tasks",
			func(ctx context.Context, svc *leasecore.Service) error {
				return pageErrOf(svc.ListTasks(ctx, leasecore.ListParams{Limit: 10}))
			},
			func(ctx context.Context, cat leasecore.CatalogStore) error {
				return errOf(cat.ListTasks(ctx, leasecore.ListParams{Limit: 10}))
			}},
		{"delete_task",
			func(ctx context.Context, svc *leasecore.Service) error {
				return errOf(svc.DeleteTask(ctx, task, leasecore.Writer{}))
			},
			func(ctx context.Context, cat leasecore.CatalogStore) error {
				return errOf(cat.DeleteTask(ctx, task, leasecore.Writer{}))
			}},
		{"create_policy",
			func(ctx context.Context, svc *leasecore.Service) error {
				return errOf(svc.CreatePolicy(ctx, p, leasecore.Writer{}))
			},
			func(ctx context.Context, cat leasecore.CatalogStore) error {
				return errOf(cat.CreatePolicy(ctx, p, leasecore.Writer{}))
			}},
		{"update_policy",
			func(ctx context.Context, svc *leasecore.Service) error {
				return errOf(svc.UpdatePolicy(ctx, p, leasecore.Writer{}))
			},
			func(ctx context.Context, cat leasecore.CatalogStore) error {
				return errOf(cat.UpdatePolicy(ctx, p, leasecore.Writer{}))
			}},
		{"get_policy",
			func(ctx context.Context, svc *leasecore.Service) error { return errOf(svc.GetPolicy(ctx, policy)) },
			func(ctx context.Context, cat leasecore.CatalogStore) error { return errOf(cat.GetPolicy(ctx, policy)) }},
		{"list_policies",
			func(ctx context.Context, svc *leasecore.Service) error { return errOf(svc.ListPolicies(ctx)) },
			func(ctx context.Context, cat leasecore.CatalogStore) error { return errOf(cat.ListPolicies(ctx)) }},
		{"delete_policy",
			func(ctx context.Context, svc *leasecore.Service) error {
				return errOf(svc.DeletePolicy(ctx, policy, leasecore.Writer{}))
			},
			func(ctx context.Context, cat leasecore.CatalogStore) error {
				return errOf(cat.DeletePolicy(ctx, policy, leasecore.Writer{}))
			}},
		{"history",
			func(ctx context.Context, svc *leasecore.Service) error { return errOf(svc.History(ctx, task, 10)) },
			func(ctx context.Context, cat leasecore.CatalogStore) error { return errOf(cat.History(ctx, task, 10)) }},
		{"prune",
			func(ctx context.Context, svc *leasecore.Service) error { return errOf(svc.PruneHistory(ctx)) },
			func(ctx context.Context, cat leasecore.CatalogStore) error { return errOf(cat.PruneHistory(ctx)) }},
	}
}

// checkCatalogUnavailable fails t unless every catalog operation on st
// answers ErrUnavailable and nothing else (never not found, exists or in
// use): through a Service, and from the raw store as an *UnavailableError
// naming the operation.
func checkCatalogUnavailable(t *testing.T, ctx context.Context, st leasecore.Store, what string) {
	t.Helper()
	cat := leasecore.CatalogStore(st) // the raw driver, below the Service
	svc := leasecore.New(st)
	for _, c := range catalogCalls(uniqueTask(t), uniquePolicy(t, "u")) {
		if err := c.viaSvc(ctx, svc); !errIsUnavailableOnly(err) || errors.Is(err, leasecore.ErrNotFound) ||
			errors.Is(err, leasecore.ErrExists) || errors.Is(err, leasecore.ErrInUse) {
			t.Errorf("%s: %s through Service: got %v, want ErrUnavailable and nothing else", what, c.op, err)
		}
		err := c.viaStore(ctx, cat)
		var ue *leasecore.UnavailableError
		switch {
		case !errIsUnavailableOnly(err) || errors.Is(err, leasecore.ErrNotFound) || errors.Is(err, leasecore.ErrExists) || errors.Is(err, leasecore.ErrInUse):
			t.Errorf("%s: %s on the store: got %v, want ErrUnavailable and nothing else", what, c.op, err)
		case !errors.As(err, &ue):
			t.Errorf("%s: %s on the store: %v (%T) is no *UnavailableError from the driver's interpretError", what, c.op, err, err)
		case ue.Op != c.op:
			t.Errorf("%s: %s on the store: UnavailableError.Op = %q, want %q", what, c.op, ue.Op, c.op)
		case ue.Err == nil:
			t.Errorf("%s: %s on the store: UnavailableError carries no detail", what, c.op)
		}
	}
}

// Every catalog operation on a store without the schema, one that cannot be
// reached, a closed one, and under a cancelled context is unavailable; and
// a claim that must read the declarations is unavailable too, never held.
func (s *suite) testCatalogUnavailable(t *testing.T) {
	checkCatalogUnavailable(t, opCtx(t), s.open(t, s.d.OpenUnmigrated), "unmigrated store")
	checkCatalogUnavailable(t, opCtx(t), s.open(t, s.d.OpenUnreachable), "unreachable store")
	closed := s.open(t, s.d.Open)
	if err := closed.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	checkCatalogUnavailable(t, opCtx(t), closed, "closed store")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	checkCatalogUnavailable(t, ctx, s.store, "cancelled context")

	svc := leasecore.New(s.open(t, s.d.OpenUnreachable), leasecore.WithDeclarations(time.Millisecond, true))
	_, err := svc.Claim(opCtx(t), leasecore.ClaimParams{Task: uniqueTask(t), Owner: "a"})
	if !errIsUnavailableOnly(err) || errors.Is(err, leasecore.ErrUndeclared) {
		t.Errorf("claim on an unreachable store, declarations required: got %v, want ErrUnavailable only", err)
	}
}

// The driver itself answers the catalog's outcomes with their types, so the
// Service's backstop never hides them: *ExistsError, *NotFoundError,
// *InUseError, nil for what does not exist, false for a delete of nothing,
// and an empty history for a task never claimed.
func (s *suite) testCatalogDriverErrors(t *testing.T) {
	ctx := opCtx(t)
	cat := leasecore.CatalogStore(s.store) // the raw driver, below the Service
	task, policy := uniqueTask(t), uniquePolicy(t, "raw")

	if d, err := cat.GetTask(ctx, task); d != nil || err != nil {
		t.Errorf("raw get of an undeclared task = (%s, %v), want (nil, nil)", showDecl(d), err)
	}
	if p, err := cat.GetPolicy(ctx, policy); p != nil || err != nil {
		t.Errorf("raw get of a missing policy = (%s, %v), want (nil, nil)", showPolicy(p), err)
	}
	if evs, err := cat.History(ctx, task, 10); len(evs) != 0 || err != nil {
		t.Errorf("raw history of a task never claimed = (%d events, %v), want (none, nil)", len(evs), err)
	}
	d := leasecore.TaskDecl{Name: task, TTL: time.Minute, RetentionPolicy: policy}
	if got, err := cat.CreateTask(ctx, d, leasecore.Writer{}); got != nil || !isType[*leasecore.NotFoundError](err) {
		t.Errorf("raw create naming a missing policy = (%s, %v %T), want (nil, *NotFoundError)", showDecl(got), err, err)
	}
	if got, err := cat.UpdateTask(ctx, leasecore.TaskDecl{Name: task, TTL: time.Minute, RetentionPolicy: leasecore.DefaultPolicy}, leasecore.Writer{}); got != nil || !isType[*leasecore.NotFoundError](err) {
		t.Errorf("raw update of an undeclared task = (%s, %v %T), want (nil, *NotFoundError)", showDecl(got), err, err)
	}
	if got, err := cat.CreatePolicy(ctx, leasecore.RetentionPolicy{Name: policy, KeepLast: 2}, leasecore.Writer{}); got == nil || err != nil {
		t.Fatalf("raw create policy = (%s, %v)", showPolicy(got), err)
	}
	if got, err := cat.CreatePolicy(ctx, leasecore.RetentionPolicy{Name: policy, KeepLast: 2}, leasecore.Writer{}); got != nil || !isType[*leasecore.ExistsError](err) {
		t.Errorf("raw create of an existing policy = (%s, %v %T), want (nil, *ExistsError)", showPolicy(got), err, err)
	}
	if got, err := cat.CreateTask(ctx, d, leasecore.Writer{}); got == nil || err != nil {
		t.Fatalf("raw create task = (%s, %v)", showDecl(got), err)
	}
	if got, err := cat.CreateTask(ctx, d, leasecore.Writer{}); got != nil || !isType[*leasecore.ExistsError](err) {
		t.Errorf("raw create of an existing task = (%s, %v %T), want (nil, *ExistsError)", showDecl(got), err, err)
	}
	if ok, err := cat.DeletePolicy(ctx, policy, leasecore.Writer{}); ok || !isType[*leasecore.InUseError](err) {
		t.Errorf("raw delete of a policy in use = (%v, %v %T), want (false, *InUseError)", ok, err, err)
	}
	if ok, err := cat.DeletePolicy(ctx, leasecore.DefaultPolicy, leasecore.Writer{}); ok || !isType[*leasecore.InUseError](err) {
		t.Errorf("raw delete of the default policy = (%v, %v %T), want (false, *InUseError)", ok, err, err)
	}
	if ok, err := cat.DeleteTask(ctx, task, leasecore.Writer{}); !ok || err != nil {
		t.Errorf("raw delete task = (%v, %v), want (true, nil)", ok, err)
	}
	if ok, err := cat.DeleteTask(ctx, task, leasecore.Writer{}); ok || err != nil {
		t.Errorf("raw delete of a deleted task = (%v, %v), want (false, nil)", ok, err)
	}
	if got, err := cat.UpdatePolicy(ctx, leasecore.RetentionPolicy{Name: policy + "-none"}, leasecore.Writer{}); got != nil || !isType[*leasecore.NotFoundError](err) {
		t.Errorf("raw update of a missing policy = (%s, %v %T), want (nil, *NotFoundError)", showPolicy(got), err, err)
	}
}

// isType reports whether err is (or wraps) an error of type E.
func isType[E error](err error) bool {
	var e E
	return errors.As(err, &e)
}
