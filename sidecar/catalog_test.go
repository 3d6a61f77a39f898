package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// declare stores declarations through a Service of its own on the server's
// store, as Terraform would from another process.
func declare(t *testing.T, ts *testServer, decls ...leasecore.TaskDecl) *leasecore.Service {
	t.Helper()
	svc := leasecore.New(ts.store)
	for _, d := range decls {
		if _, err := svc.CreateTask(t.Context(), d, leasecore.Writer{}); err != nil {
			t.Fatalf("CreateTask %s: %v", d.Name, err)
		}
	}
	return svc
}

// expectInvalid checks a 422 problem that names exactly the field.
func expectInvalid(t *testing.T, r response, field string) api.Problem {
	t.Helper()
	p := expectProblem(t, r, http.StatusUnprocessableEntity, problemInvalid)
	if p.InvalidParams == nil || len(*p.InvalidParams) != 1 || (*p.InvalidParams)[0].Name != field {
		t.Fatalf("invalid_params %+v, want exactly %s", p.InvalidParams, field)
	}
	return p
}

func TestTasksListAndGet(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		r := ts.get("/v1/tasks")
		expect(t, r, http.StatusOK)
		if got := decode[api.TaskList](t, r); got.Tasks == nil || len(got.Tasks) != 0 {
			t.Fatalf("no declarations: %s (want [] not null)", r.body)
		}
		p := expectProblem(t, ts.get("/v1/tasks/nightly"), http.StatusNotFound, problemUndeclared)
		if p.Title != "Task not declared" || !strings.Contains(p.Detail, `"nightly"`) {
			t.Fatalf("undeclared: %+v", p)
		}

		svc := declare(t, ts)
		if _, err := svc.CreatePolicy(t.Context(), leasecore.RetentionPolicy{Name: "audit", KeepFor: 720 * time.Hour, KeepLast: 10}, leasecore.Writer{}); err != nil {
			t.Fatalf("CreatePolicy: %v", err)
		}
		declare(t, ts,
			leasecore.TaskDecl{Name: "telescope:prune", TTL: 90 * time.Second, MaxTTL: 10 * time.Minute, Description: "entries pruner", RetentionPolicy: "audit"},
			leasecore.TaskDecl{Name: "nightly", TTL: 30 * time.Second},
			leasecore.TaskDecl{Name: "billing/nightly", TTL: time.Minute, Description: "invoices"},
		)

		r = ts.get("/v1/tasks")
		expect(t, r, http.StatusOK)
		list := decode[api.TaskList](t, r).Tasks
		var names []string
		for _, d := range list {
			names = append(names, d.Name)
		}
		if strings.Join(names, ",") != "billing/nightly,nightly,telescope:prune" {
			t.Fatalf("tasks %v, want them ordered by name", names)
		}
		// No max_ttl: the field is absent, not 0 or null.
		var raw struct{ Tasks []map[string]json.RawMessage }
		if err := json.Unmarshal(r.body, &raw); err != nil {
			t.Fatal(err)
		}
		if _, ok := raw.Tasks[1]["max_ttl_ms"]; ok {
			t.Errorf("nightly has no max_ttl, yet max_ttl_ms is present: %s", r.body)
		}
		if d := list[1]; d.TtlMs != 30000 || d.MaxTtlMs != nil || d.Description != "" || d.RetentionPolicy != leasecore.DefaultPolicy {
			t.Errorf("nightly: %+v", d)
		}

		r = ts.get("/v1/tasks/telescope%3Aprune")
		expect(t, r, http.StatusOK)
		d := decode[api.TaskDeclaration](t, r)
		if d.Name != "telescope:prune" || d.TtlMs != 90000 || d.MaxTtlMs == nil || *d.MaxTtlMs != 600000 ||
			d.Description != "entries pruner" || d.RetentionPolicy != "audit" {
			t.Fatalf("telescope:prune: %s", r.body)
		}
		for _, ts := range []string{d.CreatedAt, d.UpdatedAt} {
			if !millisRFC3339.MatchString(ts) {
				t.Errorf("time %q is not RFC 3339 UTC with milliseconds", ts)
			}
		}
		if got := decode[api.TaskDeclaration](t, ts.get("/v1/tasks/billing%2Fnightly")); got.Name != "billing/nightly" || got.Description != "invoices" {
			t.Fatalf("billing/nightly: %+v", got)
		}

		// Changes made elsewhere show at once: the views read the store.
		if _, err := svc.UpdateTask(t.Context(), leasecore.TaskDecl{Name: "nightly", TTL: 45 * time.Second, MaxTTL: time.Minute, Description: "report"}, leasecore.Writer{}); err != nil {
			t.Fatalf("UpdateTask: %v", err)
		}
		got := decode[api.TaskDeclaration](t, ts.get("/v1/tasks/nightly"))
		if got.TtlMs != 45000 || got.MaxTtlMs == nil || *got.MaxTtlMs != 60000 || got.Description != "report" || got.UpdatedAt < got.CreatedAt {
			t.Fatalf("nightly after update: %+v", got)
		}
		if ok, err := svc.DeleteTask(t.Context(), "nightly", leasecore.Writer{}); err != nil || !ok {
			t.Fatalf("DeleteTask: %v, %v", ok, err)
		}
		expectProblem(t, ts.get("/v1/tasks/nightly"), http.StatusNotFound, problemUndeclared)
		if n := len(decode[api.TaskList](t, ts.get("/v1/tasks")).Tasks); n != 2 {
			t.Fatalf("%d tasks after a delete, want 2", n)
		}

		expectInvalid(t, ts.get("/v1/tasks/no%20spaces"), "task")
		expectProblem(t, ts.get("/v1/tasks/billing/nightly"), http.StatusNotFound, problemBlank) // no route
	})
}

