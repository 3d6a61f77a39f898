package sidecar

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestHostPolicy(t *testing.T) {
	t.Parallel()
	p, err := NewHostPolicy("leasehold.internal:7411", []string{"leasehold.default.svc", "*.pods.example", " "})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"127.0.0.1:7411":              true,
		"127.0.0.1":                   true,
		"[::1]:7411":                  true,
		"10.2.3.4:7411":               true, // an IP address cannot be rebound
		"localhost:7411":              true,
		"LOCALHOST.:7411":             true,
		"console.localhost:7411":      true,
		"leasehold.internal:7411":     true, // the --listen host
		"leasehold.default.svc":       true,
		"a.b.pods.example:7411":       true,
		"":                            true, // HTTP/1.0: no browser sends it
		"attacker.example:7411":       false,
		"attacker.example":            false,
		"pods.example:7411":           false, // *.pods.example covers subdomains only
		"localhost.attacker.example":  false,
		"leasehold.default.svc.evil":  false,
		"127.0.0.1.attacker.example":  false,
		"leasehold.internal.evil:741": false,
	} {
		if got := p.Allows(host); got != want {
			t.Errorf("Allows(%q) = %v, want %v", host, got, want)
		}
	}
	anyHost, err := NewHostPolicy("127.0.0.1:7411", []string{"*"})
	if err != nil || !anyHost.Allows("attacker.example:7411") {
		t.Errorf("--allow-host '*' must allow every host (err %v)", err)
	}
	for _, bad := range []string{"http://x", "x:80", "*.", "a*b", "*.a*"} {
		if _, err := NewHostPolicy("127.0.0.1:7411", []string{bad}); err == nil || !strings.Contains(err.Error(), "--allow-host") {
			t.Errorf("--allow-host %q: err %v, want one naming --allow-host", bad, err)
		}
	}
}

// TestForeignHostRefused: DNS rebinding. A request naming a host the sidecar
// is not configured for is answered 421 on every path, and writes nothing.
func TestForeignHostRefused(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/leases/rebind/claim", `{"owner":"attacker"}`},
		{http.MethodGet, "/v1/leases/rebind/keepalive?owner=attacker", ""},
		{http.MethodGet, "/v1/leases", ""},
		{http.MethodGet, "/metrics", ""},
		{http.MethodGet, "/ui/", ""},
		{http.MethodGet, "/nowhere", ""},
	} {
		req, err := http.NewRequest(c.method, ts.url+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "attacker.example:7411"
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		r := ts.send(req)
		p := expectProblem(t, r, http.StatusMisdirectedRequest, problemHostNotAllowed)
		if !strings.Contains(p.Detail, "attacker.example") {
			t.Errorf("%s %s: detail %q does not name the host", c.method, c.path, p.Detail)
		}
	}
	expectNoLease(t, ts, "rebind")
	if got := ts.get("/metrics"); !strings.Contains(string(got.body), `leasehold_http_refused_total{reason="host"} 6`) {
		t.Errorf("/metrics does not count the 6 refusals:\n%s", grepLines(got.body, "leasehold_http_refused_total"))
	}
}

// TestCrossSiteRefused: what a page of another origin makes a browser send
// (an iframe or EventSource on the keepalive route, a form post, a no-cors
// fetch) is refused with 403 and writes nothing; same-origin requests (the
// console) and programs that send no such headers are served.
func TestCrossSiteRefused(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	for _, c := range []struct {
		name, method, path, body string
		headers                  map[string]string
	}{
		{"iframe on keepalive", http.MethodGet, "/v1/leases/x/keepalive?owner=a&ttl_ms=600000", "",
			map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}},
		{"EventSource on keepalive", http.MethodGet, "/v1/leases/x/keepalive?owner=a", "",
			map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors", "Origin": "http://attacker.example"}},
		{"img from a sibling port", http.MethodGet, "/v1/leases/x/keepalive?owner=a", "",
			map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Dest": "image"}},
		{"form post", http.MethodPost, "/v1/leases/x/claim", `{"owner":"a"}`,
			map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://attacker.example", "Content-Type": "application/json"}},
		{"old browser, Origin only", http.MethodPost, "/v1/leases/x/claim", `{"owner":"a"}`,
			map[string]string{"Origin": "http://attacker.example", "Content-Type": "application/json"}},
		{"opaque origin", http.MethodPost, "/v1/leases/x/release", `{"owner":"a"}`,
			map[string]string{"Origin": "null", "Content-Type": "application/json"}},
		{"read", http.MethodGet, "/v1/leases", "", map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		req, err := http.NewRequest(c.method, ts.url+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		r := ts.send(req)
		if r.status != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403; body %s", c.name, r.status, r.body)
			continue
		}
		expectProblem(t, r, http.StatusForbidden, problemCrossSite)
	}
	expectNoLease(t, ts, "x")

	// The console's own calls, and programs.
	for _, headers := range []map[string]string{
		{"Sec-Fetch-Site": "same-origin", "Origin": ts.url},
		{"Sec-Fetch-Site": "none"}, // typed into the address bar
		{},
	} {
		req, err := http.NewRequest(http.MethodPost, ts.url+"/v1/leases/x/claim", strings.NewReader(`{"owner":"a"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		expect(t, ts.send(req), http.StatusOK)
	}
	// /healthz and the console's files stay open to any page: they hold no
	// data, and a cross-site read is blocked by the browser anyway.
	req, err := http.NewRequest(http.MethodGet, ts.url+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	expect(t, ts.send(req), http.StatusOK)
}

// send sends a prepared request through the conforming client.
func (ts *testServer) send(req *http.Request) response {
	ts.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := ts.client.Do(req.WithContext(ctx))
	if err != nil {
		ts.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return response{status: resp.StatusCode, header: resp.Header, body: []byte(b.String())}
}

// expectNoLease fails unless task has never been granted: no live lease and
// no history.
func expectNoLease(t *testing.T, ts *testServer, task string) {
	t.Helper()
	if r := ts.get("/v1/leases/" + task); !strings.Contains(string(r.body), `"held":false`) {
		t.Errorf("task %s is held: %s", task, r.body)
	}
	if r := ts.get("/v1/leases/" + task + "/history"); !strings.Contains(string(r.body), `"events":[]`) {
		t.Errorf("task %s has history: %s", task, r.body)
	}
}

// grepLines returns the lines of b that contain s.
func grepLines(b []byte, s string) string {
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
