package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// doWithin is ts.do bounded by a deadline, for requests that a server
// without the rule under test would answer with an endless stream.
func (ts *testServer) doWithin(d time.Duration, method, path, contentType string, body []byte) response {
	ts.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return ts.doCtx(ctx, method, path, contentType, body)
}

// TestDotSegmentTaskNames: task names with an empty, "." or ".." segment
// cannot be reached through clients and proxies that normalise paths, so
// every route refuses them with 422 naming task and the rule (leasecore's,
// naming the segment), and nothing is written.
func TestDotSegmentTaskNames(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	for _, name := range []string{"%2E", "%2E%2E", "a%2F..%2Fb", ".%2Fa", "a%2F.", "a%2F%2Fb", "%2Fa", "a%2F", "%2F"} {
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/v1/leases/" + name + "/claim", `{"owner":"w"}`},
			{"POST", "/v1/leases/" + name + "/renew", `{"owner":"w"}`},
			{"POST", "/v1/leases/" + name + "/release", `{"owner":"w"}`},
			{"GET", "/v1/leases/" + name + "/keepalive?owner=w", ``},
			{"GET", "/v1/leases/" + name, ``},
			{"GET", "/v1/leases/" + name + "/history", ``},
			{"GET", "/v1/tasks/" + name, ``},
		} {
			t.Run(r.method+" "+r.path, func(t *testing.T) {
				var body []byte
				ct := ""
				if r.body != "" {
					body, ct = []byte(r.body), "application/json"
				}
				p := expectProblem(t, ts.doWithin(10*time.Second, r.method, r.path, ct, body), 422, problemInvalid)
				// The reason is leasecore's rule, as the CLI states it, with
				// the segment that breaks it; no regular expression.
				decoded, _ := url.PathUnescape(name)
				var ve *leasecore.ValidationError
				if !errors.As(leasecore.ValidateTask(decoded), &ve) {
					t.Fatalf("leasecore accepts %q", decoded)
				}
				if p.InvalidParams == nil || len(*p.InvalidParams) != 1 || (*p.InvalidParams)[0].Name != "task" ||
					(*p.InvalidParams)[0].Reason != ve.Rule || !strings.Contains(ve.Rule, "; segment ") {
					t.Errorf("invalid_params %+v, want task: %s", p.InvalidParams, ve.Rule)
				}
			})
		}
	}
	r := ts.get("/v1/leases")
	expect(t, r, 200)
	if !strings.Contains(string(r.body), `"leases":[]`) {
		t.Errorf("refused names were written: %s", r.body)
	}
	// Dots that are not a whole segment are fine.
	expect(t, ts.post("/v1/leases/...%2F.a%2Fb..%2F...c/claim", map[string]any{"owner": "w"}), 200)
}

// TestReservedTasks: a client cannot claim, renew, release or keep alive
// one of leasehold's own tasks (a client holding leasehold:prune would stop
// pruning for the fleet): each is refused with 403 reserved-task naming
// task, and nothing is written. Reads stay open, and leasehold's own code
// still takes the lease.
func TestReservedTasks(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	refused := func(r response) {
		t.Helper()
		p := expectProblem(t, r, 403, problemReserved)
		if p.InvalidParams == nil || len(*p.InvalidParams) != 1 || (*p.InvalidParams)[0].Name != "task" ||
			!strings.Contains((*p.InvalidParams)[0].Reason, `"leasehold:"`) || !strings.Contains(p.Detail, "reserved") {
			t.Errorf("problem %+v, want invalid_params naming task and the leasehold: rule", p)
		}
	}
	for _, task := range []string{"leasehold:prune", "leasehold:x", "leasehold:a%2Fb"} {
		refused(ts.post("/v1/leases/"+task+"/claim", map[string]any{"owner": "w", "ttl_ms": 60000}))
		refused(ts.post("/v1/leases/"+task+"/renew", map[string]any{"owner": "w"}))
		refused(ts.post("/v1/leases/"+task+"/release", map[string]any{"owner": "w"}))
		refused(ts.doWithin(10*time.Second, "GET", "/v1/leases/"+task+"/keepalive?owner=w&ttl_ms=60000", "", nil))
		if r := ts.get("/v1/leases/" + task); r.status != 200 || !strings.Contains(string(r.body), `"held":false`) {
			t.Errorf("GET %s after refused writes: %d %s, want 200 held false", task, r.status, r.body)
		}
	}

	// leasehold's own code (the pruner) still claims it, through leasecore.
	svc := leasecore.New(ts.store)
	l, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: leasecore.PruneTask, Owner: "pruner", TTL: time.Minute})
	if err != nil {
		t.Fatalf("the pruner's claim of %s: %v", leasecore.PruneTask, err)
	}
	refused(ts.post("/v1/leases/leasehold:prune/release", map[string]any{"owner": "pruner", "token": l.Token}))
	refused(ts.post("/v1/leases/leasehold:prune/claim", map[string]any{"owner": "pruner"}))
	// Reads are allowed: the lease, its history, its (missing) declaration.
	r := ts.get("/v1/leases/leasehold:prune")
	expect(t, r, 200)
	if st := decode[api.LeaseState](t, r); !st.Held || st.Lease.Owner != "pruner" || st.Lease.Token != l.Token || st.Lease.RenewCount != 0 {
		t.Errorf("the pruner's lease after refused client writes: %s", r.body)
	}
	expect(t, ts.get("/v1/leases/leasehold:prune/history"), 200)
	expectProblem(t, ts.get("/v1/tasks/leasehold:prune"), 404, problemUndeclared)

	// Only the exact prefix is reserved.
	for _, task := range []string{"leasehold", "Leasehold:prune", "x:leasehold:prune", "leasehold-prune"} {
		expect(t, ts.post("/v1/leases/"+task+"/claim", map[string]any{"owner": "w"}), 200)
	}
}

