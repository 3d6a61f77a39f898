package client

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// The catalog: task declarations and retention policies, read and written
// as an operator (the admin right). Absence reads as the Service says it: a
// nil declaration or policy, a removal that reports false. A write of what
// Terraform manages is refused with an error that is
// leasecore.ErrManaged, unless the call takes it over.

func declPath(task string) string     { return "/v1/tasks/" + url.PathEscape(task) }
func policyPath(policy string) string { return "/v1/policies/" + url.PathEscape(policy) }

// withTakeOver adds take_over=true to path when takeOver.
func withTakeOver(path string, takeOver bool) string {
	if takeOver {
		return path + "?take_over=true"
	}
	return path
}

// ListTasks returns one page of the declarations the credential may read,
// by name, and the name to continue after ("" on the last page).
func (c *Client) ListTasks(ctx context.Context, p ListParams) ([]leasecore.TaskDecl, string, error) {
	x, err := c.do(ctx, "list_tasks", http.MethodGet, "/v1/tasks", p.path("/v1/tasks"), nil)
	if err != nil {
		return nil, "", err
	}
	if x.status != http.StatusOK {
		return nil, "", c.refusal("list_tasks", "", x)
	}
	var l api.TaskList
	if err := c.decode("list_tasks", x, &l); err != nil {
		return nil, "", err
	}
	next, err := c.nextAfter("list_tasks", x, l.NextAfter, p.After)
	if err != nil {
		return nil, "", err
	}
	decls := make([]leasecore.TaskDecl, len(l.Tasks))
	for i := range l.Tasks {
		if decls[i], err = api.ToTask(&l.Tasks[i]); err != nil {
			return nil, "", c.notSidecar("list_tasks", x, &notTheAPI{err.Error()})
		}
	}
	return decls, next, nil
}

// GetTask returns the task's declaration, or nil when it is not declared.
func (c *Client) GetTask(ctx context.Context, task string) (*leasecore.TaskDecl, error) {
	x, err := c.do(ctx, "get_task", http.MethodGet, "/v1/tasks/{task}", declPath(task), nil)
	if err != nil {
		return nil, err
	}
	if x.status == http.StatusNotFound && problemTypeOf(x) == api.ProblemUndeclared {
		return nil, nil
	}
	return c.task("get_task", task, x, http.StatusOK)
}

// DeclareTask declares the task, or replaces its declaration, as an
// operator, and reports whether it created it. The sidecar refuses a
// declaration Terraform manages (leasecore.ErrManaged) unless takeOver,
// which makes it the operator's.
func (c *Client) DeclareTask(ctx context.Context, d leasecore.TaskDecl, takeOver bool) (*leasecore.TaskDecl, bool, error) {
	req := api.TaskDeclarationRequest{TtlMs: d.TTL.Milliseconds(), MaxTtlMs: millis(d.MaxTTL)}
	if d.Description != "" {
		req.Description = &d.Description
	}
	if d.RetentionPolicy != "" {
		req.RetentionPolicy = &d.RetentionPolicy
	}
	x, err := c.do(ctx, "declare_task", http.MethodPut, "/v1/tasks/{task}", withTakeOver(declPath(d.Name), takeOver), req)
	if err != nil {
		return nil, false, err
	}
	out, err := c.task("declare_task", d.Name, x, http.StatusOK, http.StatusCreated)
	return out, err == nil && x.status == http.StatusCreated, err
}

// RemoveTask removes the task's declaration as an operator and reports
// whether there was one; refused as DeclareTask is.
func (c *Client) RemoveTask(ctx context.Context, task string, takeOver bool) (bool, error) {
	x, err := c.do(ctx, "remove_task", http.MethodDelete, "/v1/tasks/{task}", withTakeOver(declPath(task), takeOver), nil)
	switch {
	case err != nil:
		return false, err
	case x.status == http.StatusNoContent:
		return true, nil
	case x.status == http.StatusNotFound && problemTypeOf(x) == api.ProblemUndeclared:
		return false, nil
	}
	return false, c.refusal("remove_task", "", x)
}

// task reads a declaration of task answered with one of the statuses ok.
func (c *Client) task(op, task string, x *exchange, ok ...int) (*leasecore.TaskDecl, error) {
	if !slices.Contains(ok, x.status) {
		return nil, c.refusal(op, "", x)
	}
	var a api.TaskDeclaration
	if err := c.decode(op, x, &a); err != nil {
		return nil, err
	}
	if a.Name != task {
		return nil, c.notSidecar(op, x, &notTheAPI{fmt.Sprintf("the declaration is of task %q", a.Name)})
	}
	d, err := api.ToTask(&a)
	if err != nil {
		return nil, c.notSidecar(op, x, &notTheAPI{err.Error()})
	}
	return &d, nil
}

