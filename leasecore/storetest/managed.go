package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// Who manages a declaration or a policy (leasecore.Writer, TaskDecl.ManagedBy):
// the store records the writer of each, and refuses an operator's change or
// removal of what Terraform manages, unless the operator takes it over;
// Terraform's writes adopt what an operator declared.

var (
	asTerraform = leasecore.Writer{By: leasecore.ManagedByTerraform}
	asOperator  = leasecore.Writer{By: leasecore.ManagedByOperator}
	takingOver  = leasecore.Writer{By: leasecore.ManagedByOperator, TakeOver: true}
)

// mustManaged fails t unless err refuses an operator's write of the kind
// named name, which Terraform manages.
func mustManaged(t *testing.T, what string, err error, kind, name string) {
	t.Helper()
	mustOutcome(t, what, err, leasecore.ErrManaged)
	var me *leasecore.ManagedError
	if !errors.As(err, &me) {
		t.Fatalf("%s: %v (%T) is ErrManaged but no *ManagedError", what, err, err)
	}
	if me.Kind != kind || me.Name != name || me.By != leasecore.ManagedByTerraform {
		t.Errorf("%s: ManagedError{Kind: %q, Name: %q, By: %q}, want {%q, %q, %q}", what, me.Kind, me.Name, me.By, kind, name, leasecore.ManagedByTerraform)
	}
}

func putTask(t *testing.T, svc *leasecore.Service, create bool, d leasecore.TaskDecl, w leasecore.Writer) *leasecore.TaskDecl {
	t.Helper()
	put, what := svc.UpdateTask, "update"
	if create {
		put, what = svc.CreateTask, "create"
	}
	got, err := put(t.Context(), d, w)
	if err != nil {
		t.Fatalf("%s task %s as %+v: %v", what, d.Name, w, err)
	}
	want := d
	if want.RetentionPolicy == "" {
		want.RetentionPolicy = leasecore.DefaultPolicy
	}
	want.ManagedBy = w.Manager()
	checkDecl(t, what+" task "+d.Name, got, want)
	return got
}

func putPolicy(t *testing.T, svc *leasecore.Service, create bool, p leasecore.RetentionPolicy, w leasecore.Writer) *leasecore.RetentionPolicy {
	t.Helper()
	put, what := svc.UpdatePolicy, "update"
	if create {
		put, what = svc.CreatePolicy, "create"
	}
	got, err := put(t.Context(), p, w)
	if err != nil {
		t.Fatalf("%s policy %s as %+v: %v", what, p.Name, w, err)
	}
	want := p
	want.ManagedBy = w.Manager()
	checkPolicy(t, what+" policy "+p.Name, got, want)
	return got
}

// The writer of a declaration or policy is recorded as its manager (the
// zero Writer is an operator), and get and list show it; the default
// policy, which Migrate creates, is an operator's.
func (s *suite) testManagedRecorded(t *testing.T) {
	name := uniqueTask(t)
	tf := putTask(t, s.svc, true, leasecore.TaskDecl{Name: name + "-tf", TTL: time.Minute}, asTerraform)
	op := putTask(t, s.svc, true, leasecore.TaskDecl{Name: name + "-op", TTL: time.Minute}, leasecore.Writer{})
	sameDecl(t, "get the provider's declaration", getTask(t, s.svc, tf.Name), tf)
	sameDecl(t, "list entry of the provider's declaration", findTask(t, s.svc, tf.Name), tf)
	sameDecl(t, "get the operator's declaration", getTask(t, s.svc, op.Name), op)
	sameDecl(t, "list entry of the operator's declaration", findTask(t, s.svc, op.Name), op)

	ptf := putPolicy(t, s.svc, true, leasecore.RetentionPolicy{Name: uniquePolicy(t, "tf"), KeepLast: 3}, asTerraform)
	pop := putPolicy(t, s.svc, true, leasecore.RetentionPolicy{Name: uniquePolicy(t, "op"), KeepLast: 3}, asOperator)
	samePolicy(t, "get the provider's policy", getPolicy(t, s.svc, ptf.Name), ptf)
	samePolicy(t, "get the operator's policy", getPolicy(t, s.svc, pop.Name), pop)
	for _, p := range policiesListed(t, s.svc) {
		switch p.Name {
		case ptf.Name:
			samePolicy(t, "list entry of the provider's policy", &p, ptf)
		case pop.Name:
			samePolicy(t, "list entry of the operator's policy", &p, pop)
		}
	}
	if d := getPolicy(t, s.svc, leasecore.DefaultPolicy); d == nil || d.ManagedBy != leasecore.ManagedByOperator {
		t.Errorf("default policy %s, want managed by %q", showPolicy(d), leasecore.ManagedByOperator)
	}
}