func TestPoliciesList(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		r := ts.get("/v1/policies")
		expect(t, r, http.StatusOK)
		list := decode[api.PolicyList](t, r).Policies
		if len(list) != 1 || list[0].Name != leasecore.DefaultPolicy ||
			list[0].KeepForMs != leasecore.DefaultKeepFor.Milliseconds() || list[0].KeepLast != leasecore.DefaultKeepLast {
			t.Fatalf("a fresh store's policies: %s, want only the default one", r.body)
		}

		svc := declare(t, ts)
		for _, p := range []leasecore.RetentionPolicy{
			{Name: "audit", KeepFor: 720 * time.Hour, KeepLast: 10},
			{Name: "forever"},
		} {
			if _, err := svc.CreatePolicy(t.Context(), p, leasecore.Writer{}); err != nil {
				t.Fatalf("CreatePolicy %s: %v", p.Name, err)
			}
		}
		r = ts.get("/v1/policies")
		expect(t, r, http.StatusOK)
		list = decode[api.PolicyList](t, r).Policies
		var names []string
		for _, p := range list {
			names = append(names, p.Name)
			if !millisRFC3339.MatchString(p.CreatedAt) || !millisRFC3339.MatchString(p.UpdatedAt) {
				t.Errorf("%s: times %q, %q are not RFC 3339 UTC with milliseconds", p.Name, p.CreatedAt, p.UpdatedAt)
			}
		}
		if strings.Join(names, ",") != "audit,default,forever" {
			t.Fatalf("policies %v, want them ordered by name", names)
		}
		if a := list[0]; a.KeepForMs != (720*time.Hour).Milliseconds() || a.KeepLast != 10 {
			t.Errorf("audit: %+v", a)
		}
		// No bound is 0, not absent: both fields are required.
		if f := list[2]; f.KeepForMs != 0 || f.KeepLast != 0 {
			t.Errorf("forever: %+v", f)
		}
	})
}

func TestPoliciesNeedToken(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withToken("s3cret"))
	calls := func() string {
		t.Helper()
		m := regexp.MustCompile(`leasehold_store_operation_duration_seconds_count\{operation="list_policies"\} (\d+)`).FindSubmatch(ts.get("/metrics").body)
		if m == nil {
			t.Fatal("no list_policies series in /metrics")
		}
		return string(m[1])
	}
	expect(t, ts.get("/v1/policies"), http.StatusUnauthorized)
	if n := calls(); n != "0" {
		t.Fatalf("a request without the token reached the store: %s list_policies calls", n)
	}
	ts.token = "s3cret"
	expect(t, ts.get("/v1/policies"), http.StatusOK)
	if n := calls(); n != "1" {
		t.Fatalf("%s list_policies calls after one listing, want 1", n)
	}
}

