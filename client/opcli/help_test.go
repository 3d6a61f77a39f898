package opcli_test

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/exitcode"
)

// -h prints each verb's help once, on stdout; a flag's error prints it
// once, on stderr.
func TestHelpOnce(t *testing.T) {
	t.Parallel()
	for _, verb := range []string{"status", "get", "list", "history", "claim", "release", "watch"} {
		r := leasehold(t, nil, verb, "-h")
		r.expect(t, exitcode.OK, "Usage: leasehold "+verb)
		if strings.Count(r.stdout, "Usage:") != 1 || r.stderr != "" {
			t.Errorf("%s -h: stdout %q, stderr %q; want the help once, on stdout", verb, r.stdout, r.stderr)
		}
		r = leasehold(t, nil, verb, "--bogus")
		r.expect(t, exitcode.Usage)
		if strings.Count(r.stderr, "Usage:") != 1 || r.stdout != "" || !strings.Contains(r.stderr, "-bogus") {
			t.Errorf("%s --bogus: stdout %q, stderr %q; want the error and the help once, on stderr", verb, r.stdout, r.stderr)
		}
	}
}
