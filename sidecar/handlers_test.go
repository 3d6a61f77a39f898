package sidecar

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar/api"
)

type body = map[string]any

var millisRFC3339 = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)

func TestClaimAcquiredHeldRefreshed(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {

		r := ts.post("/v1/leases/nightly/claim", body{"owner": "w1", "ttl_ms": 60000, "note": "first"})
		expect(t, r, http.StatusOK)
		got := decode[api.ClaimAcquired](t, r)
		l := got.Lease
		if !bool(got.Acquired) || l.Task != "nightly" || l.Owner != "w1" || l.Token != 1 || l.RenewCount != 0 ||
			l.TtlMs != 60000 || l.Note != "first" || l.TtlRemainingMs <= 0 || l.TtlRemainingMs > 60000 {
			t.Fatalf("first claim: %+v", got)
		}
		for _, ts := range []string{l.AcquiredAt, l.RenewedAt, l.ExpiresAt} {
			if !millisRFC3339.MatchString(ts) {
				t.Errorf("time %q is not RFC 3339 UTC with milliseconds", ts)
			}
		}

		r = ts.post("/v1/leases/nightly/claim", body{"owner": "w2"})
		expect(t, r, http.StatusConflict)
		held := decode[api.ClaimHeld](t, r)
		if bool(held.Acquired) || held.Reason != api.Held || held.Holder.Owner != "w1" || held.Holder.ExpiresAt != l.ExpiresAt ||
			held.Holder.TtlRemainingMs <= 0 || !strings.Contains(held.Detail, "w1") {
			t.Fatalf("held: %+v", held)
		}

		r = ts.post("/v1/leases/nightly/claim", body{"owner": "w1", "ttl_ms": 120000, "note": "second"})
		expect(t, r, http.StatusOK)
		again := decode[api.ClaimAcquired](t, r).Lease
		if again.Token != 1 || again.RenewCount != 1 || again.Note != "second" || again.TtlMs != 120000 || again.AcquiredAt != l.AcquiredAt {
			t.Fatalf("refresh: %+v, first %+v", again, l)
		}
	})
}

func TestClaimDefaultTTL(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		r := ts.post("/v1/leases/t/claim", body{"owner": "w1"})
		expect(t, r, http.StatusOK)
		if l := decode[api.ClaimAcquired](t, r).Lease; l.TtlMs != 30000 || l.Note != "" {
			t.Fatalf("default ttl/note: %+v", l)
		}
	})
}

func TestRenew(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		claim := decode[api.ClaimAcquired](t, ts.post("/v1/leases/job/claim", body{"owner": "w1", "ttl_ms": 60000})).Lease

		r := ts.post("/v1/leases/job/renew", body{"owner": "w1", "token": claim.Token, "ttl_ms": 90000})
		expect(t, r, http.StatusOK)
		renewed := decode[api.Renewed](t, r)
		if !bool(renewed.Renewed) || renewed.Lease.Token != claim.Token || renewed.Lease.RenewCount != 1 || renewed.Lease.TtlMs != 90000 {
			t.Fatalf("renewed: %+v", renewed)
		}
		r = ts.post("/v1/leases/job/renew", body{"owner": "w1"})
		expect(t, r, http.StatusOK)
		if l := decode[api.Renewed](t, r).Lease; l.TtlMs != 90000 || l.RenewCount != 2 {
			t.Fatalf("renew without ttl keeps the ttl: %+v", l)
		}

		lost := []struct {
			name, task string
			req        body
			reason     api.RenewLostReason
		}{
			{"token mismatch", "job", body{"owner": "w1", "token": claim.Token + 1}, api.RenewLostReasonTokenMismatch},
			{"held by other", "job", body{"owner": "w2"}, api.RenewLostReasonHeldByOther},
			{"never claimed", "other", body{"owner": "w1"}, api.RenewLostReasonNotHeld},
		}
		for _, c := range lost {
			r := ts.post("/v1/leases/"+c.task+"/renew", c.req)
			expect(t, r, http.StatusConflict)
			if got := decode[api.RenewLost](t, r); bool(got.Renewed) || got.Reason != c.reason || got.Detail == "" {
				t.Errorf("%s: %+v, want reason %s", c.name, got, c.reason)
			}
		}
	})
}

