package cli

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/endpoint"
)

// ParseAddr takes a sidecar's base URL and refuses anything else, saying
// why and stating the rule, without quoting a password.
func TestParseAddr(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"http://127.0.0.1:7411",
		"http://127.0.0.1:7411/",
		"https://leasehold.internal",
		"http://[::1]:7411",
		"http://localhost:1",
		"http://localhost:65535",
		"http://user:secret@127.0.0.1:7411",
	} {
		if _, err := endpoint.ParseAddr(raw); err != nil {
			t.Errorf("endpoint.ParseAddr(%q): %v", raw, err)
		}
	}
	for _, tc := range []struct{ raw, why string }{
		{"http://127.0.0.1:99999", "port 99999 is out of range"},
		{"http://127.0.0.1:0", "port 0 is out of range"},
		{"http://127.0.0.1:99999999999999999999", "out of range"},
		{"http://127.0.0.1:http", "invalid port"},
		{"http://user:secret@127.0.0.1:x", "invalid port"},
		{"http://127.0.0.1:", "port is empty"},
		{"ftp://127.0.0.1:7411", `scheme "ftp" is not http or https`},
		{"127.0.0.1:7411", "no http:// or https://"},
		{"localhost:7411", "no http:// or https://"},
		{"user:secret@127.0.0.1:7411", "no http:// or https://"},
		{"http:127.0.0.1", "no // before the host"},
		{"", "no http:// or https://"},
		{"http://", "names no host"},
		{"http://:7411", "names no host"},
		{"http://user:secret@:7411", "names no host"},
		{"http://127.0.0.1:7411/v1/leases", "has a path (/v1/leases)"},
		{"http://127.0.0.1:7411/?x=1", "has a query"},
		{"http://127.0.0.1:7411?", "has a query"},
		{"http://127.0.0.1:7411#top", "has a fragment"},
		{"http://127.0.0.1:7411#", "has a fragment"},
		{"http://127.0.0.1 :7411", "invalid character"},
	} {
		_, err := endpoint.ParseAddr(tc.raw)
		if err == nil {
			t.Errorf("endpoint.ParseAddr(%q) accepted it; want %q", tc.raw, tc.why)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.why) || !strings.HasSuffix(msg, endpoint.AddrRule) || strings.Contains(msg, "secret") {
			t.Errorf("endpoint.ParseAddr(%q): %q; want %q and the rule, and no password", tc.raw, msg, tc.why)
		}
	}
}

// RedactAddr masks the password of any address, parsed or not.
func TestRedactAddr(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"http://127.0.0.1:7411":                     "http://127.0.0.1:7411",
		"http://user:secret@127.0.0.1:7411":         "http://user:xxxxx@127.0.0.1:7411",
		"http://user:secret@127.0.0.1:99999/x?y#z":  "http://user:xxxxx@127.0.0.1:99999/x?y#z",
		"http://user:secret@127.0.0.1:x":            "http://xxxxx@127.0.0.1:x",
		"user:secret@127.0.0.1:7411":                "xxxxx@127.0.0.1:7411",
		"http://127.0.0.1:7411/?password=secret":    "http://127.0.0.1:7411/?password=xxxxx",
		"http://user:sec%20ret@127.0.0.1:7411":      "http://user:xxxxx@127.0.0.1:7411",
		"http://user:sec ret@127.0.0.1 :7411":       "http://xxxxx@127.0.0.1 :7411",
		"localhost:7411":                            "localhost:7411",
		"https://user@leasehold.internal/api#frag":  "https://user@leasehold.internal/api#frag",
		"http://user:secret@[::1]:7411/":            "http://user:xxxxx@[::1]:7411/",
		"http://user:p%40ss:w@rd@127.0.0.1:7411/v1": "http://user:xxxxx@127.0.0.1:7411/v1",
	} {
		if got := RedactAddr(raw); got != want {
			t.Errorf("RedactAddr(%q) = %q, want %q", raw, got, want)
		}
	}
}