func TestHistory(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		r := ts.get("/v1/leases/job/history")
		expect(t, r, http.StatusOK)
		if got := decode[api.EventList](t, r); got.Events == nil || len(got.Events) != 0 {
			t.Fatalf("no history: %s (want [] not null)", r.body)
		}

		var tokens []int64
		for _, owner := range []string{"w1", "w2"} {
			l := decode[api.ClaimAcquired](t, ts.post("/v1/leases/job/claim", body{"owner": owner})).Lease
			tokens = append(tokens, l.Token)
			// A refresh and a renewal are not events.
			expect(t, ts.post("/v1/leases/job/claim", body{"owner": owner}), http.StatusOK)
			expect(t, ts.post("/v1/leases/job/renew", body{"owner": owner}), http.StatusOK)
			if !decode[api.ReleaseResult](t, ts.post("/v1/leases/job/release", body{"owner": owner})).Released {
				t.Fatalf("release by %s", owner)
			}
		}
		expect(t, ts.post("/v1/leases/other/claim", body{"owner": "w3"}), http.StatusOK)

		type ev struct {
			kind  api.EventKind
			owner string
			token int64
		}
		want := []ev{
			{api.EventKindReleased, "w2", tokens[1]},
			{api.EventKindAcquired, "w2", tokens[1]},
			{api.EventKindReleased, "w1", tokens[0]},
			{api.EventKindAcquired, "w1", tokens[0]},
		}
		r = ts.get("/v1/leases/job/history")
		expect(t, r, http.StatusOK)
		events := decode[api.EventList](t, r).Events
		if len(events) != len(want) {
			t.Fatalf("%d events, want %d (newest first): %s", len(events), len(want), r.body)
		}
		for i, e := range events {
			if (ev{e.Kind, e.Owner, e.Token}) != want[i] || e.Task != "job" || !millisRFC3339.MatchString(e.At) {
				t.Errorf("event %d: %+v, want %+v", i, e, want[i])
			}
			if i > 0 && (e.Id >= events[i-1].Id || e.At > events[i-1].At) {
				t.Errorf("event %d (id %d, at %s) is not older than event %d (id %d, at %s)", i, e.Id, e.At, i-1, events[i-1].Id, events[i-1].At)
			}
		}

		r = ts.get("/v1/leases/job/history?limit=2")
		expect(t, r, http.StatusOK)
		if got := decode[api.EventList](t, r).Events; len(got) != 2 || got[0].Id != events[0].Id || got[1].Id != events[1].Id {
			t.Fatalf("limit=2: %s, want the two newest", r.body)
		}
		expect(t, ts.get("/v1/leases/job/history?limit=1000"), http.StatusOK)
		for _, bad := range []string{"0", "1001", "-1", "ten", "2.5"} {
			expectInvalid(t, ts.get("/v1/leases/job/history?limit="+bad), "limit")
		}
		expectInvalid(t, ts.get("/v1/leases/no%20spaces/history"), "task")
	})
}