// A renewal's note replaces the lease's note, as a refresh claim's does
// ("" clears it); a renewal without one keeps it; a refused renewal writes
// none.
func TestRenewNote(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		expect(t, ts.post("/v1/leases/job/claim", body{"owner": "w1", "ttl_ms": 60000, "note": "claimed"}), http.StatusOK)
		for i, c := range []struct {
			req  body
			want string
		}{
			{body{"owner": "w1"}, "claimed"},
			{body{"owner": "w1", "note": "pruned 4,000 of 12,000"}, "pruned 4,000 of 12,000"},
			{body{"owner": "w1", "ttl_ms": 90000}, "pruned 4,000 of 12,000"},
			{body{"owner": "w1", "note": ""}, ""},
			{body{"owner": "w1"}, ""},
			{body{"owner": "w1", "note": "done"}, "done"},
		} {
			r := ts.post("/v1/leases/job/renew", c.req)
			expect(t, r, http.StatusOK)
			if l := decode[api.Renewed](t, r).Lease; l.Note != c.want || l.RenewCount != int64(i+1) {
				t.Errorf("renewal %d %v: note %q, renew_count %d; want %q, %d", i+1, c.req, l.Note, l.RenewCount, c.want, i+1)
			}
			if st := decode[api.LeaseState](t, ts.get("/v1/leases/job")); st.Lease == nil || st.Lease.Note != c.want {
				t.Errorf("get after renewal %d %v: %+v, want note %q", i+1, c.req, st.Lease, c.want)
			}
		}
		expect(t, ts.post("/v1/leases/job/renew", body{"owner": "w2", "note": "not w2's"}), http.StatusConflict)
		expect(t, ts.post("/v1/leases/job/renew", body{"owner": "w1", "note": strings.Repeat("é", 600)}), http.StatusUnprocessableEntity)
		if st := decode[api.LeaseState](t, ts.get("/v1/leases/job")); st.Lease == nil || st.Lease.Note != "done" || st.Lease.RenewCount != 6 {
			t.Errorf("after refused renewals with notes: %+v, want note %q, renew_count 6", st.Lease, "done")
		}
	})
}

func TestRenewExpired(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		expect(t, ts.post("/v1/leases/short/claim", body{"owner": "w1", "ttl_ms": 100}), http.StatusOK)
		// Poll the store's clock, with a deadline, until the lease has expired.
		deadline := time.After(10 * time.Second)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for decode[api.LeaseState](t, ts.get("/v1/leases/short")).Held {
			select {
			case <-deadline:
				t.Fatal("a 100 ms lease is still held after 10 s")
			case <-tick.C:
			}
		}
		r := ts.post("/v1/leases/short/renew", body{"owner": "w1"})
		expect(t, r, http.StatusConflict)
		if got := decode[api.RenewLost](t, r); got.Reason != api.RenewLostReasonExpired {
			t.Fatalf("renew after expiry: %+v", got)
		}
	})
}

func TestRelease(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		claim := decode[api.ClaimAcquired](t, ts.post("/v1/leases/job/claim", body{"owner": "w1"})).Lease

		cases := []struct {
			name string
			req  body
			want bool
		}{
			{"other owner", body{"owner": "w2"}, false},
			{"wrong token", body{"owner": "w1", "token": claim.Token + 1}, false},
			{"owner and token", body{"owner": "w1", "token": claim.Token}, true},
			{"again", body{"owner": "w1"}, false},
		}
		for _, c := range cases {
			r := ts.post("/v1/leases/job/release", c.req)
			expect(t, r, http.StatusOK)
			if got := decode[api.ReleaseResult](t, r); got.Released != c.want {
				t.Fatalf("%s: released %v, want %v", c.name, got.Released, c.want)
			}
		}
		if decode[api.LeaseState](t, ts.get("/v1/leases/job")).Held {
			t.Fatal("still held after release")
		}
		// The token counter survives release.
		r := ts.post("/v1/leases/job/claim", body{"owner": "w2"})
		if l := decode[api.ClaimAcquired](t, r).Lease; l.Token != claim.Token+1 {
			t.Fatalf("token after release and re-claim: %d, want %d", l.Token, claim.Token+1)
		}
	})
}

func TestGetAndList(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {

		r := ts.get("/v1/leases/nobody")
		expect(t, r, http.StatusOK)
		if got := decode[api.LeaseState](t, r); got.Held || got.Lease != nil {
			t.Fatalf("not held: %+v", got)
		}
		if got := decode[api.LeaseList](t, ts.get("/v1/leases")); got.Leases == nil || len(got.Leases) != 0 {
			t.Fatalf("empty list: %+v (want [] not null)", got)
		}

		for _, task := range []string{"b", "a", "c"} {
			expect(t, ts.post("/v1/leases/"+task+"/claim", body{"owner": "w-" + task}), http.StatusOK)
		}
		expect(t, ts.post("/v1/leases/c/release", body{"owner": "w-c"}), http.StatusOK)

		r = ts.get("/v1/leases/a")
		expect(t, r, http.StatusOK)
		if got := decode[api.LeaseState](t, r); !got.Held || got.Lease == nil || got.Lease.Owner != "w-a" {
			t.Fatalf("held: %+v", got)
		}
		var tasks []string
		for _, l := range decode[api.LeaseList](t, ts.get("/v1/leases")).Leases {
			tasks = append(tasks, l.Task)
		}
		if strings.Join(tasks, ",") != "a,b" {
			t.Fatalf("list: %v, want a,b", tasks)
		}
	})
}

