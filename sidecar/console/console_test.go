package console

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"testing"
	"time"
)

func serve(t *testing.T, method, target string, header http.Header) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, req)
	return rec.Result()
}

func TestHandlerServesAssets(t *testing.T) {
	t.Parallel()
	cases := []struct {
		target, contentType, contains string
	}{
		{"/ui/", "text/html; charset=utf-8", `<script type="module" src="console.js">`},
		{"/ui/index.html", "text/html; charset=utf-8", "<title>leasehold console</title>"},
		{"/ui/console.css", "text/css; charset=utf-8", "prefers-color-scheme: dark"},
		{"/ui/console.js", "text/javascript; charset=utf-8", "from './live.js'"},
		{"/ui/sse.js", "text/javascript; charset=utf-8", "export function createParser"},
		{"/ui/format.js", "text/javascript; charset=utf-8", "export function formatDuration"},
		{"/ui/live.js", "text/javascript; charset=utf-8", "export async function follow"},
		{"/ui/favicon.svg", "image/svg+xml", "<svg"},
	}
	for _, c := range cases {
		resp := serve(t, http.MethodGet, c.target, nil)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", c.target, resp.StatusCode)
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != c.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", c.target, got, c.contentType)
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != ContentSecurityPolicy {
			t.Errorf("GET %s: Content-Security-Policy %q", c.target, got)
		}
		if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q, want no-cache", c.target, got)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q", c.target, got)
		}
		if !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s: body lacks %q", c.target, c.contains)
		}
		etag := resp.Header.Get("ETag")
		if etag == "" {
			t.Errorf("GET %s: no ETag", c.target)
			continue
		}
		again := serve(t, http.MethodGet, c.target, http.Header{"If-None-Match": {etag}})
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", c.target, again.StatusCode)
		}
	}
}

func TestContentSecurityPolicyIsStrict(t *testing.T) {
	t.Parallel()
	if !strings.HasPrefix(ContentSecurityPolicy, "default-src 'self';") {
		t.Errorf("policy %q does not start with default-src 'self'", ContentSecurityPolicy)
	}
	for _, loose := range []string{"unsafe-inline", "unsafe-eval", "*", "data:", "http:", "https:"} {
		if strings.Contains(ContentSecurityPolicy, loose) {
			t.Errorf("policy %q allows %s", ContentSecurityPolicy, loose)
		}
	}
}

func TestHandlerRefusals(t *testing.T) {
	t.Parallel()
	resp := serve(t, http.MethodGet, "/ui", nil)
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want 301 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, target := range []string{"/ui/nope.js", "/ui/assets/console.js", "/ui/../go.mod", "/ui/testdata/sse.test.js"} {
		if resp := serve(t, http.MethodGet, target, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", target, resp.StatusCode)
		}
	}
	resp = serve(t, http.MethodPost, "/ui/", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /ui/: %d (Allow %q), want 405 with Allow: GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
	resp = serve(t, http.MethodHead, "/ui/console.js", nil)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.Header.Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Errorf("HEAD /ui/console.js: %d, %d body bytes, %q", resp.StatusCode, len(body), resp.Header.Get("Content-Type"))
	}
}

func TestOwns(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]bool{
		"/ui": true, "/ui/": true, "/ui/console.js": true,
		"/uix": false, "/v1/ui": false, "/": false, "/healthz": false,
	} {
		if got := Owns(path); got != want {
			t.Errorf("Owns(%q) = %v, want %v", path, got, want)
		}
	}
}

var (
	referenceRE = regexp.MustCompile(`(?:src|href)="([^"]+)"`)
	importRE    = regexp.MustCompile(`(?m)^import .* from '([^']+)';$`)
)

// The strict Content-Security-Policy refuses inline scripts, inline styles
// and event-handler attributes, and anything from another origin: the page
// must use none, and every file it names must be embedded.
func TestAssetsKeepThePolicy(t *testing.T) {
	t.Parallel()
	page, err := assets.ReadFile("assets/index.html")
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`<script(?:\s+type="module")?>`), // a script with no src
		regexp.MustCompile(`<style`),
		regexp.MustCompile(`\sstyle="`),
		regexp.MustCompile(`\son[a-z]+="`),
		regexp.MustCompile(`(?:src|href)="(?:https?:)?//`),
	} {
		if m := bad.FindString(html); m != "" {
			t.Errorf("index.html has %q, which the policy forbids", m)
		}
	}
	for _, m := range referenceRE.FindAllStringSubmatch(html, -1) {
		if _, err := fs.Stat(assets, path.Join("assets", m[1])); err != nil {
			t.Errorf("index.html names %s, which is not embedded", m[1])
		}
	}
	entries, err := fs.Glob(assets, "assets/*.js")
	if err != nil || len(entries) == 0 {
		t.Fatalf("no JavaScript embedded (%v)", err)
	}
	for _, name := range entries {
		src, _ := assets.ReadFile(name)
		for _, m := range importRE.FindAllStringSubmatch(string(src), -1) {
			if _, err := fs.Stat(assets, path.Join("assets", m[1])); err != nil {
				t.Errorf("%s imports %s, which is not embedded", name, m[1])
			}
		}
		if strings.Contains(string(src), "innerHTML") || strings.Contains(string(src), "eval(") {
			t.Errorf("%s writes HTML from strings or evaluates code", name)
		}
	}
}

// The console's JavaScript modules pass their node --test suites
// (testdata/*.test.js).
func TestJavaScriptModules(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node not found; CI needs Node >= 20 for the console's JavaScript tests")
		}
		t.Skip("node not found (outside CI this skips): install Node >= 20 to run the console's JavaScript tests")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "testdata/")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test testdata/: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "ℹ fail 0") {
		t.Fatalf("node --test reported failures:\n%s", out)
	}
	t.Logf("node --test:\n%s", out)
}
