package sidecar

import (
	"bufio"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/sidecar/api"
)

// TestStrictBodies: what encoding/json lets through silently (invalid UTF-8,
// lone surrogates, duplicate keys) or answers with its own internals (numbers
// it cannot put in an int64) is a 422 naming the field, and nothing is
// written; whole numbers in any JSON spelling are accepted as integers.
func TestStrictBodies(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		const jsonCT = "application/json"
		refused := []struct {
			name   string
			path   string
			body   string
			field  string
			reason string // a part of the field's reason
		}{
			{"invalid UTF-8 owner", "/v1/leases/a/claim", "{\"owner\":\"a\xff\"}", "owner", "UTF-8"},
			{"invalid UTF-8 note", "/v1/leases/a/claim", "{\"owner\":\"a\",\"note\":\"\xc3\x28\"}", "note", "UTF-8"},
			{"overlong UTF-8", "/v1/leases/a/claim", "{\"owner\":\"\xc0\xaf\"}", "owner", "UTF-8"},
			{"lone high surrogate", "/v1/leases/a/claim", `{"owner":"a\ud800"}`, "owner", "surrogate"},
			{"lone low surrogate", "/v1/leases/a/claim", `{"owner":"\udc00a"}`, "owner", "surrogate"},
			{"high surrogate then letter", "/v1/leases/a/claim", `{"owner":"\ud800\u0041"}`, "owner", "surrogate"},
			{"invalid UTF-8 key", "/v1/leases/a/claim", "{\"owner\":\"a\",\"\xff\":1}", "body", "UTF-8"},
			{"duplicate owner", "/v1/leases/a/claim", `{"owner":"a","owner":"b"}`, "owner", "more than once"},
			{"duplicate token on release", "/v1/leases/a/release", `{"owner":"a","token":1,"token":2}`, "token", "more than once"},
			{"duplicate key nested", "/v1/leases/a/claim", `{"owner":{"x":1,"x":2}}`, "owner/x", "more than once"},
			{"deep nesting at the top", "/v1/leases/a/claim", strings.Repeat("[", 40) + strings.Repeat("]", 40), "body", "deeper than 16"},
			{"deep nesting", "/v1/leases/a/claim", `{"owner":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, "owner", "deeper than 16"},
			{"fractional ttl", "/v1/leases/a/claim", `{"owner":"a","ttl_ms":100.5}`, "ttl_ms", "from 100 to 86400000"},
			{"ttl beyond float64", "/v1/leases/a/claim", `{"owner":"a","ttl_ms":1e400}`, "ttl_ms", "from 100 to 86400000"},
			{"ttl 2^63", "/v1/leases/a/claim", `{"owner":"a","ttl_ms":9223372036854775808}`, "ttl_ms", "86400000"},
			{"ttl 1e19", "/v1/leases/a/claim", `{"owner":"a","ttl_ms":1e19}`, "ttl_ms", "86400000"},
			{"ttl above the maximum", "/v1/leases/a/claim", `{"owner":"a","ttl_ms":86400001}`, "ttl_ms", "86400000"},
			{"ttl above the maximum in exponent form", "/v1/leases/a/claim", `{"owner":"a","ttl_ms":8.64e7000}`, "ttl_ms", "86400000"},
			{"token 2^63", "/v1/leases/a/renew", `{"owner":"a","token":9223372036854775808}`, "token", "from 1 to 9223372036854775807"},
			{"token tiny fraction", "/v1/leases/a/renew", `{"owner":"a","token":1.0000000000000000001}`, "token", "whole number"},
			{"token huge negative exponent", "/v1/leases/a/release", `{"owner":"a","token":1e-400}`, "token", "whole number"},
			{"string field as huge number", "/v1/leases/a/claim", `{"owner":1e400}`, "owner", "too large"},
		}
		for _, c := range refused {
			t.Run(c.name, func(t *testing.T) {
				r := ts.do("POST", c.path, jsonCT, []byte(c.body))
				p := expectProblem(t, r, http.StatusUnprocessableEntity, problemInvalid)
				if p.InvalidParams == nil {
					t.Fatalf("no invalid_params: %s", r.body)
				}
				i := slices.IndexFunc(*p.InvalidParams, func(ip api.InvalidParam) bool { return ip.Name == c.field })
				if i < 0 {
					t.Fatalf("invalid_params do not name %q: %s", c.field, r.body)
				}
				if reason := (*p.InvalidParams)[i].Reason; !strings.Contains(reason, c.reason) {
					t.Errorf("reason %q does not say %q", reason, c.reason)
				}
				for _, internal := range []string{"json:", "Go struct", "int64", "float64", "json.Number", "e+"} {
					if strings.Contains(p.Detail, internal) {
						t.Errorf("detail %q shows decoder internals (%q)", p.Detail, internal)
					}
				}
			})
		}
		if leases := decode[api.LeaseList](t, ts.get("/v1/leases")).Leases; len(leases) != 0 {
			t.Fatalf("refused bodies wrote leases: %+v", leases)
		}

		// Whole numbers in any spelling are the integer.
		for i, spelling := range []string{"1e5", "100000.0", "1.0E5", "1E+5", "100000", "10000000e-2"} {
			task := "spelled-" + string(rune('a'+i))
			r := ts.do("POST", "/v1/leases/"+task+"/claim", jsonCT, []byte(`{"owner":"w","ttl_ms":`+spelling+`}`))
			expect(t, r, http.StatusOK)
			if got := decode[api.ClaimAcquired](t, r).Lease.TtlMs; got != 100000 {
				t.Errorf("ttl_ms %s: lease ttl_ms %d, want 100000", spelling, got)
			}
			r = ts.do("POST", "/v1/leases/"+task+"/release", jsonCT, []byte(`{"owner":"w","token":1.0e0}`))
			expect(t, r, http.StatusOK)
			if !decode[api.ReleaseResult](t, r).Released {
				t.Errorf("release with token 1.0e0: %s, want released", r.body)
			}
		}
		// Valid surrogate pairs and non-ASCII text are data like any other.
		r := ts.do("POST", "/v1/leases/pair/claim", jsonCT, []byte(`{"owner":"w-\ud83d\ude00-é","note":"\u00e9t\u00e9"}`))
		expect(t, r, http.StatusOK)
		if l := decode[api.ClaimAcquired](t, r).Lease; l.Owner != "w-😀-é" || l.Note != "été" {
			t.Errorf("lease owner %q note %q, want w-😀-é and été", l.Owner, l.Note)
		}
	})
}

// TestBoundsArePlainIntegers: kin-openapi prints a schema's bounds as floats
// (8.64e+07); every problem says them as integers.
func TestBoundsArePlainIntegers(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	for _, c := range []struct{ path, body, want string }{
		{"/v1/leases/a/claim", `{"owner":"a","ttl_ms":86400001}`, "at most 86400000"},
		{"/v1/leases/a/claim", `{"owner":"a","ttl_ms":99}`, "at least 100"},
		{"/v1/leases/a/keepalive?ttl_ms=86400001", "", "86400000"},
	} {
		var r response
		if c.body == "" {
			r = ts.get(c.path)
		} else {
			r = ts.do("POST", c.path, "application/json", []byte(c.body))
		}
		p := expectProblem(t, r, http.StatusUnprocessableEntity, problemInvalid)
		if !strings.Contains(p.Detail, c.want) || strings.Contains(p.Detail, "e+") {
			t.Errorf("%s %s: detail %q, want %q and no exponent", c.path, c.body, p.Detail, c.want)
		}
	}
}

// rawServer serves srv over a real listener with the sidecar's http.Server
// settings, except for a short ReadTimeout, and returns its address.
func rawServer(t *testing.T, readTimeout time.Duration) string {
	t.Helper()
	ts := newTestServer(t)
	hs := httptest.NewUnstartedServer(nil)
	cfg := ts.srv.HTTPServer()
	cfg.ReadTimeout = readTimeout
	cfg.ErrorLog = nil
	hs.Config = cfg
	hs.Start()
	t.Cleanup(hs.Close)
	return hs.Listener.Addr().String()
}

// rawExchange sends raw on a new connection, optionally half-closes it, and
// returns the response.
func rawExchange(t *testing.T, addr, raw string, closeWrite bool) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	if closeWrite {
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	// A generous bound: the server answers within its ReadTimeout.
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp, b.String()
}

// TestStalledBodyIs408: a client that sends its headers and half its body,
// then waits, gets a 408 problem once the server's ReadTimeout runs out,
// with neither socket addresses nor Go error text in it; one that hangs up
// halfway gets a 400 without them.
func TestStalledBodyIs408(t *testing.T) {
	t.Parallel()
	addr := rawServer(t, 300*time.Millisecond)
	const head = "POST /v1/leases/stall/claim HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n"
	for _, c := range []struct {
		name       string
		closeWrite bool
		status     int
	}{
		{"stalled", false, http.StatusRequestTimeout},
		{"hung up", true, http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			resp, body := rawExchange(t, addr, head+`{"owner":"w"`, c.closeWrite)
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != contentTypeProblem {
				t.Fatalf("answer %d %s, want %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), c.status, contentTypeProblem, body)
			}
			// The detail names the server's actual ReadTimeout.
			if !c.closeWrite && !strings.Contains(body, "within 300ms of") {
				t.Errorf("408 detail does not name the server's ReadTimeout (300ms): %s", body)
			}
			for _, leak := range []string{"127.0.0.1", "tcp", "i/o timeout", "EOF", "->"} {
				if strings.Contains(body, leak) {
					t.Errorf("answer shows %q: %s", leak, body)
				}
			}
		})
	}
}

// TestHeadOnGetRoutes: health checks send HEAD; every GET route but the
// keepalive stream answers it as GET without the body.
func TestHeadOnGetRoutes(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	expect(t, ts.post("/v1/leases/held/claim", map[string]any{"owner": "w"}), http.StatusOK)
	for _, path := range []string{
		"/healthz", "/readyz", "/metrics", "/openapi.yaml",
		"/v1/leases", "/v1/leases/held", "/v1/leases/held/history", "/v1/tasks",
	} {
		get := ts.get(path)
		head := ts.do(http.MethodHead, path, "", nil)
		if head.status != http.StatusOK || head.status != get.status {
			t.Errorf("HEAD %s: %d, want %d as GET", path, head.status, get.status)
		}
		if len(head.body) != 0 {
			t.Errorf("HEAD %s has a body: %q", path, head.body)
		}
		if h, g := head.header.Get("Content-Type"), get.header.Get("Content-Type"); h != g {
			t.Errorf("HEAD %s: Content-Type %q, GET's is %q", path, h, g)
		}
	}
	// HEAD of a declared-nowhere task answers as GET does (404 problem).
	if r := ts.do(http.MethodHead, "/v1/tasks/nope", "", nil); r.status != http.StatusNotFound {
		t.Errorf("HEAD /v1/tasks/nope: %d, want 404", r.status)
	}
	// A bad task name is refused as for GET.
	if r := ts.do(http.MethodHead, "/v1/leases/a%21b", "", nil); r.status != http.StatusUnprocessableEntity {
		t.Errorf("HEAD /v1/leases/a%%21b: %d, want 422", r.status)
	}
	// HEAD never opens a keepalive stream (it would claim), nor does it
	// reach a POST route.
	for _, path := range []string{"/v1/leases/free/keepalive?owner=w", "/v1/leases/free/claim"} {
		r := ts.do(http.MethodHead, path, "", nil)
		if r.status != http.StatusMethodNotAllowed {
			t.Errorf("HEAD %s: %d, want 405", path, r.status)
		}
	}
	if l := decode[api.LeaseState](t, ts.get("/v1/leases/free")); l.Held {
		t.Error("HEAD on keepalive claimed the task")
	}
}

// TestWholeNumber: the exact reading of number literals in integer fields.
func TestWholeNumber(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		lit  string
		want int64
		ok   bool
	}{
		{"1e5", 100000, true}, {"100000.0", 100000, true}, {"1.5e1", 15, true}, {"-2.50e2", -250, true},
		{"0.0e-99999999999999999999", 0, true}, {"-0.0", 0, true}, {"123456789e-9", 0, false},
		{"1.05e1", 0, false}, {"9007199254740993.0", 9007199254740993, true},
		{"9.223372036854775807e18", math.MaxInt64, true}, {"9.223372036854775808e18", 0, false},
		{"-9.223372036854775808e18", math.MinInt64, true}, {"1e-99999999999999999999", 0, false},
		{"10000000000000000000e-1", 1000000000000000000, true},
	} {
		got, ok := wholeNumber(c.lit)
		if got != c.want || ok != c.ok {
			t.Errorf("wholeNumber(%s) = %d, %v; want %d, %v", c.lit, got, ok, c.want, c.ok)
		}
	}
}

// TestRepeatedParameters: a query parameter or a Content-Type given twice is
// refused, naming it, rather than one of the values picked.
func TestRepeatedParameters(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	for _, c := range []struct{ path, field string }{
		{"/v1/leases/rep/keepalive?owner=a&owner=b&wait_ms=0", "owner"},
		{"/v1/leases/rep/keepalive?owner=a&ttl_ms=1000&ttl_ms=2000", "ttl_ms"},
		{"/v1/leases/rep/history?limit=1&limit=2", "limit"},
	} {
		p := expectProblem(t, ts.get(c.path), http.StatusUnprocessableEntity, problemInvalid)
		if p.InvalidParams == nil || len(*p.InvalidParams) != 1 || (*p.InvalidParams)[0].Name != c.field ||
			!strings.Contains((*p.InvalidParams)[0].Reason, "2 times") {
			t.Errorf("%s: %+v, want %s named as given 2 times", c.path, p, c.field)
		}
	}
	req, err := http.NewRequest("POST", ts.url+"/v1/leases/rep/claim", strings.NewReader(`{"owner":"w"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Add("Content-Type", "application/json")
	req.Header.Add("Content-Type", "text/plain")
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("two Content-Types: %d, want 415", resp.StatusCode)
	}
	if l := decode[api.LeaseState](t, ts.get("/v1/leases/rep")); l.Held {
		t.Error("a refused request claimed the task")
	}
}