// TestListPages: GET /v1/leases and GET /v1/tasks answer one page at a
// time, 100 rows unless limit says otherwise (at most 1000), with
// next_after exactly when more rows follow; following next_after walks
// every row once, in order.
func TestListPages(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		const n = leasecore.DefaultListLimit + 3
		var want []string
		for i := range n {
			task := fmt.Sprintf("job/%03d", i)
			expect(t, ts.post("/v1/leases/"+url.PathEscape(task)+"/claim", map[string]any{"owner": "w", "ttl_ms": 60000}), 200)
			want = append(want, task)
		}
		r := ts.get("/v1/leases")
		expect(t, r, 200)
		first := decode[api.LeaseList](t, r)
		if len(first.Leases) != leasecore.DefaultListLimit || first.NextAfter == nil || *first.NextAfter != want[leasecore.DefaultListLimit-1] {
			t.Fatalf("GET /v1/leases: %d leases, next_after %v; want the default %d and next_after %q",
				len(first.Leases), first.NextAfter, leasecore.DefaultListLimit, want[leasecore.DefaultListLimit-1])
		}

		var got []string
		path := "/v1/leases?limit=40"
		for pages := 0; ; pages++ {
			if pages > n/40+1 {
				t.Fatalf("more pages than %d leases fill: %q", n, got)
			}
			r := ts.get(path)
			expect(t, r, 200)
			page := decode[api.LeaseList](t, r)
			for _, l := range page.Leases {
				got = append(got, l.Task)
			}
			if page.NextAfter == nil {
				if strings.Contains(string(r.body), "next_after") {
					t.Errorf("the last page names next_after: %s", r.body)
				}
				break
			}
			if len(page.Leases) != 40 || *page.NextAfter != page.Leases[39].Task {
				t.Fatalf("page %s: %d leases, next_after %q; want 40 and the last task", path, len(page.Leases), *page.NextAfter)
			}
			path = "/v1/leases?limit=40&after=" + url.QueryEscape(*page.NextAfter)
		}
		if !slices.Equal(got, want) {
			t.Errorf("walking pages of 40 listed %d leases %q, want %d in order", len(got), got, len(want))
		}

		svc := leasecore.New(ts.store)
		for i := range 3 {
			if _, err := svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: fmt.Sprintf("decl/%d", i), TTL: time.Second}, leasecore.Writer{}); err != nil {
				t.Fatal(err)
			}
		}
		r = ts.get("/v1/tasks?limit=2")
		expect(t, r, 200)
		tasks := decode[api.TaskList](t, r)
		if len(tasks.Tasks) != 2 || tasks.NextAfter == nil || *tasks.NextAfter != "decl/1" {
			t.Fatalf("GET /v1/tasks?limit=2: %s", r.body)
		}
		r = ts.get("/v1/tasks?limit=2&after=decl%2F1")
		expect(t, r, 200)
		if tasks := decode[api.TaskList](t, r); len(tasks.Tasks) != 1 || tasks.Tasks[0].Name != "decl/2" || tasks.NextAfter != nil {
			t.Errorf("GET /v1/tasks?limit=2&after=decl/1: %s", r.body)
		}

		for _, q := range []struct{ query, field string }{
			{"limit=0", "limit"}, {"limit=1001", "limit"}, {"limit=-1", "limit"}, {"limit=x", "limit"},
			{"after=a%20b", "after"}, {"after=" + strings.Repeat("a", 201), "after"},
		} {
			for _, route := range []string{"/v1/leases", "/v1/tasks"} {
				p := expectInvalid(t, ts.get(route+"?"+q.query), q.field)
				if reason := (*p.InvalidParams)[0].Reason; q.query == "after=a%20b" && !strings.Contains(reason, "characters of A-Z a-z 0-9 . _ : / @ -") {
					t.Errorf("%s?%s: reason %q does not state the rule", route, q.query, reason)
				}
			}
		}
	})
}
