package opcli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar"
	"github.com/leasehold/leasehold/sidecar/api"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// catalogTarget is a way to reach a fresh store for the catalog verbs, with
// a Service of its own on the same store: Terraform's, declaring from
// another process.
type catalogTarget struct {
	name string
	open func(t *testing.T) (conn []string, tf *leasecore.Service)
}

var catalogTargets = []catalogTarget{
	{"sidecar/sqlite", func(t *testing.T) ([]string, *leasecore.Service) {
		url := testsidecar.SQLiteURL(t)
		hs := sidecarOn(t, testsidecar.OpenStore(t, url), "", false)
		return []string{"--addr", hs.URL}, leasecore.New(testsidecar.OpenStore(t, url))
	}},
	{"store/sqlite", func(t *testing.T) ([]string, *leasecore.Service) {
		url := migrated(t, testsidecar.SQLiteURL(t))
		return []string{"--store", url}, leasecore.New(testsidecar.OpenStore(t, url))
	}},
	{"sidecar/postgres", func(t *testing.T) ([]string, *leasecore.Service) {
		url := pgtest.NewDatabase(t)
		hs := sidecarOn(t, testsidecar.OpenStore(t, url), "", false)
		return []string{"--addr", hs.URL}, leasecore.New(testsidecar.OpenStore(t, url))
	}},
	{"store/postgres", func(t *testing.T) ([]string, *leasecore.Service) {
		url := migrated(t, pgtest.NewDatabase(t))
		return []string{"--store", url}, leasecore.New(testsidecar.OpenStore(t, url))
	}},
}

func eachCatalogTarget(t *testing.T, f func(t *testing.T, conn []string, tf *leasecore.Service)) {
	t.Helper()
	for _, tg := range catalogTargets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			conn, tf := tg.open(t)
			f(t, conn, tf)
		})
	}
}

// run is leasehold GROUP ARGS… CONN.
func run(t *testing.T, conn []string, group string, args ...string) result {
	t.Helper()
	return leasehold(t, nil, group, with(conn, args...)...)
}

// Each verb of tasks and policies, on every way to reach a store: declare
// creates then replaces (the whole declaration), show and list print it
// with who manages it, --json prints the API's shapes, remove removes it
// and then finds nothing (1).
func TestCatalogVerbs(t *testing.T) {
	t.Parallel()
	eachCatalogTarget(t, func(t *testing.T, conn []string, tf *leasecore.Service) {
		run(t, conn, "policies", "declare", "weekly", "--keep-for", "168h", "--keep-last", "100").
			expect(t, 0, "declared retention policy weekly\n", "keep for    168h\n", "keep last   100\n", "managed by  operator\n")
		run(t, conn, "policies", "declare", "weekly", "--keep-last", "5").
			expect(t, 0, "updated retention policy weekly\n", "keep for    no age limit\n", "keep last   5\n")
		p := decode[api.RetentionPolicy](t, run(t, conn, "policies", "show", "weekly", "--json"))
		if p.Name != "weekly" || p.KeepForMs != 0 || p.KeepLast != 5 || p.ManagedBy != api.Operator {
			t.Errorf("policies show --json: %+v", p)
		}
		run(t, conn, "policies", "list").expect(t, 0,
			"NAME     KEEP FOR      KEEP LAST  MANAGED BY\n",
			"default  720h          1000       operator\n",
			"weekly   no age limit  5          operator\n")

		run(t, conn, "tasks", "list").expect(t, 0, "no declared tasks\n")
		run(t, conn, "tasks", "declare", "billing/nightly", "--ttl", "10m", "--max-ttl", "1h", "--policy", "weekly", "--description", "nightly report").
			expect(t, 0, "declared task billing/nightly\n", "ttl          10m\n", "max ttl      1h\n", "policy       weekly\n", "managed by   operator\n", "description  nightly report\n")
		got, err := tf.GetTask(t.Context(), "billing/nightly")
		if err != nil || got == nil || got.TTL != 10*time.Minute || got.MaxTTL != time.Hour || got.ManagedBy != leasecore.ManagedByOperator {
			t.Fatalf("the store has %+v (%v)", got, err)
		}
		run(t, conn, "tasks", "list").expect(t, 0,
			"NAME             TTL  MAX TTL  POLICY  MANAGED BY  DESCRIPTION\n",
			"billing/nightly  10m  1h       weekly  operator    nightly report\n")
		// A declare states the whole declaration: what it leaves out is reset.
		run(t, conn, "tasks", "declare", "billing/nightly", "--ttl", "90s").
			expect(t, 0, "updated task billing/nightly\n", "ttl          1m30s\n", "max ttl      -\n", "policy       default\n", "description  -\n")
		d := decode[api.TaskDeclaration](t, run(t, conn, "tasks", "show", "billing/nightly", "--json"))
		if d.Name != "billing/nightly" || d.TtlMs != 90000 || d.MaxTtlMs != nil || d.RetentionPolicy != "default" || d.ManagedBy != api.Operator {
			t.Errorf("tasks show --json: %+v", d)
		}
		l := decode[api.TaskList](t, run(t, conn, "tasks", "list", "--json"))
		if len(l.Tasks) != 1 || l.Tasks[0].Name != "billing/nightly" {
			t.Errorf("tasks list --json: %+v", l)
		}

		run(t, conn, "tasks", "remove", "billing/nightly").expect(t, 0, "removed task billing/nightly\n")
		r := run(t, conn, "tasks", "remove", "billing/nightly")
		r.expect(t, exitcode.Failure)
		if !strings.Contains(r.stderr, `task "billing/nightly" is not declared`) {
			t.Errorf("stderr: %q", r.stderr)
		}
		run(t, conn, "tasks", "show", "billing/nightly").expect(t, exitcode.Failure)
		if r := decode[struct{ Removed bool }](t, run(t, conn, "policies", "remove", "weekly", "--json")); !r.Removed {
			t.Errorf("policies remove --json: %+v", r)
		}
		run(t, conn, "policies", "show", "weekly").expect(t, exitcode.Failure)
		// The default policy stays: in use by every undeclared task.
		r = run(t, conn, "policies", "remove", "default")
		r.expect(t, exitcode.Failure)
		if !strings.Contains(r.stderr, "cannot be deleted") {
			t.Errorf("stderr: %q", r.stderr)
		}
	})
}

