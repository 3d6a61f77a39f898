package sidecar

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// put sends v as the JSON body of a PUT.
func (ts *testServer) put(path string, v any) response {
	ts.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		ts.t.Fatal(err)
	}
	return ts.do(http.MethodPut, path, "application/json", b)
}

func (ts *testServer) delete(path string) response {
	ts.t.Helper()
	return ts.do(http.MethodDelete, path, "", nil)
}

// TestDeclareRoutes: an admin declares a task (201, then 200 on a change),
// a policy, removes both (204, then 404); the answers say managed_by
// operator, and a claim gets the declared ttl.
func TestDeclareRoutes(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		r := ts.put("/v1/policies/weekly", map[string]any{"keep_for_ms": 604800000, "keep_last": 50})
		expect(t, r, http.StatusCreated)
		p := decode[api.RetentionPolicy](t, r)
		if p.Name != "weekly" || p.KeepForMs != 604800000 || p.KeepLast != 50 || p.ManagedBy != api.Operator {
			t.Errorf("PUT policy answered %+v", p)
		}
		expect(t, ts.put("/v1/policies/weekly", map[string]any{"keep_last": 5}), http.StatusOK)
		if got := decode[api.RetentionPolicy](t, ts.get("/v1/policies/weekly")); got.KeepForMs != 0 || got.KeepLast != 5 {
			t.Errorf("GET policy after the change: %+v, want keep_for_ms 0 (absent) and keep_last 5", got)
		}

		r = ts.put("/v1/tasks/billing%2Fnightly", map[string]any{"ttl_ms": 600000, "max_ttl_ms": 3600000, "description": "report", "retention_policy": "weekly"})
		expect(t, r, http.StatusCreated)
		d := decode[api.TaskDeclaration](t, r)
		if d.Name != "billing/nightly" || d.TtlMs != 600000 || d.MaxTtlMs == nil || *d.MaxTtlMs != 3600000 || d.RetentionPolicy != "weekly" || d.ManagedBy != api.Operator {
			t.Errorf("PUT task answered %+v", d)
		}
		r = ts.put("/v1/tasks/billing%2Fnightly", map[string]any{"ttl_ms": 300000})
		expect(t, r, http.StatusOK)
		if d := decode[api.TaskDeclaration](t, r); d.TtlMs != 300000 || d.MaxTtlMs != nil || d.RetentionPolicy != leasecore.DefaultPolicy {
			t.Errorf("PUT replaces the whole declaration; answered %+v", d)
		}
		lease := decode[api.ClaimAcquired](t, ts.post("/v1/leases/billing%2Fnightly/claim", map[string]any{"owner": "w1"})).Lease
		if lease.TtlMs != 300000 {
			t.Errorf("a claim of the declared task got ttl_ms %d, want the declared 300000", lease.TtlMs)
		}

		expectProblem(t, ts.delete("/v1/policies/default"), http.StatusConflict, problemInUse)
		expect(t, ts.delete("/v1/tasks/billing%2Fnightly"), http.StatusNoContent)
		expectProblem(t, ts.delete("/v1/tasks/billing%2Fnightly"), http.StatusNotFound, problemUndeclared)
		expectProblem(t, ts.get("/v1/tasks/billing%2Fnightly"), http.StatusNotFound, problemUndeclared)
		expect(t, ts.delete("/v1/policies/weekly"), http.StatusNoContent)
		expectProblem(t, ts.delete("/v1/policies/weekly"), http.StatusNotFound, problemNotFound)
		expectProblem(t, ts.get("/v1/policies/weekly"), http.StatusNotFound, problemNotFound)
	})
}