func TestClaimHonoursDeclarations(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		// Declared before the server's first claim reads the declarations.
		declare(t, ts,
			leasecore.TaskDecl{Name: "report", TTL: 45 * time.Second, MaxTTL: time.Minute},
			leasecore.TaskDecl{Name: "bounded", TTL: 10 * time.Second, MaxTTL: 20 * time.Second},
		)

		r := ts.post("/v1/leases/report/claim", body{"owner": "w1"})
		expect(t, r, http.StatusOK)
		if l := decode[api.ClaimAcquired](t, r).Lease; l.TtlMs != 45000 {
			t.Fatalf("claim without ttl: ttl_ms %d, want the declared 45000", l.TtlMs)
		}
		r = ts.post("/v1/leases/report/claim", body{"owner": "w1", "ttl_ms": 60000})
		expect(t, r, http.StatusOK)
		if l := decode[api.ClaimAcquired](t, r).Lease; l.TtlMs != 60000 {
			t.Fatalf("claim at max_ttl: ttl_ms %d, want 60000", l.TtlMs)
		}
		// An undeclared task keeps the model's default.
		r = ts.post("/v1/leases/free/claim", body{"owner": "w1"})
		expect(t, r, http.StatusOK)
		if l := decode[api.ClaimAcquired](t, r).Lease; l.TtlMs != 30000 {
			t.Fatalf("undeclared task: ttl_ms %d, want 30000", l.TtlMs)
		}

		// Above max_ttl: 422 naming ttl_ms and the bound; nothing written.
		p := expectInvalid(t, ts.post("/v1/leases/bounded/claim", body{"owner": "w1", "ttl_ms": 20001}), "ttl_ms")
		if !strings.Contains(p.Detail, "20000") {
			t.Errorf("the detail does not give the bound: %q", p.Detail)
		}
		_, r = ts.openStream("/v1/leases/bounded/keepalive?owner=w1&ttl_ms=20001")
		expectInvalid(t, r, "ttl_ms")
		if decode[api.LeaseState](t, ts.get("/v1/leases/bounded")).Held {
			t.Fatal("a refused claim left a lease")
		}
		if n := len(decode[api.EventList](t, ts.get("/v1/leases/bounded/history")).Events); n != 0 {
			t.Fatalf("a refused claim left %d events", n)
		}
		// A renewal is bounded too; the lease is left as it was.
		expectInvalid(t, ts.post("/v1/leases/report/renew", body{"owner": "w1", "ttl_ms": 60001}), "ttl_ms")
		if l := decode[api.LeaseState](t, ts.get("/v1/leases/report")).Lease; l == nil || l.TtlMs != 60000 || l.RenewCount != 1 {
			t.Fatalf("after a refused renewal: %+v", l)
		}

		// A keepalive stream gets the declared ttl too.
		s, r := ts.openStream("/v1/leases/bounded/keepalive?owner=w2")
		if s == nil {
			t.Fatalf("keepalive answered %d: %s", r.status, r.body)
		}
		if ev := s.next(); ev.name != "acquired" || ev.lease(t).TtlMs != 10000 {
			t.Fatalf("keepalive: %s %s, want acquired with the declared ttl 10000", ev.name, ev.data)
		}
	})
}

func TestRequireDeclared(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		svc := declare(t, ts, leasecore.TaskDecl{Name: "declared", TTL: 40 * time.Second})

		for _, r := range []response{
			ts.post("/v1/leases/stray/claim", body{"owner": "w1", "ttl_ms": 1000}),
			ts.get("/v1/leases/stray/keepalive?owner=w1"), // refused before any stream
		} {
			p := expectProblem(t, r, http.StatusNotFound, problemUndeclared)
			if p.Title != "Task not declared" || !strings.Contains(p.Detail, `"stray"`) || !strings.Contains(p.Detail, "--require-declared") {
				t.Fatalf("undeclared: %+v", p)
			}
		}
		if decode[api.LeaseState](t, ts.get("/v1/leases/stray")).Held {
			t.Fatal("a refused claim left a lease")
		}

		r := ts.post("/v1/leases/declared/claim", body{"owner": "w1"})
		expect(t, r, http.StatusOK)
		if l := decode[api.ClaimAcquired](t, r).Lease; l.TtlMs != 40000 {
			t.Fatalf("declared: ttl_ms %d, want 40000", l.TtlMs)
		}
		s, r := ts.openStream("/v1/leases/declared%2Fstream/keepalive?owner=w1")
		if s != nil || r.status != http.StatusNotFound {
			t.Fatalf("keepalive of an undeclared task: %d", r.status)
		}

		// Declared elsewhere while the server runs: honoured once its copy
		// of the declarations is older than DeclarationsMaxAge.
		if _, err := svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: "stray", TTL: 5 * time.Second}, leasecore.Writer{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			r = ts.post("/v1/leases/stray/claim", body{"owner": "w1"})
			if r.status != http.StatusNotFound {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a new declaration is not honoured after 10 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		expect(t, r, http.StatusOK)
		if l := decode[api.ClaimAcquired](t, r).Lease; l.TtlMs != 5000 {
			t.Fatalf("newly declared: ttl_ms %d, want 5000", l.TtlMs)
		}

		// Renewals and releases are not refused: they only touch leases
		// that were granted.
		expect(t, ts.post("/v1/leases/declared/renew", body{"owner": "w1"}), http.StatusOK)
		expect(t, ts.post("/v1/leases/declared/release", body{"owner": "w1"}), http.StatusOK)

		// The stray claim, both keepalives, and perhaps some polls.
		if n := metricValue(t, string(ts.get("/metrics").body), `leasehold_claims_total{result="undeclared"}`); n < 3 {
			t.Errorf("%v undeclared claims counted, want at least 3", n)
		}
	}, withDeclarations(200*time.Millisecond, true))
}

