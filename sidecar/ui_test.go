package sidecar

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/sidecar/console"
)

// The console is served beside the API: its files without the bearer
// token (they hold no data), the API still behind it, and a HEAD or an
// unknown file under /ui/ answered by the console, not by echo.
func TestConsoleBesideTheAPI(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withToken("s3cret"))
	// Plain client: the console's answers are not operations of openapi.yaml.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path, token string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, ts.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}

	resp, _ := get("/ui", "")
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /ui: %d to %q, want 301 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := get("/ui/", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "leasehold console") {
		t.Fatalf("GET /ui/ without a token: %d", resp.StatusCode)
	}
	if got := resp.Header.Get("Content-Security-Policy"); got != console.ContentSecurityPolicy {
		t.Errorf("GET /ui/: Content-Security-Policy %q", got)
	}
	if resp, _ := get("/ui/console.js", ""); resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Errorf("GET /ui/console.js: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp, _ := get("/v1/leases", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/leases without a token beside the console: %d, want 401", resp.StatusCode)
	}
	if resp, _ := get("/v1/leases", "s3cret"); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/leases with the token: %d", resp.StatusCode)
	}
	// /uifoo is not the console's: echo answers it as any unknown path.
	if resp, _ := get("/uifoo", ""); resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != contentTypeProblem {
		t.Errorf("GET /uifoo: %d %q, want a 404 problem", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
