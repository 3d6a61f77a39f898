package sidecar

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricsSeriesAreBounded: nothing a client sends adds a series. After
// a warm-up on the legitimate routes and one request of each odd kind, a
// flood of thousands of made-up methods (random tokens, some kilobytes long)
// and paths, with and without the bearer token, leaves the number of series
// in /metrics where it was, and every label of the request metrics comes
// from its fixed set.
func TestMetricsSeriesAreBounded(t *testing.T) {
	t.Parallel()
	const token = "metrics-token"
	for name, opts := range map[string][]serverOption{
		"token":    {withToken(token)},
		"no token": nil,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ts := newTestServer(t, opts...)
			ts.token = token // the API calls below always authenticate
			rng := rand.New(rand.NewPCG(1, 2))
			// send answers a request the conformance check would refuse
			// (made-up methods), with or without the token.
			client := &http.Client{}
			send := func(method, path string, withToken bool) {
				t.Helper()
				req, err := http.NewRequest(method, ts.url+path, nil)
				if err != nil {
					t.Fatalf("%.40s %s: %v", method, path, err)
				}
				if withToken {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("%.40s %.80s: %v", method, path, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}

			// The legitimate routes, as a client and a scraper use them.
			expect(t, ts.post("/v1/leases/job/claim", body{"owner": "w1"}), http.StatusOK)
			expect(t, ts.post("/v1/leases/job/claim", body{"owner": "w2"}), http.StatusConflict)
			expect(t, ts.post("/v1/leases/job/renew", body{"owner": "w1"}), http.StatusOK)
			expect(t, ts.post("/v1/leases/job/renew", body{"owner": "w2"}), http.StatusConflict)
			expect(t, ts.post("/v1/leases/job/release", body{"owner": "w1"}), http.StatusOK)
			expect(t, ts.post("/v1/leases/job/claim", body{"owner": "w1", "ttl_ms": 1}), http.StatusUnprocessableEntity)
			for _, path := range []string{"/v1/leases/job", "/v1/leases", "/v1/leases/job/history", "/v1/tasks",
				"/v1/policies", "/v1/status", "/healthz", "/readyz", "/metrics", "/openapi.yaml"} {
				expect(t, ts.get(path), http.StatusOK)
				send(http.MethodHead, path, true)
			}
			expect(t, ts.get("/v1/tasks/job"), http.StatusNotFound)

			// The odd kinds of request the flood is made of, each with
			// and without the token.
			kinds := []func() (method, path string){
				func() (string, string) { return randomMethod(rng), "/v1/leases/job/claim" },
				func() (string, string) { return randomMethod(rng), "/v1/leases/job" },
				func() (string, string) { return randomMethod(rng), "/metrics" },
				func() (string, string) { return randomMethod(rng), "/" + randomSegment(rng) },
				func() (string, string) { return randomMethod(rng), "/v1/" + randomSegment(rng) },
				func() (string, string) { return http.MethodGet, "/" + randomSegment(rng) + "/" + randomSegment(rng) },
				func() (string, string) { return http.MethodGet, "/v1/" + randomSegment(rng) + "/" + randomSegment(rng) },
				func() (string, string) { return http.MethodPost, "/v1/leases/job/" + randomSegment(rng) },
				func() (string, string) { return http.MethodGet, "/v1/leases/job/history/" + randomSegment(rng) },
				func() (string, string) { return http.MethodPost, "/v1/leases/job" },                   // 405
				func() (string, string) { return http.MethodDelete, "/v1/leases/job" },                 // 405
				func() (string, string) { return http.MethodOptions, "/v1/leases/job/claim" },          // echo's 204
				func() (string, string) { return http.MethodHead, "/v1/leases/job/keepalive?owner=a" }, // 405
			}
			for _, kind := range kinds {
				method, path := kind()
				send(method, path, true)
				send(method, path, false)
			}
			before := seriesCount(t, ts)

			const flood = 4000
			for i := range flood {
				method, path := kinds[i%len(kinds)]()
				send(method, path, i%2 == 0)
			}
			after := seriesCount(t, ts)
			if after != before {
				t.Errorf("/metrics has %d series after %d odd requests, %d before: clients create series", after, flood, before)
			}
			checkRequestLabels(t, ts)
		})
	}
}

// randomMethod is a made-up method: an HTTP token of 1 to 2,000 characters.
func randomMethod(rng *rand.Rand) string {
	const tchar = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	n := 1 + rng.IntN(20)
	if rng.IntN(10) == 0 {
		n = 1000 + rng.IntN(1000)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = tchar[rng.IntN(len(tchar))]
	}
	return string(b)
}

// randomSegment is a made-up path segment, sometimes long.
func randomSegment(rng *rand.Rand) string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789-_."
	n := 1 + rng.IntN(30)
	if rng.IntN(10) == 0 {
		n = 500 + rng.IntN(1000)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[rng.IntN(len(chars))]
	}
	return "x" + string(b)
}

// scrape parses the server's /metrics with Prometheus' own text parser.
func scrape(t *testing.T, ts *testServer) map[string][]map[string]string {
	t.Helper()
	r := ts.get("/metrics")
	expect(t, r, http.StatusOK)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(r.body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := make(map[string][]map[string]string, len(families))
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[name] = append(out[name], labels)
		}
	}
	return out
}

// seriesCount is the number of distinct label sets of every metric (a
// histogram's buckets, sum and count are one series).
func seriesCount(t *testing.T, ts *testServer) int {
	t.Helper()
	n := 0
	for _, series := range scrape(t, ts) {
		n += len(series)
	}
	return n
}

// checkRequestLabels checks every label value of the request metrics
// against the sets their Help text documents.
func checkRequestLabels(t *testing.T, ts *testServer) {
	t.Helper()
	sp, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]bool{"unmatched": true}
	for k := range operations(sp.doc) {
		routes[k.path] = true
	}
	methods := map[string]bool{"GET": true, "POST": true, "PUT": true, "DELETE": true, "HEAD": true, "other": true}
	codes := map[string]bool{"2xx": true, "3xx": true, "4xx": true, "5xx": true}
	for _, c := range []int{200, 201, 204, 400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 500, 503} {
		codes[fmt.Sprint(c)] = true
	}
	all := scrape(t, ts)
	for _, name := range []string{"leasehold_http_requests_total", "leasehold_http_request_duration_seconds"} {
		if len(all[name]) == 0 {
			t.Errorf("/metrics has no %s", name)
		}
		var outside []string
		for _, labels := range all[name] {
			code, hasCode := labels["code"]
			if !methods[labels["method"]] || !routes[labels["route"]] || (hasCode && !codes[code]) {
				outside = append(outside, fmt.Sprintf("%.100v", labels))
			}
		}
		if len(outside) > 0 {
			t.Errorf("%s has %d series outside the fixed sets, such as %s", name, len(outside), strings.Join(outside[:min(3, len(outside))], ", "))
		}
	}
}
