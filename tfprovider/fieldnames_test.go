package tfprovider

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// A declaration or policy that leasecore refuses is reported with the
// provider's attribute name, never leasecore's Go name.
func TestErrorTextNamesAttributes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		attr string
		err  error
	}{
		{"name", (&leasecore.TaskDecl{Name: "a b", TTL: time.Minute}).Validate()},
		{"ttl", (&leasecore.TaskDecl{Name: "t"}).Validate()},
		{"max_ttl", (&leasecore.TaskDecl{Name: "t", TTL: time.Minute, MaxTTL: time.Millisecond}).Validate()},
		{"description", (&leasecore.TaskDecl{Name: "t", TTL: time.Minute, Description: "a\x00"}).Validate()},
		{"retention_policy", (&leasecore.TaskDecl{Name: "t", TTL: time.Minute, RetentionPolicy: "a b"}).Validate()},
		{"name", (&leasecore.RetentionPolicy{Name: ""}).Validate()},
		{"keep_for", (&leasecore.RetentionPolicy{Name: "p", KeepFor: -time.Second}).Validate()},
		{"keep_last", (&leasecore.RetentionPolicy{Name: "p", KeepLast: -1}).Validate()},
		{"ttl", (&leasecore.TaskDecl{Name: "t", TTL: time.Minute, TTLSpelling: "61s"}).Validate()},
		{"max_ttl", (&leasecore.TaskDecl{Name: "t", TTL: time.Minute, MaxTTL: time.Hour, MaxTTLSpelling: "59m"}).Validate()},
		{"keep_for", (&leasecore.RetentionPolicy{Name: "p", KeepFor: time.Hour, KeepForSpelling: "59m"}).Validate()},
		{"task", leasecore.ValidateTask("")},
	} {
		if c.err == nil {
			t.Errorf("%s: leasecore accepted the value", c.attr)
			continue
		}
		if got := errorText(c.err); !strings.HasPrefix(got, "invalid "+c.attr+": ") {
			t.Errorf("errorText(%v) = %q, want it to name the attribute %s", c.err, got, c.attr)
		}
	}
}