func TestCatalogViewsUnavailable(t *testing.T) {
	t.Parallel()

	t.Run("closed store", func(t *testing.T) {
		t.Parallel()
		store := openSQLite(t, true)
		ts := newTestServer(t, withStore(store))
		if err := store.Close(); err != nil {
			t.Fatal(err)
		}
		expectProblem(t, ts.get("/v1/tasks"), http.StatusServiceUnavailable, problemUnavailable)
		expectProblem(t, ts.get("/v1/tasks/job"), http.StatusServiceUnavailable, problemUnavailable)
		expectProblem(t, ts.get("/v1/policies"), http.StatusServiceUnavailable, problemUnavailable)
		expectProblem(t, ts.get("/v1/leases/job/history"), http.StatusServiceUnavailable, problemUnavailable)
	})

	t.Run("not migrated yet", func(t *testing.T) {
		t.Parallel()
		ts := startServer(t, withStore(openSQLite(t, true)))
		for _, path := range []string{"/v1/tasks", "/v1/tasks/job", "/v1/policies", "/v1/leases/job/history"} {
			if p := expectProblem(t, ts.get(path), http.StatusServiceUnavailable, problemUnavailable); !strings.Contains(p.Detail, "not migrated") {
				t.Errorf("%s before migration: %q", path, p.Detail)
			}
		}
	})
}

// TestCatalogErrorsAsProblems covers the mapping of catalog outcomes that the
// read-only sidecar cannot produce through a request today.
func TestCatalogErrorsAsProblems(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err    error
		status int
		typ    string
	}{
		{&leasecore.UndeclaredError{Task: "x"}, http.StatusNotFound, problemUndeclared},
		{&leasecore.NotFoundError{Kind: "task", Name: "x"}, http.StatusNotFound, problemUndeclared},
		{&leasecore.NotFoundError{Kind: "retention policy", Name: "audit"}, http.StatusNotFound, problemNotFound},
		{&leasecore.ExistsError{Kind: "task", Name: "x"}, http.StatusConflict, problemExists},
		{&leasecore.InUseError{Policy: "audit", Tasks: []string{"x"}}, http.StatusConflict, problemInUse},
		{&leasecore.ValidationError{Field: "TTL", Rule: "must be at most 1000"}, http.StatusUnprocessableEntity, problemInvalid},
		{fmt.Errorf("create: %w", &leasecore.ExistsError{Kind: "task", Name: "x"}), http.StatusConflict, problemExists},
		// A catalog error a driver returned where none is allowed is a
		// store failure.
		{leasecore.Unavailable("get_task", &leasecore.NotFoundError{Kind: "task", Name: "x"}), http.StatusServiceUnavailable, problemUnavailable},
		{errors.New("a bug"), http.StatusInternalServerError, problemBlank},
	}
	c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/v1/tasks/x", nil), httptest.NewRecorder())
	for _, tc := range cases {
		p, _ := toProblem(tc.err, c)
		if p.Status != tc.status || p.Type != tc.typ || p.Title == "" || p.Detail == "" {
			t.Errorf("%v: %d %s %q %q, want %d %s", tc.err, p.Status, p.Type, p.Title, p.Detail, tc.status, tc.typ)
		}
	}
	// leasecore's Go field name reaches the client as the API's name.
	p, _ := toProblem(&leasecore.ValidationError{Field: "TTL", Rule: "must be at most 1000"}, c)
	if p.InvalidParams == nil || len(*p.InvalidParams) != 1 || (*p.InvalidParams)[0].Name != "ttl_ms" ||
		p.Detail != "invalid request: ttl_ms: must be at most 1000" {
		t.Errorf("a TTL refusal answers %q with %+v, want invalid_params naming ttl_ms", p.Detail, p.InvalidParams)
	}
	// The undeclared problem's detail names the sidecar's flag; leasecore's error does not.
	p, _ = toProblem(&leasecore.UndeclaredError{Task: "x"}, c)
	if want := `task "x" is not declared, and this sidecar requires declared tasks (--require-declared); ` +
		`declare it (Terraform resource leasehold_task) or run the sidecar without --require-declared`; p.Detail != want {
		t.Errorf("undeclared detail %q, want %q", p.Detail, want)
	}
}
