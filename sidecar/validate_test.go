package sidecar

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/leasehold/leasehold/sidecar/api"
)

// TestInvalidRequests sends every kind of bad request to one server and
// checks the status, that the problem names the field, and that nothing
// was written.
func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		const claim = "/v1/leases/job/claim"
		const jsonCT = "application/json"

		cases := []struct {
			name        string
			method      string
			path        string
			contentType string
			body        string
			status      int
			fields      []string // names in invalid_params, for 422
		}{
			{"malformed JSON", "POST", claim, jsonCT, `{"owner":`, 400, nil},
			{"two JSON values", "POST", claim, jsonCT, `{"owner":"w"}{}`, 400, nil},
			{"no body", "POST", claim, "", ``, 400, nil},
			{"empty JSON body", "POST", claim, jsonCT, ``, 400, nil},
			{"not an object", "POST", claim, jsonCT, `["w"]`, 422, []string{"body"}},
			{"unknown field", "POST", claim, jsonCT, `{"owner":"w","bogus":1}`, 422, []string{"bogus"}},
			{"wrong type ttl_ms", "POST", claim, jsonCT, `{"owner":"w","ttl_ms":"30s"}`, 422, []string{"ttl_ms"}},
			{"fractional ttl_ms", "POST", claim, jsonCT, `{"owner":"w","ttl_ms":1000.5}`, 422, []string{"ttl_ms"}},
			{"wrong type owner", "POST", claim, jsonCT, `{"owner":42}`, 422, []string{"owner"}},
			{"missing owner", "POST", claim, jsonCT, `{}`, 422, []string{"owner"}},
			{"empty owner", "POST", claim, jsonCT, `{"owner":""}`, 422, []string{"owner"}},
			{"owner too long", "POST", claim, jsonCT, `{"owner":"` + strings.Repeat("o", 257) + `"}`, 422, []string{"owner"}},
			{"owner not printable", "POST", claim, jsonCT, `{"owner":"w\u0007"}`, 422, []string{"owner"}},
			{"ttl below 100 ms", "POST", claim, jsonCT, `{"owner":"w","ttl_ms":99}`, 422, []string{"ttl_ms"}},
			{"ttl above 24 h", "POST", claim, jsonCT, `{"owner":"w","ttl_ms":86400001}`, 422, []string{"ttl_ms"}},
			{"note too long", "POST", claim, jsonCT, `{"owner":"w","note":"` + strings.Repeat("n", 1025) + `"}`, 422, []string{"note"}},
			{"note too many bytes", "POST", claim, jsonCT, `{"owner":"w","note":"` + strings.Repeat("é", 600) + `"}`, 422, []string{"note"}},
			{"several at once", "POST", claim, jsonCT, `{"ttl_ms":5,"bogus":true}`, 422, []string{"bogus", "owner", "ttl_ms"}},
			{"bad task name", "POST", "/v1/leases/bad%20name/claim", jsonCT, `{"owner":"w"}`, 422, []string{"task"}},
			{"bad task character", "POST", "/v1/leases/a%21b/claim", jsonCT, `{"owner":"w"}`, 422, []string{"task"}},
			{"task too long", "POST", "/v1/leases/" + strings.Repeat("t", 201) + "/claim", jsonCT, `{"owner":"w"}`, 422, []string{"task"}},
			{"empty task", "POST", "/v1/leases//claim", jsonCT, `{"owner":"w"}`, 422, []string{"task"}},
			{"bad task and body", "POST", "/v1/leases/a%21b/claim", jsonCT, `{}`, 422, []string{"owner", "task"}},
			{"bad task on get", "GET", "/v1/leases/a%21b", "", ``, 422, []string{"task"}},
			{"renew token zero", "POST", "/v1/leases/job/renew", jsonCT, `{"owner":"w","token":0}`, 422, []string{"token"}},
			{"renew unknown field min_hold_ms", "POST", "/v1/leases/job/renew", jsonCT, `{"owner":"w","min_hold_ms":1000}`, 422, []string{"min_hold_ms"}},
			{"renew note too long", "POST", "/v1/leases/job/renew", jsonCT, `{"owner":"w","note":"` + strings.Repeat("n", 1025) + `"}`, 422, []string{"note"}},
			{"renew note too many bytes", "POST", "/v1/leases/job/renew", jsonCT, `{"owner":"w","note":"` + strings.Repeat("é", 600) + `"}`, 422, []string{"note"}},
			{"renew note with NUL", "POST", "/v1/leases/job/renew", jsonCT, `{"owner":"w","note":"a\u0000b"}`, 422, []string{"note"}},
			{"renew note not a string", "POST", "/v1/leases/job/renew", jsonCT, `{"owner":"w","note":7}`, 422, []string{"note"}},
			{"release unknown field ttl_ms", "POST", "/v1/leases/job/release", jsonCT, `{"owner":"w","ttl_ms":1000}`, 422, []string{"ttl_ms"}},
			{"release negative token", "POST", "/v1/leases/job/release", jsonCT, `{"owner":"w","token":-1}`, 422, []string{"token"}},
			{"body over 64 KiB", "POST", claim, jsonCT, `{"owner":"w","note":"` + strings.Repeat("n", 64<<10) + `"}`, 413, nil},
			{"text/plain", "POST", claim, "text/plain", `{"owner":"w"}`, 415, nil},
			{"form", "POST", claim, "application/x-www-form-urlencoded", `owner=w`, 415, nil},
			{"no content type", "POST", claim, "", `{"owner":"w"}`, 415, nil},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				var body []byte
				if c.body != "" {
					body = []byte(c.body)
				}
				r := ts.do(c.method, c.path, c.contentType, body)
				typ := map[int]string{400: problemMalformed, 422: problemInvalid}[c.status]
				if typ == "" {
					typ = problemBlank
				}
				p := expectProblem(t, r, c.status, typ)
				var names []string
				if p.InvalidParams != nil {
					for _, ip := range *p.InvalidParams {
						if ip.Reason == "" {
							t.Errorf("invalid param %q without a reason", ip.Name)
						}
						names = append(names, ip.Name)
					}
				}
				slices.Sort(names)
				if !slices.Equal(names, c.fields) {
					t.Errorf("invalid_params names %v, want %v; problem %s", names, c.fields, r.body)
				}
				for _, f := range c.fields {
					if !strings.Contains(p.Detail, f) {
						t.Errorf("detail %q does not name %s", p.Detail, f)
					}
				}
			})
		}
		// Nothing was written by any of them.
		if leases := decode[api.LeaseList](t, ts.get("/v1/leases")).Leases; len(leases) != 0 {
			t.Fatalf("invalid requests wrote leases: %+v", leases)
		}
		r := ts.get("/metrics")
		if !strings.Contains(string(r.body), `leasehold_store_operation_duration_seconds_count{operation="claim"} 0`) {
			t.Error("an invalid request reached the store's claim")
		}
	})
}

