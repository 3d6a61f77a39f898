package leasecore_test

import (
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/leasehold/leasehold/leasecore"
)

func TestNewOwner(t *testing.T) {
	t.Parallel()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(fmt.Sprintf(`^%s#%d#[0-9a-f]{12}$`, regexp.QuoteMeta(host), os.Getpid()))
	seen := make(map[string]bool)
	for range 100 {
		o := leasecore.NewOwner()
		if !want.MatchString(o) {
			t.Fatalf("NewOwner() = %q, want a match of %s", o, want)
		}
		if err := leasecore.ValidateOwner(o); err != nil {
			t.Fatalf("NewOwner() = %q, which ValidateOwner refuses: %v", o, err)
		}
		if seen[o] {
			t.Fatalf("NewOwner() returned %q twice", o)
		}
		seen[o] = true
	}
}
