package e2e

import (
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/leasehold/leasehold/deploy"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// composeFile is the repository's compose file, relative to this package.
const composeFile = "../docker-compose.yml"

// The services of docker-compose.yml this test runs.
const (
	composeMigrate  = "migrate"
	composeSidecarA = "leasehold-a"
	composeSidecarB = "leasehold-b"
)

// The compose fleet's own commands, run as processes of the leasehold binary
// with only what Docker provides replaced: the postgres service by the test's
// PostgreSQL, the container's interfaces by loopback, the mounted secret by a
// file holding the same token. migrate succeeds; both sidecars become ready,
// share the leases, and refuse a caller without the token.
func TestComposeFleetRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	p := loadComposeProject(t)
	dir := t.TempDir()

	out, err := runLeasehold(dockerless(t, p, composeMigrate, db, dir, "migrate")...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", composeMigrate, err, out)
	}

	// startSidecar puts --listen 127.0.0.1:0 --store db first; the service's
	// own (rewritten) flags follow and, being later, are the ones that count.
	var fleet []*sidecar
	for _, name := range []string{composeSidecarA, composeSidecarB} {
		args := dockerless(t, p, name, db, dir, "serve")
		fleet = append(fleet, startSidecar(t, db, args[1:]...))
	}
	a, b := fleet[0], fleet[1]
	a.waitReady()
	b.waitReady()
	if !strings.Contains(a.logs.String(), `"msg":"leasehold listening"`) {
		t.Errorf("%s does not log JSON (--log-format json):\n%s", composeSidecarA, a.logs.String())
	}

	token := readSecret(t, p, "leasehold_token")
	r := a.callWithToken(token, "POST", "/v1/leases/compose-job/claim", map[string]any{"owner": "via-a", "ttl_ms": 60000})
	if r.Status != http.StatusOK || r.lease(t)["owner"] != "via-a" {
		t.Fatalf("claim through %s with the token: %d %s, want 200", composeSidecarA, r.Status, r.Raw)
	}
	r = b.callWithToken(token, "POST", "/v1/leases/compose-job/claim", map[string]any{"owner": "via-b"})
	holder, _ := r.Body["holder"].(map[string]any)
	if r.Status != http.StatusConflict || r.Body["reason"] != "held" || holder["owner"] != "via-a" {
		t.Fatalf("claim through %s of the task held through %s: %d %s, want 409 held by via-a", composeSidecarB, composeSidecarA, r.Status, r.Raw)
	}
	for _, s := range fleet {
		if r := s.call("POST", "/v1/leases/compose-job/claim", map[string]any{"owner": "anonymous"}); r.Status != http.StatusUnauthorized {
			t.Errorf("claim through %s without the token: %d %s, want 401", s.base, r.Status, r.Raw)
		}
		if r := s.callWithToken("not-"+token, "GET", "/v1/leases/compose-job", nil); r.Status != http.StatusUnauthorized {
			t.Errorf("GET through %s with a wrong token: %d %s, want 401", s.base, r.Status, r.Raw)
		}
	}

	// `docker compose down` stops the sidecars with SIGTERM.
	for _, s := range fleet {
		if code := s.stop(syscall.SIGTERM); code != 0 {
			t.Errorf("sidecar %s: exit code %d after SIGTERM, want 0\n%s", s.base, code, s.logs.String())
		}
	}
}

// loadComposeProject loads docker-compose.yml as `docker compose` does, with
// an empty environment so that the developer's shell changes nothing.
func loadComposeProject(t *testing.T) *types.Project {
	t.Helper()
	p, err := deploy.Load(t.Context(), "..")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// readSecret returns the content of a compose secret's file, trimmed as the
// sidecar trims its token file.
func readSecret(t *testing.T, p *types.Project, name string) string {
	t.Helper()
	sec, ok := p.Secrets[name]
	if !ok || sec.File == "" {
		t.Fatalf("%s has no file secret %q", composeFile, name)
	}
	b, err := os.ReadFile(sec.File)
	if err != nil {
		t.Fatalf("secret %s: %v", name, err)
	}
	return strings.TrimSpace(string(b))
}

// dockerless returns the command of the compose service name, which must run
// `leasehold verb`, with what Docker provides replaced: --store's host,
// credentials and database by those of db (its parameters kept, db's
// winning), --listen by 127.0.0.1:0, and a --token-file naming a secret the
// service mounts by a copy of that secret's file under dir. Every one of
// those flags the command should have must be there; the rest pass as they
// are.
func dockerless(t *testing.T, p *types.Project, name, db, dir, verb string) []string {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	if len(s.Command) == 0 || s.Command[0] != verb {
		t.Fatalf("%s: command %q, want leasehold %s", name, s.Command, verb)
	}
	mounts := map[string]string{} // path in the container → secret
	for _, ref := range s.Secrets {
		target := ref.Target
		if target == "" {
			target = ref.Source
		}
		if !path.IsAbs(target) {
			target = "/run/secrets/" + target
		}
		mounts[target] = ref.Source
	}

	rewrite := map[string]func(string) string{
		"store": func(v string) string { return testStore(t, name, v, db) },
	}
	if verb == "serve" {
		rewrite["listen"] = func(string) string { return "127.0.0.1:0" }
		rewrite["token-file"] = func(v string) string {
			secret, ok := mounts[v]
			if !ok {
				t.Fatalf("%s: --token-file %s is no secret the service mounts", name, v)
			}
			f := filepath.Join(dir, name+"-"+secret)
			if err := os.WriteFile(f, []byte(readSecret(t, p, secret)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return f
		}
	}

	args := []string{verb}
	done := map[string]bool{}
	rest := s.Command[1:]
	for i := 0; i < len(rest); i++ {
		arg := rest[i]
		flagName, value, inline := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		fn, ok := rewrite[flagName]
		if !strings.HasPrefix(arg, "-") || !ok {
			args = append(args, arg)
			continue
		}
		if !inline {
			if i+1 >= len(rest) {
				t.Fatalf("%s: %s has no value", name, arg)
			}
			i++
			value = rest[i]
		}
		args = append(args, "--"+flagName, fn(value))
		done[flagName] = true
	}
	for flagName := range rewrite {
		if !done[flagName] {
			t.Fatalf("%s: command %q has no --%s", name, s.Command, flagName)
		}
	}
	t.Logf("%s without Docker: leasehold %s", name, strings.Join(args, " "))
	return args
}

// testStore moves the compose store URL to the test's database db.
func testStore(t *testing.T, service, store, db string) string {
	t.Helper()
	u, err := url.Parse(store)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s: --store %q is not a postgres:// URL", service, store)
	}
	d, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User, u.Host, u.Path, u.RawPath = d.User, d.Host, d.Path, d.RawPath
	q := u.Query()
	for k, v := range d.Query() {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	return u.String()
}
