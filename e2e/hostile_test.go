package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// Hostile input, row by row (issue 8 §4): each request is sent as raw bytes
// on its own connection, so paths, headers and bodies reach the sidecar
// exactly as written (no client cleans a path or fixes a header). Every row
// must be answered with its 4xx application/problem+json naming the field,
// nothing may be written, and the sidecar must serve normally afterwards.

const (
	problemMalformed = "urn:leasehold:problem:malformed-request"
	problemInvalid   = "urn:leasehold:problem:invalid-request"
	problemBlank     = "about:blank"
)

// hostileRow is one hostile request and what it must get.
type hostileRow struct {
	name    string
	method  string
	path    string            // as sent on the request line
	headers map[string]string // Content-Type: application/json unless set ("" drops it)
	body    string
	raw     string // when set, the whole request instead of the fields above
	status  int
	typ     string
	field   string // named in invalid_params (422) or in the detail (other statuses)
}

const jsonBody = "application/json"

// hostileRows are requests the sidecar refuses as of today.
func hostileRows() []hostileRow {
	claim := "/v1/leases/hostile/claim"
	renew := "/v1/leases/hostile/renew"
	release := "/v1/leases/hostile/release"
	keepalive := "/v1/leases/hostile/keepalive"
	bigNote := strings.Repeat("n", 70<<10)
	chunked := func(body string) string {
		return "POST " + claim + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	}
	rows := []hostileRow{
		// Wrong types and shapes.
		{name: "owner a number", method: "POST", path: claim, body: `{"owner":42}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "owner null", method: "POST", path: claim, body: `{"owner":null}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "owner an array", method: "POST", path: claim, body: `{"owner":["a"]}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "owner an object", method: "POST", path: claim, body: `{"owner":{"$ne":null}}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "ttl_ms a string", method: "POST", path: claim, body: `{"owner":"w","ttl_ms":"30000"}`, status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "ttl_ms a boolean", method: "POST", path: claim, body: `{"owner":"w","ttl_ms":true}`, status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "ttl_ms negative", method: "POST", path: claim, body: `{"owner":"w","ttl_ms":-1}`, status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "ttl_ms fractional", method: "POST", path: claim, body: `{"owner":"w","ttl_ms":100.5}`, status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "ttl_ms beyond float64", method: "POST", path: claim, body: `{"owner":"w","ttl_ms":1e400}`, status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "ttl_ms 2^63", method: "POST", path: claim, body: `{"owner":"w","ttl_ms":9223372036854775808}`, status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "note a number", method: "POST", path: claim, body: `{"owner":"w","note":1}`, status: 422, typ: problemInvalid, field: "note"},
		{name: "body an array", method: "POST", path: claim, body: `[{"owner":"w"}]`, status: 422, typ: problemInvalid, field: "body"},
		{name: "body a string", method: "POST", path: claim, body: `"w"`, status: 422, typ: problemInvalid, field: "body"},
		{name: "body null", method: "POST", path: claim, body: `null`, status: 422, typ: problemInvalid, field: "body"},
		{name: "token a string", method: "POST", path: renew, body: `{"owner":"w","token":"1"}`, status: 422, typ: problemInvalid, field: "token"},
		{name: "token zero", method: "POST", path: renew, body: `{"owner":"w","token":0}`, status: 422, typ: problemInvalid, field: "token"},
		{name: "token 2^63", method: "POST", path: release, body: `{"owner":"w","token":9223372036854775808}`, status: 422, typ: problemInvalid, field: "token"},
		{name: "token negative", method: "POST", path: release, body: `{"owner":"w","token":-1}`, status: 422, typ: problemInvalid, field: "token"},

		// Missing, unknown and duplicated fields.
		{name: "missing owner", method: "POST", path: claim, body: `{}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "missing owner on renew", method: "POST", path: renew, body: `{"token":1}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "missing owner on release", method: "POST", path: release, body: `{"token":1}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "unknown field", method: "POST", path: claim, body: `{"owner":"w","admin":true}`, status: 422, typ: problemInvalid, field: "admin"},
		{name: "note with NUL on renew", method: "POST", path: renew, body: `{"owner":"w","note":"a\u0000b"}`, status: 422, typ: problemInvalid, field: "note"},
		{name: "note a number on renew", method: "POST", path: renew, body: `{"owner":"w","note":7}`, status: 422, typ: problemInvalid, field: "note"},
		{name: "ttl_ms on release", method: "POST", path: release, body: `{"owner":"w","ttl_ms":1000}`, status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "duplicated owner", method: "POST", path: claim, body: `{"owner":"a","owner":"b"}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "duplicated token", method: "POST", path: release, body: `{"owner":"w","token":1,"token":2}`, status: 422, typ: problemInvalid, field: "token"},

		// Unicode, control characters and invalid UTF-8.
		{name: "owner with BEL", method: "POST", path: claim, body: `{"owner":"w\u0007"}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "owner with NUL", method: "POST", path: claim, body: `{"owner":"w\u0000"}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "owner with newline", method: "POST", path: claim, body: `{"owner":"w\nx"}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "owner with bidi override", method: "POST", path: claim, body: `{"owner":"w\u202eevil"}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "owner with zero-width space", method: "POST", path: claim, body: `{"owner":"w\u200b"}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "owner too long", method: "POST", path: claim, body: `{"owner":"` + strings.Repeat("é", 257) + `"}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "owner invalid UTF-8", method: "POST", path: claim, body: "{\"owner\":\"w\xff\"}", status: 422, typ: problemInvalid, field: "owner"},
		{name: "owner overlong UTF-8 slash", method: "POST", path: claim, body: "{\"owner\":\"\xc0\xaf\"}", status: 422, typ: problemInvalid, field: "owner"},
		{name: "owner lone surrogate", method: "POST", path: claim, body: `{"owner":"w\ud800"}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "note with NUL", method: "POST", path: claim, body: `{"owner":"w","note":"a\u0000b"}`, status: 422, typ: problemInvalid, field: "note"},
		{name: "note invalid UTF-8", method: "POST", path: claim, body: "{\"owner\":\"w\",\"note\":\"\xed\xa0\x80\"}", status: 422, typ: problemInvalid, field: "note"},
		{name: "note over 1024 bytes", method: "POST", path: claim, body: `{"owner":"w","note":"` + strings.Repeat("€", 342) + `"}`, status: 422, typ: problemInvalid, field: "note"},
		{name: "raw control character", method: "POST", path: claim, body: "{\"owner\":\"w\x01\"}", status: 400, typ: problemMalformed, field: "body"},
		{name: "task with unicode", method: "POST", path: "/v1/leases/%C3%A9t%C3%A9/claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "task with NUL", method: "POST", path: "/v1/leases/a%00b/claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "task invalid UTF-8", method: "POST", path: "/v1/leases/%FF/claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "task with newline", method: "GET", path: "/v1/leases/a%0Ab", status: 422, typ: problemInvalid, field: "task"},

		// SQL-looking input where the rules refuse it (as data, see
		// TestHostileInput, it is stored verbatim).
		{name: "SQL in task", method: "POST", path: "/v1/leases/x'%3B%20DROP%20TABLE%20leases%3B--/claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "SQL as ttl_ms", method: "POST", path: claim, body: `{"owner":"w","ttl_ms":"1; DELETE FROM leases"}`, status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "SQL in keepalive ttl_ms", method: "GET", path: keepalive + "?owner=w&ttl_ms=1%20OR%201%3D1", status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "SQL in history limit", method: "GET", path: "/v1/leases/hostile/history?limit=1%3BDROP", status: 422, typ: problemInvalid, field: "limit"},

		// Huge and deep bodies.
		{name: "body over 64 KiB", method: "POST", path: claim, body: `{"owner":"w","note":"` + bigNote + `"}`, status: 413, typ: problemBlank, field: "body"},
		{name: "body over 64 KiB chunked", raw: chunked(`{"owner":"w","note":"` + bigNote + `"}`), status: 413, typ: problemBlank, field: "body"},
		{name: "Content-Length over 64 KiB", raw: "POST " + claim + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\nConnection: close\r\n\r\n{", status: 413, typ: problemBlank, field: "body"},
		{name: "deep object nesting", method: "POST", path: claim, body: `{"owner":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000) + `}`, status: 422, typ: problemInvalid, field: "owner"},
		{name: "deep array nesting", method: "POST", path: claim, body: strings.Repeat(`[`, 30000) + strings.Repeat(`]`, 30000), status: 422, typ: problemInvalid, field: "body"},
		{name: "many keys", method: "POST", path: claim, body: `{"owner":"w"` + strings.Repeat(`,"k":1`, 5000) + `}`, status: 422, typ: problemInvalid, field: "k"},

		// Malformed JSON and empty bodies.
		{name: "truncated JSON", method: "POST", path: claim, body: `{"owner":"w"`, status: 400, typ: problemMalformed, field: "body"},
		{name: "two JSON values", method: "POST", path: claim, body: `{"owner":"w"}{"owner":"x"}`, status: 400, typ: problemMalformed, field: "body"},
		{name: "trailing garbage", method: "POST", path: claim, body: `{"owner":"w"};DROP`, status: 400, typ: problemMalformed, field: "body"},
		{name: "empty body", method: "POST", path: claim, body: ``, status: 400, typ: problemMalformed, field: "body"},
		{name: "single quotes", method: "POST", path: claim, body: `{'owner':'w'}`, status: 400, typ: problemMalformed, field: "body"},
		{name: "NaN", method: "POST", path: claim, body: `{"owner":"w","ttl_ms":NaN}`, status: 400, typ: problemMalformed, field: "body"},

		// Content types.
		{name: "text/plain", method: "POST", path: claim, headers: map[string]string{"Content-Type": "text/plain"}, body: `{"owner":"w"}`, status: 415, typ: problemBlank, field: "application/json"},
		{name: "no content type", method: "POST", path: claim, headers: map[string]string{"Content-Type": ""}, body: `{"owner":"w"}`, status: 415, typ: problemBlank, field: "application/json"},
		{name: "form", method: "POST", path: claim, headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: `owner=w`, status: 415, typ: problemBlank, field: "application/json"},
		{name: "multipart", method: "POST", path: claim, headers: map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, body: "--x\r\n\r\nw\r\n--x--", status: 415, typ: problemBlank, field: "application/json"},
		{name: "xml", method: "POST", path: claim, headers: map[string]string{"Content-Type": "application/xml"}, body: `<owner>w</owner>`, status: 415, typ: problemBlank, field: "application/json"},
		{name: "two content types", raw: "POST " + claim + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nConnection: close\r\n\r\n{\"owner\":\"w\"}", status: 415, typ: problemBlank, field: "Content-Type"},

		// The keepalive stream's query.
		{name: "keepalive ttl_ms=abc", method: "GET", path: keepalive + "?owner=w&ttl_ms=abc", status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "keepalive ttl_ms=1e5", method: "GET", path: keepalive + "?owner=w&ttl_ms=1e5", status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "keepalive ttl_ms too small", method: "GET", path: keepalive + "?owner=w&ttl_ms=1", status: 422, typ: problemInvalid, field: "ttl_ms"},
		{name: "keepalive wait_ms=-1", method: "GET", path: keepalive + "?owner=w&wait_ms=-1", status: 422, typ: problemInvalid, field: "wait_ms"},
		{name: "keepalive wait_ms huge", method: "GET", path: keepalive + "?owner=w&wait_ms=99999999999999999999", status: 422, typ: problemInvalid, field: "wait_ms"},
		{name: "keepalive owner empty", method: "GET", path: keepalive + "?owner=", status: 422, typ: problemInvalid, field: "owner"},
		{name: "keepalive owner invalid UTF-8", method: "GET", path: keepalive + "?owner=%FF&wait_ms=0", status: 422, typ: problemInvalid, field: "owner"},
		{name: "keepalive owner control character", method: "GET", path: keepalive + "?owner=a%07&wait_ms=0", status: 422, typ: problemInvalid, field: "owner"},
		{name: "keepalive owner twice", method: "GET", path: keepalive + "?owner=a&owner=b&wait_ms=0", status: 422, typ: problemInvalid, field: "owner"},
		{name: "keepalive note with NUL", method: "GET", path: keepalive + "?owner=w&note=%00&wait_ms=0", status: 422, typ: problemInvalid, field: "note"},
		{name: "keepalive note too long", method: "GET", path: keepalive + "?owner=w&wait_ms=0&note=" + strings.Repeat("n", 1025), status: 422, typ: problemInvalid, field: "note"},
		{name: "history limit=abc", method: "GET", path: "/v1/leases/hostile/history?limit=abc", status: 422, typ: problemInvalid, field: "limit"},
		{name: "history limit=0", method: "GET", path: "/v1/leases/hostile/history?limit=0", status: 422, typ: problemInvalid, field: "limit"},
		{name: "history limit huge", method: "GET", path: "/v1/leases/hostile/history?limit=1001", status: 422, typ: problemInvalid, field: "limit"},

		// Path tricks that the name rule refuses today, on every endpoint.
		{name: "empty task", method: "POST", path: "/v1/leases//claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "empty task on renew", method: "POST", path: "/v1/leases//renew", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "empty task on keepalive", method: "GET", path: "/v1/leases//keepalive?owner=w", status: 422, typ: problemInvalid, field: "task"},
		{name: "overlong task", method: "POST", path: "/v1/leases/" + strings.Repeat("t", 201) + "/claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "overlong task on release", method: "POST", path: "/v1/leases/" + strings.Repeat("t", 5000) + "/release", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "overlong task on get", method: "GET", path: "/v1/leases/" + strings.Repeat("t", 201), status: 422, typ: problemInvalid, field: "task"},
		{name: "overlong task on history", method: "GET", path: "/v1/leases/" + strings.Repeat("t", 201) + "/history", status: 422, typ: problemInvalid, field: "task"},
		{name: "overlong task on tasks", method: "GET", path: "/v1/tasks/" + strings.Repeat("t", 201), status: 422, typ: problemInvalid, field: "task"},
		{name: "backslash in task", method: "POST", path: "/v1/leases/a%5C..%5Cb/claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "space in task", method: "GET", path: "/v1/tasks/a%20b", status: 422, typ: problemInvalid, field: "task"},
		{name: "unencoded slash", method: "POST", path: "/v1/leases/a/b/claim", body: `{"owner":"w"}`, status: 404, typ: problemBlank, field: "/v1/leases/a/b/claim"},
		{name: "double slash prefix", method: "GET", path: "//v1/leases", status: 404, typ: problemBlank, field: "//v1/leases"},
		{name: "traversal above the API", method: "GET", path: "/v1/leases/../../etc/passwd", status: 404, typ: problemBlank, field: "/etc/passwd"},
		{name: "wrong method", method: "DELETE", path: "/v1/leases/hostile", status: 405, typ: problemBlank, field: "DELETE"},
		{name: "PUT a claim", method: "PUT", path: claim, body: `{"owner":"w"}`, status: 405, typ: problemBlank, field: "PUT"},
		{name: "HEAD a keepalive", method: "HEAD", path: keepalive + "?owner=w", status: 405, typ: problemBlank},
		// Task names clients and proxies that normalise paths cannot reach,
		// and leasehold's own tasks.
		{name: "dot-dot task", method: "POST", path: "/v1/leases/../claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "encoded dot-dot task", method: "POST", path: "/v1/leases/%2e%2e/claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "dot task", method: "POST", path: "/v1/leases/./claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "dot-dot segment", method: "POST", path: "/v1/leases/a%2F..%2Fb/claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "empty segment", method: "POST", path: "/v1/leases/a%2F%2Fb/claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "leading slash", method: "POST", path: "/v1/leases/%2Fa/claim", body: `{"owner":"w"}`, status: 422, typ: problemInvalid, field: "task"},
		{name: "reserved task claim", method: "POST", path: "/v1/leases/leasehold:prune/claim", body: `{"owner":"w"}`, status: 403, field: "leasehold:"},
		{name: "reserved task keepalive", method: "GET", path: "/v1/leases/leasehold:prune/keepalive?owner=w&wait_ms=0", status: 403, field: "leasehold:"},
		{name: "reserved task release", method: "POST", path: "/v1/leases/leasehold:prune/release", body: `{"owner":"w"}`, status: 403, field: "leasehold:"},
		{name: "list limit=abc", method: "GET", path: "/v1/leases?limit=abc", status: 422, typ: problemInvalid, field: "limit"},
		{name: "list limit=0", method: "GET", path: "/v1/leases?limit=0", status: 422, typ: problemInvalid, field: "limit"},
	}
	return rows
}

func TestHostileInput(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			s := startSidecar(t, kind.url(t))
			s.waitReady()
			addr := strings.TrimPrefix(s.base, "http://")

			// A lease that must come through unchanged.
			base := s.call("POST", "/v1/leases/baseline/claim", map[string]any{"owner": "keeper", "ttl_ms": 600000})
			if base.Status != http.StatusOK {
				t.Fatalf("baseline claim: %s", base.Raw)
			}
			before := leaseSnapshot(t, s)

			rows := hostileRows()
			t.Run("rows", func(t *testing.T) {
				for _, row := range rows {
					t.Run(row.name, func(t *testing.T) {
						t.Parallel()
						checkHostile(t, addr, row)
					})
				}
				// Slow clients, on raw connections.
				t.Run("slow headers", func(t *testing.T) {
					t.Parallel()
					// Half a request line, then nothing: net/http drops the
					// connection once ReadHeaderTimeout (5 s) runs out,
					// without an answer (it cannot know where to route one).
					conn := dialRaw(t, addr)
					if _, err := io.WriteString(conn, "POST /v1/leases/hostile/cl"); err != nil {
						t.Fatal(err)
					}
					_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
					got, err := io.ReadAll(conn)
					if err != nil {
						t.Fatalf("connection not closed by the sidecar: %v (read %q)", err, got)
					}
					if len(got) > 0 && !strings.HasPrefix(string(got), "HTTP/1.1 4") {
						t.Fatalf("slow headers answered %q, want nothing or a 4xx", got)
					}
				})
				t.Run("slow body", func(t *testing.T) {
					t.Parallel()
					// Headers and half the body, then nothing: 408 once the
					// sidecar's ReadTimeout (30 s) runs out.
					resp, body := exchangeRaw(t, addr, "POST /v1/leases/hostile/claim HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"owner\":", false)
					checkProblem(t, resp, body, hostileRow{status: 408, typ: problemBlank, field: "body"})
				})
				t.Run("body cut short", func(t *testing.T) {
					t.Parallel()
					resp, body := exchangeRaw(t, addr, "POST /v1/leases/hostile/claim HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"owner\":", true)
					checkProblem(t, resp, body, hostileRow{status: 400, typ: problemMalformed, field: "body"})
				})
				t.Run("bad percent-encoding", func(t *testing.T) {
					t.Parallel()
					// net/http refuses a request line it cannot parse before
					// any handler runs: a plain-text 400, connection closed.
					resp, body := exchangeRaw(t, addr, "GET /v1/leases/%zz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", false)
					if resp.StatusCode != http.StatusBadRequest {
						t.Fatalf("answer %d, want 400: %s", resp.StatusCode, body)
					}
				})
			})

			// Nothing was written: the same leases, no history for the
			// hostile task, whose first claim still gets token 1.
			if after := leaseSnapshot(t, s); !slices.Equal(before, after) {
				t.Fatalf("leases changed under hostile input:\nbefore %v\nafter  %v", before, after)
			}
			for _, task := range []string{"hostile", "baseline"} {
				h := s.call("GET", "/v1/leases/"+task+"/history", nil)
				events, _ := h.Body["events"].([]any)
				if h.Status != http.StatusOK || (task == "hostile" && len(events) != 0) || (task == "baseline" && len(events) != 1) {
					t.Fatalf("history of %s after hostile input: %s", task, h.Raw)
				}
			}

			// Healthy afterwards: health, readiness, and a normal claim.
			for _, path := range []string{"/healthz", "/readyz"} {
				if r := s.call("GET", path, nil); r.Status != http.StatusOK {
					t.Fatalf("%s after hostile input: %s", path, r.Raw)
				}
			}
			for _, path := range []string{"/healthz", "/readyz", "/v1/leases", "/v1/leases/hostile"} {
				// Health checks send HEAD: answered as GET, without a body.
				resp, err := http.Head(s.base + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("HEAD %s after hostile input: %d", path, resp.StatusCode)
				}
			}
			first := s.call("POST", "/v1/leases/hostile/claim", map[string]any{"owner": "w"})
			if first.Status != http.StatusOK || first.token(t) != 1 {
				t.Fatalf("first claim of the hostile task: %s, want 200 with token 1", first.Raw)
			}

			// SQL-looking strings where the rules allow them are data:
			// stored and answered verbatim, and the table still works.
			for i, owner := range []string{
				`'; DROP TABLE leases; --`, `" OR 1=1 --`, `Robert'); DROP TABLE leases;--`, `$1`, `%s%n`, `\x00`,
			} {
				task := fmt.Sprintf("sql-%d", i)
				note := `'); DELETE FROM lease_events; --`
				r := s.call("POST", "/v1/leases/"+task+"/claim", map[string]any{"owner": owner, "note": note})
				if r.Status != http.StatusOK || r.lease(t)["owner"] != owner || r.lease(t)["note"] != note {
					t.Fatalf("claim with owner %q: %s, want 200 with the owner and note verbatim", owner, r.Raw)
				}
				g := s.call("GET", "/v1/leases/"+task, nil)
				if g.Body["held"] != true || g.lease(t)["owner"] != owner {
					t.Fatalf("lease of %s: %s, want held by %q", task, g.Raw, owner)
				}
				if rel := s.call("POST", "/v1/leases/"+task+"/release", map[string]any{"owner": owner}); rel.Body["released"] != true {
					t.Fatalf("release by %q: %s", owner, rel.Raw)
				}
				h := s.call("GET", "/v1/leases/"+task+"/history", nil)
				if events, _ := h.Body["events"].([]any); len(events) != 2 {
					t.Fatalf("history of %s: %s, want claim and release", task, h.Raw)
				}
			}
			list := s.call("GET", "/v1/leases", nil)
			if list.Status != http.StatusOK || len(leaseSnapshot(t, s)) != 2 {
				t.Fatalf("leases after the SQL-looking owners: %s, want baseline and hostile", list.Raw)
			}
			again := s.call("POST", "/v1/leases/sql-0/claim", map[string]any{"owner": "next"})
			if again.Status != http.StatusOK || again.token(t) != 2 {
				t.Fatalf("claim after the SQL-looking owner released: %s, want token 2", again.Raw)
			}
		})
	}
}

// checkHostile sends one row and checks its answer.
func checkHostile(t *testing.T, addr string, row hostileRow) {
	t.Helper()
	raw := row.raw
	if raw == "" {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", row.method, row.path, addr)
		headers := map[string]string{}
		if row.method == "POST" || row.method == "PUT" {
			headers["Content-Type"] = jsonBody
			headers["Content-Length"] = fmt.Sprint(len(row.body))
		}
		for k, v := range row.headers {
			headers[k] = v
		}
		for k, v := range headers {
			if v != "" {
				fmt.Fprintf(&b, "%s: %s\r\n", k, v)
			}
		}
		b.WriteString("\r\n")
		b.WriteString(row.body)
		raw = b.String()
	}
	resp, body := exchangeRaw(t, addr, raw, false)
	if row.method == "HEAD" {
		if resp.StatusCode != row.status || len(body) != 0 {
			t.Fatalf("HEAD answered %d with %q, want %d without a body", resp.StatusCode, body, row.status)
		}
		return
	}
	checkProblem(t, resp, body, row)
}

// checkProblem checks that an answer is the row's problem and names its field.
func checkProblem(t *testing.T, resp *http.Response, body []byte, row hostileRow) {
	t.Helper()
	if resp.StatusCode != row.status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, row.status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, body)
	}
	var p struct {
		Type          string `json:"type"`
		Title         string `json:"title"`
		Status        int    `json:"status"`
		Detail        string `json:"detail"`
		InvalidParams []struct {
			Name   string `json:"name"`
			Reason string `json:"reason"`
		} `json:"invalid_params"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem is not JSON (%v): %s", err, body)
	}
	if p.Status != row.status || p.Title == "" || p.Detail == "" || (row.typ != "" && p.Type != row.typ) {
		t.Fatalf("problem %s, want status %d, type %s, a title and a detail", body, row.status, row.typ)
	}
	if row.status == http.StatusUnprocessableEntity {
		if !slices.ContainsFunc(p.InvalidParams, func(ip struct {
			Name   string `json:"name"`
			Reason string `json:"reason"`
		}) bool {
			return ip.Name == row.field && ip.Reason != ""
		}) {
			t.Fatalf("invalid_params do not name %q with a reason: %s", row.field, body)
		}
	} else if row.field != "" && !strings.Contains(p.Detail, row.field) {
		t.Fatalf("detail %q does not name %q", p.Detail, row.field)
	}
	// Nothing of the sidecar's insides: no addresses, Go errors or stacks.
	for _, leak := range []string{"127.0.0.1", "tcp ", "i/o timeout", "json: ", "Go struct", "goroutine", "panic", ".go:"} {
		if strings.Contains(string(body), leak) {
			t.Fatalf("problem shows %q: %s", leak, body)
		}
	}
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// exchangeRaw writes raw on a new connection (then half-closes it when
// closeWrite) and reads one response. The sidecar may answer before reading
// all of a large body, so a failed write is not an error by itself.
func exchangeRaw(t *testing.T, addr, raw string, closeWrite bool) (*http.Response, []byte) {
	t.Helper()
	conn := dialRaw(t, addr)
	writeErr := make(chan error, 1)
	go func() {
		_, err := io.WriteString(conn, raw)
		if err == nil && closeWrite {
			err = conn.(*net.TCPConn).CloseWrite()
		}
		writeErr <- err
	}()
	_ = conn.SetReadDeadline(time.Now().Add(90 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: methodOf(raw)})
	if err != nil {
		t.Fatalf("no answer (%v; write: %v)", err, <-writeErr)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp, body
}

func methodOf(raw string) string {
	m, _, _ := strings.Cut(raw, " ")
	return m
}

// leaseSnapshot is every client lease as task/owner/token/expires_at/renew_count, sorted.
func leaseSnapshot(t *testing.T, s *sidecar) []string {
	t.Helper()
	r := s.call("GET", "/v1/leases", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /v1/leases: %s", r.Raw)
	}
	leases, _ := r.Body["leases"].([]any)
	var out []string
	for _, l := range leases {
		m, _ := l.(map[string]any)
		if task, _ := m["task"].(string); strings.HasPrefix(task, "leasehold:") {
			continue // the sidecar's own (its pruning round)
		}
		out = append(out, fmt.Sprintf("%v/%v/%v/%v/%v", m["task"], m["owner"], m["token"], m["expires_at"], m["renew_count"]))
	}
	slices.Sort(out)
	return out
}
