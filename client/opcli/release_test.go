package opcli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar"
	"github.com/leasehold/leasehold/sidecar/api"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// storeURLs are the two kinds of store a test runs on, each fresh and
// migrated.
var storeURLs = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return migrated(t, testsidecar.SQLiteURL(t)) }},
	{"postgres", func(t *testing.T) string { return migrated(t, pgtest.NewDatabase(t)) }},
}

// credentialSidecar starts a sidecar over the store at url whose
// credentials are name → right (each on every task), and returns its
// address and a token file per credential.
func credentialSidecar(t *testing.T, url string, rights map[string]string) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	var entries []string
	files := map[string]string{}
	for name, right := range rights {
		token := "tok-" + name + "-0123456789abcdef"
		entries = append(entries, fmt.Sprintf(`{"name": %q, "token_sha256": %q, "prefixes": ["*"], "rights": [%q]}`, name, auth.TokenHash([]byte(token)), right))
		files[name] = filepath.Join(dir, name+".token")
		if err := os.WriteFile(files[name], []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "credentials.json")
	if err := os.WriteFile(path, []byte(`{"credentials": [`+strings.Join(entries, ",")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	book, err := auth.OpenCredentialsFile(path, auth.BookOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hs := testsidecar.Serve(t, sidecar.Options{Store: testsidecar.OpenStore(t, url), Credentials: book})
	return hs.URL, files
}

// release --force ends whoever holds the task over a sidecar, for a
// credential with the admin right only: one with hold is refused (77) and
// nothing is written. The history records the end as an operator's, with
// the operator's credential; a second --force finds nothing live (70).
func TestForceReleaseSidecar(t *testing.T) {
	t.Parallel()
	for _, s := range storeURLs {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			addr, tokens := credentialSidecar(t, s.url(t), map[string]string{"worker": "hold", "ops": "admin"})
			as := func(cred, verb string, args ...string) result {
				return leasehold(t, nil, verb, append(args, "--addr", addr, "--token-file", tokens[cred])...)
			}
			as("worker", "claim", "demo", "--owner", "w1", "--ttl", "10m").expect(t, 0, "owner     w1\n")

			r := as("worker", "release", "demo", "--force")
			r.expect(t, exitcode.NoPerm)
			if r.stdout != "" || !strings.Contains(r.stderr, "403") || !strings.Contains(r.stderr, "worker") || !strings.Contains(r.stderr, "admin") {
				t.Errorf("a forced release by a holder: stdout %q, stderr %q; want a 403 naming the credential and the admin right", r.stdout, r.stderr)
			}
			as("ops", "get", "demo").expect(t, 0, "owner     w1\n")
			if h := decode[api.EventList](t, as("ops", "history", "demo", "--json")); len(h.Events) != 1 || h.Events[0].Kind != api.EventKindAcquired {
				t.Fatalf("history after a refused forced release: %+v, want the claim alone", h.Events)
			}

			as("ops", "release", "demo", "--force").expect(t, 0, "released demo: ended the lease of w1 (token 1)\n")
			as("ops", "get", "demo").expect(t, exitcode.Failure, "demo: no live lease\n")
			r = as("ops", "history", "demo")
			r.expect(t, 0)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(lines) != 3 || !strings.Contains(lines[1], "released") || !strings.Contains(lines[1], "w1") ||
				!strings.Contains(lines[1], "ops") || !strings.HasSuffix(lines[1], leasecore.RevokedDetail) {
				t.Errorf("history after a forced release:\n%s\nwant its newest event released, of w1, by ops, %q", r.stdout, leasecore.RevokedDetail)
			}

			as("ops", "release", "demo", "--force").expect(t, exitcode.Lost, "demo: not released: no live lease\n")
			as("worker", "claim", "demo", "--owner", "w2").expect(t, 0, "token     2\n")
			as("ops", "release", "demo", "--force", "--token", "1").expect(t, exitcode.Lost, "demo: not released: no live lease with token 1\n")
			r = as("ops", "release", "demo", "--force", "--token", "2", "--json")
			r.expect(t, 0)
			if res := decode[api.RevokeResult](t, r); !res.Released || res.Lease == nil || res.Lease.Owner != "w2" || res.Lease.Token != 2 {
				t.Errorf("release --force --json: %+v", res)
			}
		})
	}
}

// release --force on a store (--store) ends whoever holds the task; the
// history records it as an operator's, with no credential.
func TestForceReleaseStore(t *testing.T) {
	t.Parallel()
	for _, s := range storeURLs {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			url := s.url(t)
			run := func(verb string, args ...string) result {
				return leasehold(t, nil, verb, append(args, "--store", url)...)
			}
			run("claim", "demo", "--owner", "w1").expect(t, 0)
			run("release", "demo", "--force").expect(t, 0, "released demo: ended the lease of w1 (token 1)\n")
			run("get", "demo").expect(t, exitcode.Failure)
			h := decode[api.EventList](t, run("history", "demo", "--json"))
			if len(h.Events) != 2 || h.Events[0].Kind != api.EventKindReleased || h.Events[0].Owner != "w1" ||
				h.Events[0].Credential != "" || h.Events[0].Detail != leasecore.RevokedDetail {
				t.Errorf("history after a forced release on the store: %+v", h.Events)
			}
			run("release", "demo", "--force").expect(t, exitcode.Lost, "demo: not released: no live lease\n")
		})
	}
}

// release without --owner says how to find the owner, and what --force
// does; --force with --owner is a usage error. Neither asks anything.
func TestReleaseUsage(t *testing.T) {
	t.Parallel()
	unreachable := []string{"--addr", "http://127.0.0.1:1"}
	r := leasehold(t, nil, "release", append([]string{"demo"}, unreachable...)...)
	r.expect(t, exitcode.Usage)
	for _, want := range []string{"--owner is required", "`leasehold get demo` shows it", "--force to end whoever holds it (needs the admin right)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("release without --owner: stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	r = leasehold(t, nil, "release", append([]string{"demo", "--force", "--owner", "w1"}, unreachable...)...)
	r.expect(t, exitcode.Usage)
	if !strings.Contains(r.stderr, "--force and --owner are exclusive") {
		t.Errorf("release --force --owner: stderr %q", r.stderr)
	}
	r = leasehold(t, nil, "release", "-h")
	r.expect(t, 0, "-force", "needs the admin right")
}