func TestCharsetInContentTypeIsAccepted(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	r := ts.do("POST", "/v1/leases/job/claim", "application/json; charset=utf-8", []byte(`{"owner":"w"}`))
	expect(t, r, http.StatusOK)
}

func TestUnknownRoutesAreProblems(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	p := expectProblem(t, ts.get("/nope"), http.StatusNotFound, problemBlank)
	if !strings.Contains(p.Detail, "/nope") {
		t.Errorf("404 detail %q does not name the path", p.Detail)
	}
	expectProblem(t, ts.get("/v1/leases/a/b/c/d"), http.StatusNotFound, problemBlank)
	expectProblem(t, ts.do(http.MethodDelete, "/v1/leases/job", "", nil), http.StatusMethodNotAllowed, problemBlank)
	expectProblem(t, ts.get("/v1/leases/job/claim"), http.StatusMethodNotAllowed, problemBlank)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withToken("s3cret-token"))
	claim := []byte(`{"owner":"w"}`)

	for name, header := range map[string]string{
		"no token":     "",
		"wrong token":  "Bearer s3cret-tokeN",
		"prefix":       "Bearer s3cret",
		"basic scheme": "Basic s3cret-token",
		"empty bearer": "Bearer ",
	} {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, ts.url+"/v1/leases/job/claim", bytes.NewReader(claim))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if header != "" {
				req.Header.Set("Authorization", header)
			}
			resp, err := ts.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") ||
				resp.Header.Get("Content-Type") != contentTypeProblem {
				t.Fatalf("%d %v, want 401 problem with WWW-Authenticate", resp.StatusCode, resp.Header)
			}
		})
	}
	// Open endpoints stay open.
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml"} {
		expect(t, ts.get(path), http.StatusOK)
	}
	// Unknown /v1 paths do not reveal whether they exist.
	expectProblem(t, ts.get("/v1/nope"), http.StatusUnauthorized, problemBlank)

	ts.token = "s3cret-token"
	expect(t, ts.post("/v1/leases/job/claim", map[string]string{"owner": "w"}), http.StatusOK)
	expect(t, ts.get("/v1/leases"), http.StatusOK)
	if n := len(decode[api.LeaseList](t, ts.get("/v1/leases")).Leases); n != 1 {
		t.Fatalf("%d leases, want the one authorised claim", n)
	}
}