func TestTaskIsOneEncodedSegment(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		r := ts.post("/v1/leases/billing%2Fnightly/claim", body{"owner": "w1"})
		expect(t, r, http.StatusOK)
		if l := decode[api.ClaimAcquired](t, r).Lease; l.Task != "billing/nightly" {
			t.Fatalf("task %q, want billing/nightly", l.Task)
		}
		got := decode[api.LeaseState](t, ts.get("/v1/leases/billing%2Fnightly"))
		if !got.Held || got.Lease.Task != "billing/nightly" {
			t.Fatalf("get: %+v", got)
		}
		expect(t, ts.post("/v1/leases/billing%2Fnightly/renew", body{"owner": "w1"}), http.StatusOK)
		// Other characters of the task alphabet, encoded or not.
		expect(t, ts.post("/v1/leases/team%40svc%3Ajob.v2_x-y/claim", body{"owner": "w1"}), http.StatusOK)
		if !decode[api.LeaseState](t, ts.get("/v1/leases/team@svc:job.v2_x-y")).Held {
			t.Fatal("team@svc:job.v2_x-y not held")
		}
		// Unencoded, the slash makes another path: no route, and nothing claimed.
		expectProblem(t, ts.post("/v1/leases/billing/weekly/claim", body{"owner": "w1"}), http.StatusNotFound, problemBlank)
		if n := len(decode[api.LeaseList](t, ts.get("/v1/leases")).Leases); n != 2 {
			t.Fatalf("%d leases, want 2", n)
		}
	})
}

func TestHealthReadyOpenAPI(t *testing.T) {
	t.Parallel()
	store := openSQLite(t, true)
	ts := startServer(t, withStore(store))

	expect(t, ts.get("/healthz"), http.StatusOK)
	p := expectProblem(t, ts.get("/readyz"), http.StatusServiceUnavailable, problemUnavailable)
	if !strings.Contains(p.Detail, "not migrated") {
		t.Errorf("readyz before migration: %q", p.Detail)
	}
	if err := ts.srv.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	expect(t, ts.get("/readyz"), http.StatusOK)

	r := ts.get("/openapi.yaml")
	expect(t, r, http.StatusOK)
	if string(r.body) != string(leasehold.OpenAPI) || !strings.HasPrefix(r.header.Get("Content-Type"), "application/yaml") {
		t.Fatalf("openapi.yaml: %s, %d bytes", r.header.Get("Content-Type"), len(r.body))
	}

	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	expectProblem(t, ts.get("/readyz"), http.StatusServiceUnavailable, problemUnavailable)
	expect(t, ts.get("/healthz"), http.StatusOK)
}

func TestStoreUnavailable(t *testing.T) {
	t.Parallel()

	t.Run("claim", func(t *testing.T) {
		t.Parallel()
		ts := newTestServer(t, withStore(failingClaimStore{openSQLite(t, true)}))
		r := ts.post("/v1/leases/job/claim", body{"owner": "w1"})
		expect(t, r, http.StatusServiceUnavailable)
		got := decode[api.ClaimUnavailable](t, r)
		if bool(got.Acquired) || got.Reason != api.ClaimUnavailableReasonUnavailable || !strings.Contains(got.Detail, "connection refused") {
			t.Fatalf("claim: %+v", got)
		}
	})

	t.Run("closed store", func(t *testing.T) {
		t.Parallel()
		store := openSQLite(t, true)
		ts := newTestServer(t, withStore(store))
		if err := store.Close(); err != nil {
			t.Fatal(err)
		}
		r := ts.post("/v1/leases/job/claim", body{"owner": "w1"})
		expect(t, r, http.StatusServiceUnavailable)
		if got := decode[api.ClaimUnavailable](t, r); got.Reason != api.ClaimUnavailableReasonUnavailable {
			t.Fatalf("claim: %+v", got)
		}
		r = ts.post("/v1/leases/job/renew", body{"owner": "w1"})
		expect(t, r, http.StatusServiceUnavailable)
		if got := decode[api.RenewUnavailable](t, r); got.Reason != api.RenewUnavailableReasonUnavailable {
			t.Fatalf("renew: %+v", got)
		}
		r = ts.post("/v1/leases/job/release", body{"owner": "w1"})
		expect(t, r, http.StatusServiceUnavailable)
		if got := decode[api.ReleaseUnavailable](t, r); got.Released || got.Reason != api.ReleaseUnavailableReasonUnavailable {
			t.Fatalf("release: %+v", got)
		}
		expectProblem(t, ts.get("/v1/leases/job"), http.StatusServiceUnavailable, problemUnavailable)
		expectProblem(t, ts.get("/v1/leases"), http.StatusServiceUnavailable, problemUnavailable)
	})

	t.Run("not migrated yet", func(t *testing.T) {
		t.Parallel()
		// The schema exists, but this server's migration has not run: the
		// gate answers unavailable without using the store.
		ts := startServer(t, withStore(openSQLite(t, true)))
		r := ts.post("/v1/leases/job/claim", body{"owner": "w1"})
		expect(t, r, http.StatusServiceUnavailable)
		if got := decode[api.ClaimUnavailable](t, r); !strings.Contains(got.Detail, "not migrated") {
			t.Fatalf("claim before migration: %+v", got)
		}
	})
}

