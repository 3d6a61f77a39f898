package opcli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/client/leaserun"
)

// A server that echoes the request back (a debugging proxy, a mistyped
// --addr) in whatever it answers, a refusal's text, a problem's detail, an
// event's data, never makes the commands print the bearer token.
func TestEchoedTokenNotPrinted(t *testing.T) {
	t.Parallel()
	const token = "lh_echoed-token-do-not-print"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	echo := func(r *http.Request) string { return "you sent Authorization: " + r.Header.Get("Authorization") }
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"text refusal", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, echo(r))
		}},
		{"problem", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusForbidden)
			b, _ := json.Marshal(map[string]any{"type": "urn:leasehold:problem:forbidden", "title": "Forbidden", "status": 403, "detail": echo(r)})
			_, _ = w.Write(b)
		}},
		{"event stream", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			fmt.Fprintf(w, "event: ready\ndata: %s\n\nevent: acquired\ndata: %s\n\n", echo(r), echo(r))
		}},
	} {
		hs := httptest.NewServer(tc.handler)
		t.Cleanup(hs.Close)
		for _, verb := range [][]string{{"status"}, {"get", "t"}, {"list"}, {"history", "t"}, {"claim", "t"}, {"release", "t", "--owner", "w"}, {"watch"},
			{"tasks", "list"}, {"tasks", "show", "t"}, {"tasks", "declare", "t", "--ttl", "1m"}, {"tasks", "remove", "t"},
			{"policies", "list"}, {"policies", "show", "p"}, {"policies", "declare", "p"}, {"policies", "remove", "p"}} {
			r := leasehold(t, nil, verb[0], append(verb[1:], "--addr", hs.URL, "--token-file", tokenFile)...)
			if r.code == 0 || strings.Contains(r.stdout+r.stderr, token) {
				t.Errorf("%s, %s: exit %d, output shows the token:\n%s%s", tc.name, verb[0], r.code, r.stdout, r.stderr)
			}
		}
		var stdout, stderr bytes.Buffer
		code := leaserun.Main(t.Context(), []string{"--addr", hs.URL, "--token-file", tokenFile, "--task", "t", "--", "true"}, func(string) string { return "" }, nil, &stdout, &stderr)
		if code == 0 || strings.Contains(stdout.String()+stderr.String(), token) {
			t.Errorf("%s, leasehold run: exit %d, output shows the token:\n%s%s", tc.name, code, stdout.String(), stderr.String())
		}
	}
}
