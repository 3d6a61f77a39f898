package opcli_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
)

// A store URL that does not parse (a raw '@' in the password) is a usage
// error (64) naming --store and the rule, never repeating the password;
// nothing is opened.
func TestStoreURLIsUsage(t *testing.T) {
	t.Parallel()
	for _, verb := range [][]string{{"list"}, {"get", "t"}, {"claim", "t"}, {"release", "t", "--force"}, {"status"}} {
		r := leasehold(t, nil, verb[0], append(verb[1:], "--store", "postgres://u:p@ss@127.0.0.1:5432/x")...)
		r.expect(t, exitcode.Usage)
		if !strings.Contains(r.stderr, "--store: postgres store URL: a raw '@'") || strings.Contains(r.stderr, "p@ss") {
			t.Errorf("%s: stderr %q, want --store's rule without the password", verb[0], r.stderr)
		}
	}
}

// A store that cannot be reached is said once: "leasehold list: lease
// store unavailable: …", not "leasehold list: list: …".
func TestStoreUnavailableSaysItOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, verb := range []string{"list", "history"} {
		args := []string{"--store", "postgres://u:pw@" + closed + "/x"}
		if verb == "history" {
			args = append(args, "t")
		}
		r := leasehold(t, nil, verb, args...)
		r.expect(t, exitcode.Unavailable)
		if !strings.HasPrefix(r.stderr, "leasehold "+verb+": lease store unavailable: ") || strings.Contains(r.stderr, verb+": "+verb+":") {
			t.Errorf("%s: stderr %q, want the failure said once", verb, r.stderr)
		}
	}
}

// A 401 says what to do about --token-file: give one, or check the one
// given.
func TestUnauthorizedHint(t *testing.T) {
	t.Parallel()
	hs := sidecarOn(t, testsidecar.OpenStore(t, testsidecar.SQLiteURL(t)), "s3cret", false)
	r := leasehold(t, nil, "list", "--addr", hs.URL)
	r.expect(t, exitcode.NoPerm)
	if !strings.Contains(r.stderr, "401 Unauthorized") || !strings.Contains(r.stderr, "give the file that holds the token with --token-file") {
		t.Errorf("list without a token: stderr %q", r.stderr)
	}
	wrong := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(wrong, []byte("not-it\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = leasehold(t, nil, "list", "--addr", hs.URL, "--token-file", wrong)
	r.expect(t, exitcode.NoPerm)
	if !strings.Contains(r.stderr, "does not know the token in --token-file") || strings.Contains(r.stderr, "not-it") {
		t.Errorf("list with a wrong token: stderr %q", r.stderr)
	}
}