// A manager's update of what it manages goes through and keeps it its own.
func (s *suite) testManagedSameManagerUpdates(t *testing.T) {
	name := uniqueTask(t)
	for _, w := range []leasecore.Writer{asTerraform, asOperator} {
		task := name + "-" + string(w.By)
		putTask(t, s.svc, true, leasecore.TaskDecl{Name: task, TTL: time.Minute}, w)
		putTask(t, s.svc, false, leasecore.TaskDecl{Name: task, TTL: 2 * time.Minute, Description: "changed"}, w)
		policy := uniquePolicy(t, string(w.By))
		putPolicy(t, s.svc, true, leasecore.RetentionPolicy{Name: policy, KeepLast: 1}, w)
		putPolicy(t, s.svc, false, leasecore.RetentionPolicy{Name: policy, KeepLast: 2}, w)
		if ok, err := s.svc.DeleteTask(t.Context(), task, w); !ok || err != nil {
			t.Errorf("delete by its own manager %s: (%v, %v), want (true, nil)", w.By, ok, err)
		}
		if ok, err := s.svc.DeletePolicy(t.Context(), policy, w); !ok || err != nil {
			t.Errorf("delete policy by its own manager %s: (%v, %v), want (true, nil)", w.By, ok, err)
		}
	}
}

// An operator may not change or remove what Terraform manages: each write
// is refused with *ManagedError and nothing changes. The refusal comes
// before the check that tasks use a policy.
func (s *suite) testManagedOperatorRefused(t *testing.T) {
	name := uniqueTask(t)
	policy := putPolicy(t, s.svc, true, leasecore.RetentionPolicy{Name: uniquePolicy(t, "tf"), KeepFor: time.Hour, KeepLast: 3}, asTerraform)
	decl := putTask(t, s.svc, true, leasecore.TaskDecl{Name: name, TTL: time.Minute, RetentionPolicy: policy.Name}, asTerraform)
	for _, w := range []leasecore.Writer{{}, asOperator} {
		got, err := s.svc.UpdateTask(t.Context(), leasecore.TaskDecl{Name: name, TTL: 5 * time.Minute}, w)
		if got != nil {
			t.Errorf("refused update returned %s", showDecl(got))
		}
		mustManaged(t, "operator's update of the provider's declaration", err, "task", name)
		ok, err := s.svc.DeleteTask(t.Context(), name, w)
		if ok {
			t.Error("refused delete reported true")
		}
		mustManaged(t, "operator's delete of the provider's declaration", err, "task", name)
		sameDecl(t, "declaration after refused writes", getTask(t, s.svc, name), decl)

		p, err := s.svc.UpdatePolicy(t.Context(), leasecore.RetentionPolicy{Name: policy.Name, KeepLast: 1}, w)
		if p != nil {
			t.Errorf("refused policy update returned %s", showPolicy(p))
		}
		mustManaged(t, "operator's update of the provider's policy", err, "retention policy", policy.Name)
		ok, err = s.svc.DeletePolicy(t.Context(), policy.Name, w)
		if ok {
			t.Error("refused policy delete reported true")
		}
		mustManaged(t, "operator's delete of the provider's policy, which a task names", err, "retention policy", policy.Name)
		samePolicy(t, "policy after refused writes", getPolicy(t, s.svc, policy.Name), policy)
	}
	// Creating over it is the usual ExistsError, whoever writes.
	_, err := s.svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: name, TTL: time.Minute}, asOperator)
	mustExists(t, "operator's create over the provider's declaration", err, "task", name)
}

// An operator who takes over (after terraform state rm) may change and
// remove what Terraform managed, and manages it from then on.
func (s *suite) testManagedTakeOver(t *testing.T) {
	name := uniqueTask(t)
	putTask(t, s.svc, true, leasecore.TaskDecl{Name: name, TTL: time.Minute}, asTerraform)
	putTask(t, s.svc, false, leasecore.TaskDecl{Name: name, TTL: 2 * time.Minute}, takingOver)
	putTask(t, s.svc, false, leasecore.TaskDecl{Name: name, TTL: 3 * time.Minute}, asOperator)
	putTask(t, s.svc, true, leasecore.TaskDecl{Name: name + "-gone", TTL: time.Minute}, asTerraform)
	if ok, err := s.svc.DeleteTask(t.Context(), name+"-gone", takingOver); !ok || err != nil {
		t.Errorf("delete taking over: (%v, %v), want (true, nil)", ok, err)
	}
	mustNoTask(t, s.svc, name+"-gone")

	policy := uniquePolicy(t, "tf")
	putPolicy(t, s.svc, true, leasecore.RetentionPolicy{Name: policy, KeepLast: 1}, asTerraform)
	putPolicy(t, s.svc, false, leasecore.RetentionPolicy{Name: policy, KeepLast: 2}, takingOver)
	putPolicy(t, s.svc, true, leasecore.RetentionPolicy{Name: policy + "-gone", KeepLast: 1}, asTerraform)
	if ok, err := s.svc.DeletePolicy(t.Context(), policy+"-gone", takingOver); !ok || err != nil {
		t.Errorf("delete policy taking over: (%v, %v), want (true, nil)", ok, err)
	}
	mustNoPolicy(t, s.svc, policy+"-gone")
}