// TestDeclareManagedByTerraform: what the provider declared is refused to
// the HTTP API with 409 managed-by-terraform, nothing written, until the
// request takes it over.
func TestDeclareManagedByTerraform(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		svc := leasecore.New(ts.store)
		tf := leasecore.Writer{By: leasecore.ManagedByTerraform}
		if _, err := svc.CreatePolicy(t.Context(), leasecore.RetentionPolicy{Name: "audit", KeepLast: 10}, tf); err != nil {
			t.Fatal(err)
		}
		before, err := svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: "nightly", TTL: time.Minute, RetentionPolicy: "audit"}, tf)
		if err != nil {
			t.Fatal(err)
		}
		if d := decode[api.TaskDeclaration](t, ts.get("/v1/tasks/nightly")); d.ManagedBy != api.Terraform {
			t.Errorf("GET shows managed_by %q, want terraform", d.ManagedBy)
		}
		for _, r := range []response{
			ts.put("/v1/tasks/nightly", map[string]any{"ttl_ms": 5000}),
			ts.delete("/v1/tasks/nightly"),
			ts.put("/v1/policies/audit", map[string]any{"keep_last": 1}),
			ts.delete("/v1/policies/audit"),
		} {
			p := expectProblem(t, r, http.StatusConflict, problemManaged)
			if !strings.Contains(p.Detail, "managed by Terraform: change it in the configuration, or remove it from the Terraform state first (terraform state rm)") ||
				!strings.Contains(p.Detail, "take_over=true") {
				t.Errorf("409 detail %q does not say what to do", p.Detail)
			}
		}
		after, err := svc.GetTask(t.Context(), "nightly")
		if err != nil || after == nil || after.TTL != before.TTL || !after.UpdatedAt.Equal(before.UpdatedAt) || after.ManagedBy != leasecore.ManagedByTerraform {
			t.Errorf("after refused writes the declaration is %+v (%v), want %+v", after, err, before)
		}

		r := ts.put("/v1/tasks/nightly?take_over=true", map[string]any{"ttl_ms": 5000})
		expect(t, r, http.StatusOK)
		if d := decode[api.TaskDeclaration](t, r); d.ManagedBy != api.Operator || d.TtlMs != 5000 {
			t.Errorf("taken over: %+v, want ttl_ms 5000 managed by operator", d)
		}
		expect(t, ts.delete("/v1/tasks/nightly"), http.StatusNoContent)
		expect(t, ts.delete("/v1/policies/audit?take_over=true"), http.StatusNoContent)
	})
}

// TestDeclareNeedsAdmin: declarations need admin on the task, policies
// admin on every task; a refused write writes nothing.
func TestDeclareNeedsAdmin(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withCredentials(credentialsBook(t)))
	billing, dash, ops := ts.as(billingToken), ts.as(dashToken), ts.as(opsToken)
	for _, who := range []*testServer{billing, dash} {
		expectProblem(t, who.put("/v1/tasks/billing%2Fjob", map[string]any{"ttl_ms": 5000}), http.StatusForbidden, problemForbidden)
		expectProblem(t, who.put("/v1/policies/p", map[string]any{"keep_last": 1}), http.StatusForbidden, problemForbidden)
	}
	expectProblem(t, ts.as(opsToken).get("/v1/tasks/billing%2Fjob"), http.StatusNotFound, problemUndeclared)
	expectProblem(t, ops.get("/v1/policies/p"), http.StatusNotFound, problemNotFound)

	expect(t, ops.put("/v1/tasks/billing%2Fjob", map[string]any{"ttl_ms": 5000}), http.StatusCreated)
	expectForbidden(t, billing.delete("/v1/tasks/billing%2Fjob"), "billing", "billing/job")
	expect(t, dash.get("/v1/tasks/billing%2Fjob"), http.StatusOK)
}

// TestDeclareBadInput: each rule is refused naming the field, nothing
// written.
func TestDeclareBadInput(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	cases := []struct {
		path  string
		body  any
		field string
	}{
		{"/v1/tasks/t", map[string]any{}, "ttl_ms"},
		{"/v1/tasks/t", map[string]any{"ttl_ms": 50}, "ttl_ms"},
		{"/v1/tasks/t", map[string]any{"ttl_ms": 60000, "max_ttl_ms": 1000}, "ttl_ms"},
		{"/v1/tasks/t", map[string]any{"ttl_ms": 1000, "description": strings.Repeat("x", 1025)}, "description"},
		{"/v1/tasks/t", map[string]any{"ttl_ms": 1000, "retention_policy": "a b"}, "retention_policy"},
		{"/v1/tasks/t", map[string]any{"ttl_ms": 1000, "description": "a\x00b"}, "description"},
		{"/v1/tasks/a%20b", map[string]any{"ttl_ms": 1000}, "task"},
		{"/v1/tasks/t?take_over=maybe", map[string]any{"ttl_ms": 1000}, "take_over"},
		{"/v1/policies/p", map[string]any{"keep_for_ms": 1500}, "keep_for_ms"},
		{"/v1/policies/p", map[string]any{"keep_last": -1}, "keep_last"},
		{"/v1/policies/a%20b", map[string]any{"keep_last": 1}, "policy"},
	}
	for _, c := range cases {
		r := ts.put(c.path, c.body)
		p := expectProblem(t, r, http.StatusUnprocessableEntity, problemInvalid)
		if p.InvalidParams == nil || len(*p.InvalidParams) == 0 || (*p.InvalidParams)[0].Name != c.field {
			t.Errorf("PUT %s %v: invalid_params %v, want %s", c.path, c.body, p.InvalidParams, c.field)
		}
	}
	expectProblem(t, ts.put("/v1/tasks/t", map[string]any{"ttl_ms": 1000, "retention_policy": "nope"}), http.StatusNotFound, problemNotFound)
	expectProblem(t, ts.get("/v1/tasks/t"), http.StatusNotFound, problemUndeclared)
	expectProblem(t, ts.get("/v1/policies/p"), http.StatusNotFound, problemNotFound)
}