// What Terraform declared is refused to the operator (77), naming the way
// out, and nothing is written; --take-over makes it the operator's.
func TestCatalogManagedByTerraform(t *testing.T) {
	t.Parallel()
	eachCatalogTarget(t, func(t *testing.T, conn []string, tf *leasecore.Service) {
		asTF := leasecore.Writer{By: leasecore.ManagedByTerraform}
		if _, err := tf.CreatePolicy(t.Context(), leasecore.RetentionPolicy{Name: "audit", KeepLast: 10}, asTF); err != nil {
			t.Fatal(err)
		}
		before, err := tf.CreateTask(t.Context(), leasecore.TaskDecl{Name: "nightly", TTL: time.Minute, RetentionPolicy: "audit"}, asTF)
		if err != nil {
			t.Fatal(err)
		}
		run(t, conn, "tasks", "show", "nightly").expect(t, 0, "managed by   terraform\n")
		for _, args := range [][]string{
			{"tasks", "declare", "nightly", "--ttl", "5m"},
			{"tasks", "remove", "nightly"},
			{"policies", "declare", "audit", "--keep-last", "1"},
			{"policies", "remove", "audit"},
		} {
			r := run(t, conn, args[0], args[1:]...)
			r.expect(t, exitcode.NoPerm)
			if !strings.Contains(r.stderr, "is managed by Terraform: change it in the configuration, or remove it from the Terraform state first (terraform state rm) and repeat with --take-over") {
				t.Errorf("%v: stderr %q", args, r.stderr)
			}
		}
		after, err := tf.GetTask(t.Context(), "nightly")
		if err != nil || after == nil || after.TTL != time.Minute || !after.UpdatedAt.Equal(before.UpdatedAt) || after.ManagedBy != leasecore.ManagedByTerraform {
			t.Errorf("after refused writes: %+v (%v), want %+v", after, err, before)
		}
		run(t, conn, "tasks", "declare", "nightly", "--ttl", "5m", "--policy", "audit", "--take-over").
			expect(t, 0, "updated task nightly\n", "managed by   operator\n")
		run(t, conn, "tasks", "remove", "nightly").expect(t, 0, "removed task nightly\n")
		run(t, conn, "policies", "remove", "audit", "--take-over").expect(t, 0)
	})
}

