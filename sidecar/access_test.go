package sidecar

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// The credentials of the scope tests: billing holds billing/ tasks, dash
// reads every task, ops is an admin of every task.
const (
	billingToken = "lh_billing-secret-token"
	dashToken    = "lh_dash-secret-token"
	opsToken     = "lh_ops-secret-token"
)

func credentialsBook(t *testing.T) *auth.Book {
	t.Helper()
	return newTenantFile(t, auth.BookOptions{}, billingHold, dashRead, opsAdmin).book
}

func withCredentials(b *auth.Book) serverOption { return func(o *Options) { o.Credentials = b } }

// as returns a copy of ts that sends token.
func (ts *testServer) as(token string) *testServer {
	c := *ts
	c.token = token
	return &c
}

// expectForbidden checks a 403 scope problem: it names the credential and
// the task, and never a token.
func expectForbidden(t *testing.T, r response, credential, task string) {
	t.Helper()
	p := expectProblem(t, r, http.StatusForbidden, problemForbidden)
	if !strings.Contains(p.Detail, fmt.Sprintf("credential %q", credential)) || (task != "" && !strings.Contains(p.Detail, fmt.Sprintf("%q", task))) {
		t.Errorf("403 detail %q does not name credential %q and task %q", p.Detail, credential, task)
	}
	for _, tok := range []string{billingToken, dashToken, opsToken} {
		if strings.Contains(string(r.body), tok) {
			t.Errorf("403 body carries a token: %s", r.body)
		}
	}
}

// TestScopedCredentials: each credential acts only on its tasks, with its
// right; what it may not do is refused 403 and writes nothing; lists
// answer only its tasks.
func TestScopedCredentials(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		billing, dash, ops := ts.as(billingToken), ts.as(dashToken), ts.as(opsToken)

		expect(t, billing.post("/v1/leases/billing%2Fnightly/claim", map[string]any{"owner": "b1"}), http.StatusOK)
		expect(t, billing.post("/v1/leases/reports:weekly/claim", map[string]any{"owner": "b1"}), http.StatusOK)
		expect(t, ops.post("/v1/leases/payroll%2Frun/claim", map[string]any{"owner": "o1"}), http.StatusOK)

		// Outside its prefixes: every lease route, and the declarations.
		for _, r := range []struct {
			name string
			resp response
		}{
			{"claim", billing.post("/v1/leases/payroll%2Frun/claim", map[string]any{"owner": "b1"})},
			{"claim of a new task", billing.post("/v1/leases/payroll%2Fnew/claim", map[string]any{"owner": "b1"})},
			{"renew", billing.post("/v1/leases/payroll%2Frun/renew", map[string]any{"owner": "o1"})},
			{"release", billing.post("/v1/leases/payroll%2Frun/release", map[string]any{"owner": "o1"})},
			{"keepalive", billing.get("/v1/leases/payroll%2Frun/keepalive?owner=b1")},
			{"get", billing.get("/v1/leases/payroll%2Frun")},
			{"history", billing.get("/v1/leases/payroll%2Frun/history")},
			{"task", billing.get("/v1/tasks/payroll%2Frun")},
		} {
			t.Run(r.name, func(t *testing.T) {
				task := "payroll/run"
				if r.name == "claim of a new task" {
					task = "payroll/new"
				}
				expectForbidden(t, r.resp, "billing", task)
			})
		}
		// A reader may not hold.
		expectForbidden(t, dash.post("/v1/leases/billing%2Fother/claim", map[string]any{"owner": "d"}), "dash", "billing/other")
		expectForbidden(t, dash.post("/v1/leases/billing%2Fnightly/release", map[string]any{"owner": "b1"}), "dash", "billing/nightly")

		// Nothing was written by the refusals: payroll/run is still o1's,
		// payroll/new was never granted, billing/nightly still b1's.
		if l := decode[api.LeaseState](t, ops.get("/v1/leases/payroll%2Frun")); !l.Held || l.Lease.Owner != "o1" || l.Lease.Token != 1 {
			t.Errorf("payroll/run after refused calls: %+v", l)
		}
		if h := decode[api.EventList](t, ops.get("/v1/leases/payroll%2Fnew/history")); len(h.Events) != 0 {
			t.Errorf("a refused claim wrote history: %+v", h.Events)
		}
		if l := decode[api.LeaseState](t, dash.get("/v1/leases/billing%2Fnightly")); !l.Held || l.Lease.Owner != "b1" {
			t.Errorf("billing/nightly after refused calls: %+v", l)
		}

		// The history names the credential that acted, never its token.
		expect(t, billing.post("/v1/leases/billing%2Fnightly/release", map[string]any{"owner": "b1"}), http.StatusOK)
		events := decode[api.EventList](t, dash.get("/v1/leases/billing%2Fnightly/history")).Events
		if len(events) != 2 || events[0].Kind != "released" || events[0].Credential != "billing" || events[1].Credential != "billing" {
			t.Errorf("billing/nightly's history %+v, want acquired and released by credential billing", events)
		}
		expect(t, billing.post("/v1/leases/billing%2Fnightly/claim", map[string]any{"owner": "b1"}), http.StatusOK)

		// Lists hold the caller's tasks only.
		tasksOf := func(r response) []string {
			var out []string
			for _, l := range decode[api.LeaseList](t, r).Leases {
				out = append(out, l.Task)
			}
			return out
		}
		if got := tasksOf(billing.get("/v1/leases")); strings.Join(got, " ") != "billing/nightly reports:weekly" {
			t.Errorf("billing lists %q", got)
		}
		if got := tasksOf(dash.get("/v1/leases")); len(got) != 3 {
			t.Errorf("dash lists %q, want all three", got)
		}

		// Status says who is asking, never with the token.
		st := decode[api.SidecarStatus](t, billing.get("/v1/status"))
		if st.Caller == nil || st.Caller.Name != "billing" || st.Caller.Right != api.CallerRight(auth.Hold) || len(st.Caller.Prefixes) != 2 {
			t.Errorf("status caller %+v", st.Caller)
		}
	}, withCredentials(credentialsBook(t)))
}