func TestInvalidParamsNameNestedFields(t *testing.T) {
	t.Parallel()
	if got := fieldName("", nil); got != "body" {
		t.Errorf("fieldName of the whole body: %q", got)
	}
	if got := fieldName("task", nil); got != "task" {
		t.Errorf("fieldName of a parameter: %q", got)
	}
	if got := fieldName("", []string{"a", "b"}); got != "a/b" {
		t.Errorf("fieldName of a nested field: %q", got)
	}
}

// onlyReader hides the length of its reader, so the request is sent chunked,
// without a Content-Length the server could check up front.
type onlyReader struct{ io.Reader }

func TestOversizeChunkedBody(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	body := `{"owner":"w","note":"` + strings.Repeat("n", 70<<10) + `"}`
	req, err := http.NewRequest(http.MethodPost, ts.url+"/v1/leases/job/claim", onlyReader{strings.NewReader(body)})
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if req.ContentLength != -1 && req.ContentLength != 0 {
		t.Fatalf("request was not chunked (Content-Length %d)", req.ContentLength)
	}
	expectProblem(t, response{status: resp.StatusCode, header: resp.Header, body: b}, http.StatusRequestEntityTooLarge, problemBlank)
	if n := len(decode[api.LeaseList](t, ts.get("/v1/leases")).Leases); n != 0 {
		t.Fatalf("%d leases written", n)
	}
}

// doBounded is do with a deadline: a request for a stream that were
// accepted would otherwise read until the client hangs up.
func (ts *testServer) doBounded(method, path, contentType string, body []byte) response {
	ts.t.Helper()
	ctx, cancel := context.WithTimeout(ts.t.Context(), 10*time.Second)
	defer cancel()
	return ts.doCtx(ctx, method, path, contentType, body)
}

// expectParams fails t unless r is a 422 problem whose invalid_params name
// exactly fields.
func expectParams(t *testing.T, what string, r response, fields ...string) {
	t.Helper()
	if r.status != http.StatusUnprocessableEntity {
		t.Errorf("%s: status %d, want 422 naming %v; body: %s", what, r.status, fields, r.body)
		return
	}
	p := decode[api.Problem](t, r)
	var names []string
	if p.InvalidParams != nil {
		for _, ip := range *p.InvalidParams {
			names = append(names, ip.Name)
			if ip.Reason == "" {
				t.Errorf("%s: %s named without a reason", what, ip.Name)
			}
		}
	}
	slices.Sort(names)
	if p.Type != problemInvalid || !slices.Equal(names, fields) {
		t.Errorf("%s: %s %v, want %s naming %v; body: %s", what, p.Type, names, problemInvalid, fields, r.body)
	}
}