// Bad input: 64, naming the flag and the rule, nothing written.
func TestCatalogBadInput(t *testing.T) {
	t.Parallel()
	eachCatalogTarget(t, func(t *testing.T, conn []string, tf *leasecore.Service) {
		for _, tc := range []struct {
			args   []string
			stderr string
		}{
			{[]string{"tasks", "declare", "t"}, "--ttl is required"},
			{[]string{"tasks", "declare", "t", "--ttl", "50ms"}, "--ttl 50ms: must be between 100ms and 24h"},
			{[]string{"tasks", "declare", "t", "--ttl", "10m", "--max-ttl", "1m"}, "--ttl: must be at most max_ttl"},
			{[]string{"tasks", "declare", "t", "--ttl", "1m", "--max-ttl", "0s"}, "--max-ttl 0s"},
			{[]string{"tasks", "declare", "t", "--ttl", "1m", "--policy", "a b"}, "--policy: must be 1 to 64 characters"},
			{[]string{"tasks", "declare", "t", "--ttl", "1m", "--description", strings.Repeat("x", 1025)}, "--description: must be valid UTF-8 without NUL, at most 1024 bytes"},
			{[]string{"tasks", "declare", "t", "--ttl", "1m", "--policy", "nope"}, `--policy`},
			{[]string{"tasks", "declare", "a//b", "--ttl", "1m"}, `NAME "a//b"`},
			{[]string{"tasks", "show"}, "needs one NAME"},
			{[]string{"tasks", "frobnicate"}, `unknown command "tasks frobnicate"`},
			{[]string{"policies", "declare", "p", "--keep-for", "1500ms"}, "--keep-for 1.5s: must be whole seconds"},
			{[]string{"policies", "declare", "p", "--keep-last", "-1"}, "--keep-last: must be between 0"},
			{[]string{"policies", "declare", "a b"}, `NAME "a b"`},
		} {
			r := run(t, conn, tc.args[0], tc.args[1:]...)
			if r.code != exitcode.Usage || !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("%v: exit %d, stderr %q; want 64 and %q", tc.args, r.code, r.stderr, tc.stderr)
			}
		}
		if ds, _, err := tf.ListTasks(t.Context(), leasecore.ListParams{}); err != nil || len(ds) != 0 {
			t.Errorf("refused declares wrote %+v (%v)", ds, err)
		}
		if ps, err := tf.ListPolicies(t.Context()); err != nil || len(ps) != 1 {
			t.Errorf("refused declares left policies %+v (%v), want only the default", ps, err)
		}
	})
}

// A sidecar with scoped credentials: declarations need admin on the task,
// policies admin on every task; a credential without it gets 77 and
// nothing is written.
func TestCatalogNeedsAdmin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	entry := func(name, token, prefixes, right string) string {
		return fmt.Sprintf(`{"name": %q, "token_sha256": %q, "prefixes": %s, "rights": [%q]}`, name, auth.TokenHash([]byte(token)), prefixes, right)
	}
	creds := filepath.Join(dir, "credentials.json")
	file := `{"credentials": [` + entry("ci", "ci-token", `["*"]`, "hold") + "," +
		entry("billing-admin", "billing-token", `["billing/"]`, "admin") + "," + entry("ops", "ops-token", `["*"]`, "admin") + `]}`
	if err := os.WriteFile(creds, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	book, err := auth.OpenCredentialsFile(creds, auth.BookOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := testsidecar.SQLiteURL(t)
	hs := testsidecar.Serve(t, sidecar.Options{Store: testsidecar.OpenStore(t, url), Credentials: book})
	tokenFile := func(token string) string {
		p := filepath.Join(dir, token)
		if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ci := []string{"--addr", hs.URL, "--token-file", tokenFile("ci-token")}
	billing := []string{"--addr", hs.URL, "--token-file", tokenFile("billing-token")}
	ops := []string{"--addr", hs.URL, "--token-file", tokenFile("ops-token")}

	for _, args := range [][]string{
		{"tasks", "declare", "billing/nightly", "--ttl", "1m"},
		{"policies", "declare", "weekly", "--keep-last", "1"},
	} {
		r := run(t, ci, args[0], args[1:]...)
		r.expect(t, exitcode.NoPerm)
		if !strings.Contains(r.stderr, `credential "ci"`) || strings.Contains(r.stderr, "ci-token") {
			t.Errorf("%v: stderr %q should name the credential, not its token", args, r.stderr)
		}
	}
	// Admin on billing/ declares billing/ tasks, but no policy, which would
	// apply to every task.
	run(t, billing, "tasks", "declare", "billing/nightly", "--ttl", "1m").expect(t, 0, "declared task billing/nightly\n")
	run(t, billing, "tasks", "declare", "payroll/run", "--ttl", "1m").expect(t, exitcode.NoPerm)
	r := run(t, billing, "policies", "declare", "weekly", "--keep-last", "1")
	r.expect(t, exitcode.NoPerm)
	if !strings.Contains(r.stderr, "on every task") {
		t.Errorf("stderr %q should say why a policy needs admin on every task", r.stderr)
	}
	svc := leasecore.New(testsidecar.OpenStore(t, url))
	if ds, _, err := svc.ListTasks(t.Context(), leasecore.ListParams{}); err != nil || len(ds) != 1 || ds[0].Name != "billing/nightly" {
		t.Errorf("the store has tasks %+v (%v), want billing/nightly only", ds, err)
	}
	if p, err := svc.GetPolicy(t.Context(), "weekly"); err != nil || p != nil {
		t.Errorf("a refused policy declare wrote %+v (%v)", p, err)
	}
	run(t, ops, "policies", "declare", "weekly", "--keep-last", "1").expect(t, 0, "declared retention policy weekly\n")
	run(t, ci, "tasks", "list").expect(t, 0, "billing/nightly")
}