// Terraform's update of an operator's declaration (after an import) makes
// it Terraform's, and operators' writes are refused from then on.
func (s *suite) testManagedTerraformAdopts(t *testing.T) {
	name := uniqueTask(t)
	putTask(t, s.svc, true, leasecore.TaskDecl{Name: name, TTL: time.Minute}, asOperator)
	putTask(t, s.svc, false, leasecore.TaskDecl{Name: name, TTL: time.Minute}, asTerraform)
	_, err := s.svc.UpdateTask(t.Context(), leasecore.TaskDecl{Name: name, TTL: 2 * time.Minute}, asOperator)
	mustManaged(t, "operator's update after Terraform adopted the declaration", err, "task", name)

	policy := uniquePolicy(t, "op")
	putPolicy(t, s.svc, true, leasecore.RetentionPolicy{Name: policy, KeepLast: 1}, asOperator)
	putPolicy(t, s.svc, false, leasecore.RetentionPolicy{Name: policy, KeepLast: 1}, asTerraform)
	_, err = s.svc.DeletePolicy(t.Context(), policy, asOperator)
	mustManaged(t, "operator's delete after Terraform adopted the policy", err, "retention policy", policy)
}

// A writer naming an unknown manager is refused, naming ManagedBy, and
// nothing is written.
func (s *suite) testManagedBadWriter(t *testing.T) {
	name := uniqueTask(t)
	bad := leasecore.Writer{By: "someone"}
	_, err := s.svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: name, TTL: time.Minute}, bad)
	mustInvalid(t, err, "ManagedBy")
	mustNoTask(t, s.svc, name)
	policy := uniquePolicy(t, "bad")
	_, err = s.svc.CreatePolicy(t.Context(), leasecore.RetentionPolicy{Name: policy, KeepLast: 1}, bad)
	mustInvalid(t, err, "ManagedBy")
	mustNoPolicy(t, s.svc, policy)
	putTask(t, s.svc, true, leasecore.TaskDecl{Name: name, TTL: time.Minute}, asTerraform)
	_, err = s.svc.DeleteTask(t.Context(), name, bad)
	mustInvalid(t, err, "ManagedBy")
	if getTask(t, s.svc, name) == nil {
		t.Error("a refused delete deleted the declaration")
	}
}

// Declare creates a declaration or policy when there is none and replaces
// it when there is (saying which), refused as an update is.
func (s *suite) testManagedDeclare(t *testing.T) {
	name := uniqueTask(t)
	for i, want := range []bool{true, false} {
		d, created, err := s.svc.DeclareTask(t.Context(), leasecore.TaskDecl{Name: name, TTL: time.Duration(i+1) * time.Minute}, asOperator)
		if err != nil || created != want {
			t.Fatalf("declare %d: created %v, %v; want created %v", i+1, created, err, want)
		}
		checkDecl(t, "declared task", d, leasecore.TaskDecl{Name: name, TTL: time.Duration(i+1) * time.Minute,
			RetentionPolicy: leasecore.DefaultPolicy, ManagedBy: leasecore.ManagedByOperator})
		sameDecl(t, "get after declare", getTask(t, s.svc, name), d)
	}
	policy := uniquePolicy(t, "decl")
	for i, want := range []bool{true, false} {
		p, created, err := s.svc.DeclarePolicy(t.Context(), leasecore.RetentionPolicy{Name: policy, KeepLast: int64(i + 1)}, asOperator)
		if err != nil || created != want {
			t.Fatalf("declare policy %d: created %v, %v; want created %v", i+1, created, err, want)
		}
		samePolicy(t, "get after declare", getPolicy(t, s.svc, policy), p)
	}
	tf := putTask(t, s.svc, true, leasecore.TaskDecl{Name: name + "-tf", TTL: time.Minute}, asTerraform)
	_, _, err := s.svc.DeclareTask(t.Context(), leasecore.TaskDecl{Name: tf.Name, TTL: 2 * time.Minute}, asOperator)
	mustManaged(t, "operator's declare over the provider's declaration", err, "task", tf.Name)
	sameDecl(t, "declaration after a refused declare", getTask(t, s.svc, tf.Name), tf)
	_, _, err = s.svc.DeclareTask(t.Context(), leasecore.TaskDecl{Name: name + "-nopolicy", TTL: time.Minute, RetentionPolicy: policy + "-none"}, asOperator)
	mustNotFound(t, "declare naming a missing policy", err, "retention policy", policy+"-none")
	mustNoTask(t, s.svc, name+"-nopolicy")
}