// TestEveryRouteAuthorised: a credential with every right on other tasks
// only is refused by every /v1 route that names a task, whatever the
// route; routeRights must list every /v1 operation (checkRights).
func TestEveryRouteAuthorised(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withCredentials(credentialsBook(t))).as(billingToken)
	sp, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	ops := operations(sp.doc)
	if err := checkRights(ops); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for k := range ops {
		if !strings.Contains(k.path, ":task") {
			continue
		}
		seen++
		path := strings.Replace(k.path, ":task", "payroll%2Frun", 1)
		var r response
		switch {
		case strings.HasSuffix(path, "/revoke"):
			r = ts.post(path, map[string]any{})
		case k.method == http.MethodPost:
			r = ts.post(path, map[string]any{"owner": "x"})
		case k.method == http.MethodPut:
			r = ts.put(path, map[string]any{"ttl_ms": 1000})
		case k.method == http.MethodDelete:
			r = ts.delete(path)
		default:
			r = ts.get(path)
		}
		if r.status != http.StatusForbidden {
			t.Errorf("%s %s by a credential without payroll/: %d %s, want 403", k.method, path, r.status, r.body)
		}
	}
	if seen < 9 {
		t.Fatalf("only %d routes with a task: the document's routes were not found", seen)
	}
}

// TestScopedWatch: a watch by a scoped credential sends its tasks' events
// only, whatever prefix it asks for.
func TestScopedWatch(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withCredentials(credentialsBook(t)))
	ops, billing := ts.as(opsToken), ts.as(billingToken)
	for _, task := range []string{"payroll%2Fa", "billing%2Fa", "payroll%2Fb", "billing%2Fb"} {
		expect(t, ops.post("/v1/leases/"+task+"/claim", map[string]any{"owner": "o"}), http.StatusOK)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, billing.url+"/v1/watch?since=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+billingToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tasks []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "event: ready" {
			break
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			_, rest, _ := strings.Cut(data, `"task":"`)
			task, _, _ := strings.Cut(rest, `"`)
			tasks = append(tasks, task)
		}
	}
	if got := strings.Join(tasks, " "); got != "billing/a billing/b" {
		t.Errorf("billing's watch replayed %q, want billing/a billing/b only", got)
	}
}

// TestRevoke: an admin ends whoever's lease; a holder may not; a revoke
// with another token, or of a free task, ends nothing; the history names
// the holder, the revoking credential and that an operator ended it.
func TestRevoke(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		billing, ops := ts.as(billingToken), ts.as(opsToken)
		lease := decode[api.ClaimAcquired](t, billing.post("/v1/leases/billing%2Fjob/claim", map[string]any{"owner": "b1", "ttl_ms": 600000})).Lease
		expectForbidden(t, billing.post("/v1/leases/billing%2Fjob/revoke", map[string]any{}), "billing", "billing/job")

		if r := decode[api.RevokeResult](t, ops.post("/v1/leases/billing%2Fjob/revoke", map[string]any{"token": lease.Token + 1})); r.Released {
			t.Errorf("a revoke with another token ended the lease: %+v", r)
		}
		r := decode[api.RevokeResult](t, ops.post("/v1/leases/billing%2Fjob/revoke", map[string]any{}))
		if !r.Released || r.Lease == nil || r.Lease.Owner != "b1" || r.Lease.Token != lease.Token {
			t.Fatalf("revoke: %+v, want b1's lease ended", r)
		}
		if l := decode[api.LeaseState](t, ops.get("/v1/leases/billing%2Fjob")); l.Held {
			t.Errorf("the lease is still held after the revoke: %+v", l)
		}
		if r := decode[api.RevokeResult](t, ops.post("/v1/leases/billing%2Fjob/revoke", map[string]any{})); r.Released {
			t.Errorf("a second revoke ended something: %+v", r)
		}
		events := decode[api.EventList](t, ops.get("/v1/leases/billing%2Fjob/history")).Events
		if len(events) != 2 || events[0].Kind != "released" || events[0].Owner != "b1" || events[0].Credential != "ops" ||
			events[0].Detail != leasecore.RevokedDetail {
			t.Errorf("history %+v, want released of b1 by credential ops, detail %q", events, leasecore.RevokedDetail)
		}
		// The holder's next renewal is lost.
		expect(t, billing.post("/v1/leases/billing%2Fjob/renew", map[string]any{"owner": "b1", "token": lease.Token}), http.StatusConflict)
	}, withCredentials(credentialsBook(t)))
}