// ListPolicies returns every retention policy, by name.
func (c *Client) ListPolicies(ctx context.Context) ([]leasecore.RetentionPolicy, error) {
	x, err := c.do(ctx, "list_policies", http.MethodGet, "/v1/policies", "/v1/policies", nil)
	if err != nil {
		return nil, err
	}
	if x.status != http.StatusOK {
		return nil, c.refusal("list_policies", "", x)
	}
	var l api.PolicyList
	if err := c.decode("list_policies", x, &l); err != nil {
		return nil, err
	}
	out := make([]leasecore.RetentionPolicy, len(l.Policies))
	for i := range l.Policies {
		if out[i], err = api.ToPolicy(&l.Policies[i]); err != nil {
			return nil, c.notSidecar("list_policies", x, &notTheAPI{err.Error()})
		}
	}
	return out, nil
}

// GetPolicy returns the retention policy, or nil when there is none.
func (c *Client) GetPolicy(ctx context.Context, name string) (*leasecore.RetentionPolicy, error) {
	x, err := c.do(ctx, "get_policy", http.MethodGet, "/v1/policies/{policy}", policyPath(name), nil)
	if err != nil {
		return nil, err
	}
	if x.status == http.StatusNotFound && problemTypeOf(x) == api.ProblemNotFound {
		return nil, nil
	}
	return c.policy("get_policy", name, x, http.StatusOK)
}

// DeclarePolicy creates or replaces the retention policy as an operator
// (the admin right on every task), and reports whether it created it;
// refused as DeclareTask is.
func (c *Client) DeclarePolicy(ctx context.Context, p leasecore.RetentionPolicy, takeOver bool) (*leasecore.RetentionPolicy, bool, error) {
	keepFor, keepLast := p.KeepFor.Milliseconds(), p.KeepLast
	req := api.PolicyRequest{KeepForMs: &keepFor, KeepLast: &keepLast}
	x, err := c.do(ctx, "declare_policy", http.MethodPut, "/v1/policies/{policy}", withTakeOver(policyPath(p.Name), takeOver), req)
	if err != nil {
		return nil, false, err
	}
	out, err := c.policy("declare_policy", p.Name, x, http.StatusOK, http.StatusCreated)
	return out, err == nil && x.status == http.StatusCreated, err
}

// RemovePolicy removes the retention policy as an operator and reports
// whether there was one: leasecore.ErrInUse for the default policy and for
// one that tasks name, and refused as DeclareTask is.
func (c *Client) RemovePolicy(ctx context.Context, name string, takeOver bool) (bool, error) {
	x, err := c.do(ctx, "remove_policy", http.MethodDelete, "/v1/policies/{policy}", withTakeOver(policyPath(name), takeOver), nil)
	switch {
	case err != nil:
		return false, err
	case x.status == http.StatusNoContent:
		return true, nil
	case x.status == http.StatusNotFound && problemTypeOf(x) == api.ProblemNotFound:
		return false, nil
	}
	return false, c.refusal("remove_policy", "", x)
}

// policy reads a policy named name answered with one of the statuses ok.
func (c *Client) policy(op, name string, x *exchange, ok ...int) (*leasecore.RetentionPolicy, error) {
	if !slices.Contains(ok, x.status) {
		return nil, c.refusal(op, "", x)
	}
	var a api.RetentionPolicy
	if err := c.decode(op, x, &a); err != nil {
		return nil, err
	}
	if a.Name != name {
		return nil, c.notSidecar(op, x, &notTheAPI{fmt.Sprintf("the policy is %q", a.Name)})
	}
	p, err := api.ToPolicy(&a)
	if err != nil {
		return nil, c.notSidecar(op, x, &notTheAPI{err.Error()})
	}
	return &p, nil
}

// problemTypeOf is the type of a problem answer, "" for any other answer.
func problemTypeOf(x *exchange) string {
	var p struct {
		Type string `json:"type"`
	}
	if mt, _, _ := mime.ParseMediaType(x.header.Get("Content-Type")); mt != "application/problem+json" || json.Unmarshal(x.body, &p) != nil {
		return ""
	}
	return p.Type
}
