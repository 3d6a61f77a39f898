package leaserun

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
)

// What a sidecar answers (a holder's owner, a refusal's detail) reaches the
// terminal escaped: leasehold run logs it as a quoted value, so an escape
// sequence or a newline in it neither acts on the terminal nor forges a log
// line.
func TestSidecarTextEscaped(t *testing.T) {
	t.Parallel()
	const evil = "\x1b]0;pwned\x07\x1b[2J\nlevel=INFO msg=forged\u009b1m\u202e"
	jsonString := func(s string) string {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		name   string
		status int
		ct     string
		body   string
		code   int
	}{
		{"held", http.StatusConflict, "application/json", fmt.Sprintf(`{"acquired":false,"reason":"held","holder":{"owner":%s,"expires_at":"2026-12-03T17:15:21.742Z","ttl_remaining_ms":1000},"detail":%s}`,
			jsonString("o"+evil), jsonString("d"+evil)), exitcode.Held},
		{"a problem", http.StatusUnprocessableEntity, "application/problem+json", fmt.Sprintf(`{"type":"urn:leasehold:problem:invalid-request","title":"Invalid","status":422,"detail":%s}`, jsonString("d"+evil)), exitcode.Usage},
		{"text", http.StatusServiceUnavailable, "text/plain", "d" + evil, exitcode.Unavailable},
	} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", tc.ct)
			w.WriteHeader(tc.status)
			fmt.Fprint(w, tc.body)
		}))
		t.Cleanup(hs.Close)
		stdout, stderr := new(lockedbuf.Buffer), new(lockedbuf.Buffer)
		code := Main(context.Background(), []string{"--addr", hs.URL, "--task", "t", "--", "true"}, func(string) string { return "" }, nil, stdout, stderr)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d: %s", tc.name, code, tc.code, stderr)
		}
		out := stderr.String()
		for _, r := range out {
			if r != '\n' && !unicode.IsPrint(r) {
				t.Errorf("%s: %U reaches the terminal:\n%q", tc.name, r, out)
				break
			}
		}
		if n := strings.Count(out, "\n"); n != 1 || strings.Contains(out, "\nlevel=INFO msg=forged") {
			t.Errorf("%s: %d lines, want one log line:\n%s", tc.name, n, out)
		}
		if !strings.Contains(out, `\x1b]0;pwned\a\x1b[2J\nlevel=INFO msg=forged\u009b1m\u202e`) {
			t.Errorf("%s: the sidecar's text is not in the log, escaped:\n%s", tc.name, out)
		}
	}
}