func TestMigrateUntilDoneRetries(t *testing.T) {
	t.Parallel()
	store := flakyMigrateStore{Store: openSQLite(t, false), calls: make(chan struct{}, 1)}
	ts := startServer(t, withStore(store))
	expectProblem(t, ts.get("/readyz"), http.StatusServiceUnavailable, problemUnavailable)
	if err := ts.srv.MigrateUntilDone(t.Context(), storeurl.MustParse("sqlite:test")); err != nil {
		t.Fatal(err)
	}
	if len(store.calls) != 1 {
		t.Fatal("the first migration did not fail as arranged")
	}
	expect(t, ts.get("/readyz"), http.StatusOK)
	expect(t, ts.post("/v1/leases/job/claim", body{"owner": "w1"}), http.StatusOK)
}

func TestMigrateUntilDoneStopsWithContext(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withStore(openUnreachable(t)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ts.srv.MigrateUntilDone(ctx, storeurl.MustParse("sqlite:unreachable")) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("MigrateUntilDone after cancel: %v, want context.Canceled", err)
	}
	expectProblem(t, ts.get("/readyz"), http.StatusServiceUnavailable, problemUnavailable)
}

func TestPanicIsAProblem(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withStore(panickingGetStore{openSQLite(t, true)}))
	p := expectProblem(t, ts.get("/v1/leases/job"), http.StatusInternalServerError, problemBlank)
	if strings.Contains(p.Detail, "driver bug") || strings.Contains(p.Detail, ".go:") {
		t.Fatalf("panic detail leaked: %q", p.Detail)
	}
	expect(t, ts.get("/healthz"), http.StatusOK) // the server survived
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	expect(t, ts.post("/v1/leases/job/claim", body{"owner": "w1"}), http.StatusOK)
	expect(t, ts.post("/v1/leases/job/claim", body{"owner": "w1"}), http.StatusOK)
	expect(t, ts.post("/v1/leases/job/claim", body{"owner": "w2"}), http.StatusConflict)
	expect(t, ts.post("/v1/leases/job/renew", body{"owner": "w2"}), http.StatusConflict)
	expect(t, ts.post("/v1/leases/job/renew", body{"owner": "w1"}), http.StatusOK)
	expect(t, ts.post("/v1/leases/job/release", body{"owner": "w1"}), http.StatusOK)
	expect(t, ts.post("/v1/leases/job/release", body{"owner": "w1"}), http.StatusOK)
	expect(t, ts.get("/nope"), http.StatusNotFound)

	r := ts.get("/metrics")
	expect(t, r, http.StatusOK)
	text := string(r.body)
	for _, want := range []string{
		`leasehold_claims_total{result="acquired"} 1`,
		`leasehold_claims_total{result="refreshed"} 1`,
		`leasehold_claims_total{result="held"} 1`,
		`leasehold_claims_total{result="unavailable"} 0`,
		`leasehold_renewals_total{result="renewed"} 1`,
		`leasehold_renewals_total{result="held_by_other"} 1`,
		`leasehold_releases_total{released="true"} 1`,
		`leasehold_releases_total{released="false"} 1`,
		`leasehold_store_operation_duration_seconds_count{operation="claim"} 3`,
		`leasehold_store_operation_duration_seconds_count{operation="migrate"} 1`,
		`leasehold_store_errors_total{operation="claim"} 0`,
		`leasehold_http_requests_total{code="409",method="POST",route="/v1/leases/:task/claim"} 1`,
		`leasehold_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Each server has its own registry: a second server starts from zero.
	other := newTestServer(t)
	if !strings.Contains(string(other.get("/metrics").body), `leasehold_claims_total{result="acquired"} 0`) {
		t.Error("a new server's counters are not zero: the registry is shared")
	}
}
