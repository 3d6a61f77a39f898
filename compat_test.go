package leasehold_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAPIBreakingChangeCheck shows that scripts/check-api.sh, which CI runs
// against the latest release's openapi.yaml, passes an unchanged or purely
// additive document and fails each kind of breaking change the promise in
// docs/compatibility.md rules out.
func TestAPIBreakingChangeCheck(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("builds oasdiff; -short skips it (CI never skips this)")
	}
	t.Parallel()
	spec, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(spec)
	replace := func(t *testing.T, old, new string) string {
		t.Helper()
		if strings.Count(text, old) != 1 {
			t.Fatalf("openapi.yaml holds %q %d times; the mutant needs it once", old, strings.Count(text, old))
		}
		return strings.Replace(text, old, new, 1)
	}
	claim := "      additionalProperties: false\n      required: [owner]\n      properties:\n        owner:\n          $ref: \"#/components/schemas/Owner\"\n        ttl_ms:\n          $ref: \"#/components/schemas/TTLMillis\"\n        note:\n"
	for _, tc := range []struct {
		name     string
		revision string
		breaks   bool
	}{
		{"unchanged", text, false},
		{"a new optional request field", replace(t, claim, strings.Replace(claim, "        note:\n", "        labels:\n          type: string\n        note:\n", 1)), false},
		{"a request field made required", replace(t, claim, strings.Replace(claim, "required: [owner]", "required: [owner, note]", 1)), true},
		{"a path removed", replace(t, "\n  /v1/status:\n", "\n  /v1/state:\n"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			revision := filepath.Join(t.TempDir(), "openapi.yaml")
			if err := os.WriteFile(revision, []byte(tc.revision), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("scripts/check-api.sh", "openapi.yaml", revision).CombinedOutput()
			var exit *exec.ExitError
			switch {
			case err != nil && !errors.As(err, &exit):
				t.Fatalf("check-api.sh: %v\n%s", err, out)
			case tc.breaks && (err == nil || !strings.Contains(string(out), "error\t[")):
				t.Errorf("check-api.sh did not name a breaking change (%v):\n%s", err, out)
			case !tc.breaks && err != nil:
				t.Errorf("check-api.sh failed a compatible document: %v\n%s", err, out)
			}
		})
	}
}
