package tfprovider

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{100 * time.Millisecond, "100ms"},
		{1500 * time.Millisecond, "1.5s"},
		{90 * time.Second, "1m30s"},
		{10 * time.Minute, "10m"},
		{time.Hour + 30*time.Second, "1h0m30s"},
		{90 * time.Minute, "1h30m"},
		{720 * time.Hour, "720h"},
		{-time.Hour, "-1h"},
	} {
		got := formatDuration(c.d)
		if got != c.want {
			t.Errorf("formatDuration(%v) = %q, want %q", c.d, got, c.want)
		}
		if back, err := time.ParseDuration(got); err != nil || back != c.d {
			t.Errorf("formatDuration(%v) = %q, which parses as %v, %v", c.d, got, back, err)
		}
	}
}

// TestValidators runs the attribute validators as the framework does, on
// values of their attributes.
func TestValidators(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		v     validator.String
		attr  string
		value string
		err   string // a part of the error's detail; empty when valid
	}{
		{"ttl ok", ttlRule, "ttl", "90s", ""},
		{"ttl min", ttlRule, "ttl", "100ms", ""},
		{"ttl max", ttlRule, "ttl", "24h", ""},
		{"ttl below min", ttlRule, "ttl", "99ms", "ttl must be between 100ms and 24h; 99ms is not"},
		{"ttl above max", ttlRule, "ttl", "24h0m0.001s", "ttl must be between 100ms and 24h; 24h0m0.001s is not"},
		{"ttl sub-millisecond", ttlRule, "ttl", "100.5ms", "ttl must be a whole number of milliseconds"},
		{"not a duration is left to the type", ttlRule, "ttl", "soon", ""},
		{"keep_for zero", keepForRule, "keep_for", "0s", ""},
		{"keep_for sub-second", keepForRule, "keep_for", "1.5s", "keep_for must be a whole number of seconds"},
		{"keep_for negative", keepForRule, "keep_for", "-1s", "keep_for must be between 0s and 876000h"},
		{"task name ok", taskNameRule, "name", "billing/nightly@eu-1", ""},
		{"task name empty", taskNameRule, "name", "", "name is not a valid task name: it must be 1 to 200 characters"},
		{"task name space", taskNameRule, "name", "a b", "' ' at position 2 is not"},
		{"task name too long", taskNameRule, "name", strings.Repeat("a", 201), "1 to 200 characters"},
		{"task name dots", taskNameRule, "name", "a.../...b/...", ""},
		{"task name dot dot segment", taskNameRule, "name", "a/../b", `no empty, "." or ".." segment between slashes; segment 2 is ".."`},
		{"task name dot segment", taskNameRule, "name", "./a", `segment 1 is "."`},
		{"task name empty segment", taskNameRule, "name", "a//b", `segment 2 is ""`},
		{"task name trailing slash", taskNameRule, "name", "a/", `segment 2 is ""`},
		{"policy name ok", policyNameRule, "retention_policy", "audit-30d", ""},
		{"policy name too long", policyNameRule, "retention_policy", strings.Repeat("a", 65), "retention_policy is not a valid retention policy name: it must be 1 to 64 characters"},
		{"description ok", descriptionRule{}, "description", strings.Repeat("é", 512), ""},
		{"description too long", descriptionRule{}, "description", strings.Repeat("é", 512) + "x", "at most 1024 bytes; it has 1025 bytes"},
		{"description NUL", descriptionRule{}, "description", "a\x00b", "without NUL"},
		{"description bad UTF-8", descriptionRule{}, "description", "\xff", "valid UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			req := validator.StringRequest{Path: path.Root(c.attr), ConfigValue: types.StringValue(c.value)}
			var resp validator.StringResponse
			c.v.ValidateString(context.Background(), req, &resp)
			if c.err == "" {
				if resp.Diagnostics.HasError() {
					t.Fatalf("%q refused: %v", c.value, resp.Diagnostics)
				}
				return
			}
			if resp.Diagnostics.ErrorsCount() != 1 {
				t.Fatalf("%q: want one error containing %q, got %v", c.value, c.err, resp.Diagnostics)
			}
			d := resp.Diagnostics.Errors()[0]
			if d.Summary() != "Invalid "+c.attr || !strings.Contains(d.Detail(), c.err) {
				t.Fatalf("%q: got %q: %q, want \"Invalid %s\" containing %q", c.value, d.Summary(), d.Detail(), c.attr, c.err)
			}
		})
	}
}

// TestReservedTaskNote: declaring one of leasehold's own tasks is allowed
// (it chooses the retention policy of its history) but warns that its ttls
// have no effect; other names get no diagnostic.
func TestReservedTaskNote(t *testing.T) {
	t.Parallel()
	for name, warn := range map[string]bool{"leasehold:prune": true, "leasehold:x": true, "nightly": false, "x:leasehold:prune": false} {
		req := validator.StringRequest{Path: path.Root("name"), ConfigValue: types.StringValue(name)}
		var resp validator.StringResponse
		reservedTaskNote{}.ValidateString(context.Background(), req, &resp)
		if resp.Diagnostics.HasError() {
			t.Errorf("%q: errors %v, want none", name, resp.Diagnostics)
		}
		if got := resp.Diagnostics.WarningsCount(); got != map[bool]int{true: 1, false: 0}[warn] {
			t.Errorf("%q: %d warnings %v, want warning %v", name, got, resp.Diagnostics, warn)
			continue
		}
		if warn {
			d := resp.Diagnostics.Warnings()[0]
			if d.Summary() != "Reserved task" || !strings.Contains(d.Detail(), "ttl and max_ttl have no effect") {
				t.Errorf("%q: warning %q: %q", name, d.Summary(), d.Detail())
			}
		}
	}
}