// TestUnknownQueryParameters: every operation of openapi.yaml refuses a
// query parameter it does not list, naming it, before doing anything:
// a misspelt ?sinse=0 is not a watch from now, and ?pretty is not one of
// the API's.
func TestUnknownQueryParameters(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	sp := ts.spec()
	n := 0
	for path, item := range sp.doc.Paths.Map() {
		for method, op := range item.Operations() {
			target := strings.NewReplacer("{task}", "qp-task", "{name}", "qp-name", "{policy}", "qp-policy").Replace(path)
			if strings.Contains(target, "{") {
				t.Fatalf("%s: a path parameter this test does not fill", path)
			}
			var body []byte
			ct := ""
			if op.RequestBody != nil {
				body, ct = []byte(`{"owner":"w"}`), "application/json"
			}
			q := "?sinse=0"
			if slices.ContainsFunc(op.Parameters, func(p *openapi3.ParameterRef) bool { return p.Value.Name == "owner" }) {
				q = "?owner=w&sinse=0"
			}
			expectParams(t, method+" "+target+q, ts.doBounded(method, target+q, ct, body), "sinse")
			n++
		}
	}
	if n < 10 {
		t.Fatalf("only %d operations checked", n)
	}
	expectParams(t, "pretty", ts.get("/v1/leases?pretty"), "pretty")
	expectParams(t, "two unknown", ts.get("/v1/leases?limit=5&a=1&b=2"), "a", "b")
	if leases := decode[api.LeaseList](t, ts.get("/v1/leases")).Leases; len(leases) != 0 {
		t.Fatalf("requests with unknown parameters wrote leases: %+v", leases)
	}
	// Parameters the operation lists still work, and the answer is plain JSON.
	r := ts.get("/v1/leases?limit=5")
	expect(t, r, http.StatusOK)
	if bytes.Contains(r.body, []byte("\n ")) {
		t.Errorf("answer indented: %s", r.body)
	}
}

// TestIntegerParameterSpelling: an integer in the query or a header is
// plain decimal digits; any other spelling that a parser might read as a
// number (+5, -0, 007, spaces, an exponent, beyond int64) is refused,
// naming the parameter; and a header parameter given twice is refused like
// a query parameter given twice.
func TestIntegerParameterSpelling(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	bad := []string{"%2B5", "+5", "-0", "007", "00", "%205", "5%20", "1e3", "0x10", "5.0", "99999999999999999999", "9223372036854775808"}
	for _, v := range bad {
		expectParams(t, "since="+v, ts.doBounded(http.MethodGet, "/v1/watch?since="+v, "", nil), "since")
		expectParams(t, "limit="+v, ts.get("/v1/leases/qp/history?limit="+v), "limit")
		expectParams(t, "wait_ms="+v, ts.doBounded(http.MethodGet, "/v1/leases/qp/keepalive?owner=w&wait_ms="+v, "", nil), "wait_ms")
	}
	for _, v := range []string{"+5", "-0", "007", "5 6", "1e3", "99999999999999999999"} {
		r, resp := ts.openStreamWith("/v1/watch", http.Header{"Last-Event-ID": {v}}, watchSchemas)
		if r != nil {
			t.Errorf("Last-Event-ID %q opened a stream", v)
			continue
		}
		expectParams(t, "Last-Event-ID "+v, resp, "Last-Event-ID")
	}
	s, resp := ts.openStreamWith("/v1/watch", http.Header{"Last-Event-ID": {"1", "2"}}, watchSchemas)
	if s != nil {
		t.Fatal("two Last-Event-ID headers opened a stream")
	}
	expectParams(t, "Last-Event-ID twice", resp, "Last-Event-ID")
	if p := decode[api.Problem](t, resp); !strings.Contains((*p.InvalidParams)[0].Reason, "2 times") {
		t.Errorf("Last-Event-ID twice: %+v, want it named as given 2 times", p)
	}
	for _, v := range []string{"0", "42"} {
		expect(t, ts.get("/v1/leases/qp/history?limit="+map[string]string{"0": "1"}[v]+v), http.StatusOK)
		s := ts.openWatch("/v1/watch?since="+v, http.Header{"Last-Event-ID": {v}})
		if v == "0" {
			s.expectReady()
		} else {
			s.expectReset(42)
		}
		s.close()
	}
	if leases := decode[api.LeaseList](t, ts.get("/v1/leases")).Leases; len(leases) != 0 {
		t.Fatalf("refused keepalives wrote leases: %+v", leases)
	}
}
