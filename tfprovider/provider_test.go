package tfprovider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// The acceptance tests run Terraform itself (the terraform binary, as a
// user would) against the provider served in this process, on a real
// store. They need no environment of their own: TestMain sets what
// terraform-plugin-testing reads, unless the caller set it.

// terraformMissing says why the acceptance tests cannot run; empty when
// they can.
var terraformMissing string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	// Terraform's working directories live inside the build directory
	// (git-ignored), not in a shared /tmp.
	dir, err := os.MkdirTemp(".", ".tfacc-")
	if err == nil {
		dir, err = filepath.Abs(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tfprovider tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := setupAcceptance(dir); err != nil {
		fmt.Fprintln(os.Stderr, "tfprovider tests:", err)
		return 1
	}
	return m.Run()
}

// setupAcceptance points terraform-plugin-testing at the local terraform
// binary, with a CLI configuration, a working directory and no calls home
// of its own. It never sets TF_ACC_TERRAFORM_VERSION, which would download
// Terraform.
func setupAcceptance(dir string) error {
	setDefault := func(key, value string) {
		if os.Getenv(key) == "" {
			os.Setenv(key, value)
		}
	}
	setDefault("TF_ACC", "1")
	setDefault("CHECKPOINT_DISABLE", "1")
	setDefault("TF_ACC_TEMP_DIR", dir)
	// An empty CLI configuration, so that a developer's (or a missing
	// one named by the environment) cannot change what Terraform does.
	rc := filepath.Join(dir, "terraformrc")
	if err := os.WriteFile(rc, nil, 0o600); err != nil {
		return err
	}
	os.Setenv("TF_CLI_CONFIG_FILE", rc)

	if os.Getenv("TF_ACC_TERRAFORM_PATH") == "" {
		bin, err := exec.LookPath("terraform")
		if err != nil {
			terraformMissing = "terraform not found on PATH: install the Terraform CLI (as /usr/local/bin/terraform) or set TF_ACC_TERRAFORM_PATH"
			return nil
		}
		os.Setenv("TF_ACC_TERRAFORM_PATH", bin)
	}
	return nil
}

// requireTerraform skips the test when there is no terraform binary, or
// fails it when CI is set: CI never skips.
func requireTerraform(t *testing.T) {
	t.Helper()
	if terraformMissing == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal(terraformMissing + " (CI is set, so this is a failure, not a skip)")
	}
	t.Skip(terraformMissing)
}

// testStore is a store of one test: its URL for the provider block, a
// Service of its own for setting up and checking from outside Terraform,
// and the stores the provider opened, closed when the test ends.
type testStore struct {
	kind string // sqlite or postgres
	url  string
	svc  *leasecore.Service

	mu     sync.Mutex
	opened map[string]leasecore.Store
}

// eachStore runs f as parallel subtests on SQLite and on PostgreSQL.
func eachStore(t *testing.T, f func(t *testing.T, ts *testStore)) {
	t.Helper()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			requireTerraform(t)
			f(t, newTestStore(t, kind))
		})
	}
}

func newTestStore(t *testing.T, kind string) *testStore {
	t.Helper()
	ts := &testStore{kind: kind, opened: map[string]leasecore.Store{}}
	switch kind {
	case "sqlite":
		ts.url = "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db")
	case "postgres":
		ts.url = pgtest.NewDatabase(t)
	default:
		t.Fatalf("unknown store kind %q", kind)
	}
	store, err := storeurl.Open(t.Context(), storeurl.MustParse(ts.url))
	if err != nil {
		t.Fatalf("open %s: %v", storeurl.MustParse(ts.url), err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate %s: %v", storeurl.MustParse(ts.url), err)
	}
	ts.svc = leasecore.New(store)
	t.Cleanup(func() {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		for _, s := range ts.opened {
			s.Close()
		}
	})
	return ts
}

// open is the provider's opener in tests: storeurl.Open, once per URL for
// the whole test, since Terraform runs the provider once per command and
// the framework gives a provider no hook to close its store.
func (ts *testStore) open(ctx context.Context, url storeurl.URL) (leasecore.Store, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if s, ok := ts.opened[url.Secret()]; ok {
		return s, nil
	}
	s, err := storeurl.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	ts.opened[url.Secret()] = s
	return s, nil
}

// factories serves the provider in this process, with env as its
// environment (nil: none).
func (ts *testStore) factories(env map[string]string) map[string]func() (tfprotov6.ProviderServer, error) {
	getenv := func(key string) string { return env[key] }
	return map[string]func() (tfprotov6.ProviderServer, error){
		"leasehold": providerserver.NewProtocol6WithError(newProvider("test", ts.open, getenv)()),
	}
}

// config is HCL with a provider block for the store in front.
func (ts *testStore) config(hcl string) string {
	return fmt.Sprintf("provider \"leasehold\" {\n  store = %q\n}\n\n%s", ts.url, hcl)
}

// checkDestroyed verifies, through the store, that nothing the state had
// is left: no task declared, no policy but the default.
func (ts *testStore) checkDestroyed(s *terraform.State) error {
	ctx := context.Background()
	for _, r := range s.RootModule().Resources {
		name := r.Primary.Attributes["name"]
		switch r.Type {
		case "leasehold_task":
			d, err := ts.svc.GetTask(ctx, name)
			if err != nil {
				return err
			}
			if d != nil {
				return fmt.Errorf("task %q still declared after destroy", name)
			}
		case "leasehold_role_scope":
			role := r.Primary.Attributes["role"]
			got, err := ts.svc.GetRoleScope(ctx, role)
			if err != nil {
				return err
			}
			if got != nil {
				return fmt.Errorf("role %q still has a scope after destroy", role)
			}
		case "leasehold_retention_policy":
			if name == leasecore.DefaultPolicy {
				continue
			}
			p, err := ts.svc.GetPolicy(ctx, name)
			if err != nil {
				return err
			}
			if p != nil {
				return fmt.Errorf("retention policy %q still exists after destroy", name)
			}
		}
	}
	return nil
}

// checkTask verifies the declaration the store has, through the Service.
func (ts *testStore) checkTask(want leasecore.TaskDecl) resource.TestCheckFunc {
	return func(*terraform.State) error {
		got, err := ts.svc.GetTask(context.Background(), want.Name)
		if err != nil {
			return err
		}
		if got == nil {
			return fmt.Errorf("task %q is not declared in the store", want.Name)
		}
		if got.TTL != want.TTL || got.MaxTTL != want.MaxTTL || got.MinHold != want.MinHold || got.Description != want.Description || got.RetentionPolicy != want.RetentionPolicy {
			return fmt.Errorf("store has task %+v, want %+v", *got, want)
		}
		if got.ManagedBy != leasecore.ManagedByTerraform {
			return fmt.Errorf("store has task %q managed by %q, want %q: the provider wrote it", want.Name, got.ManagedBy, leasecore.ManagedByTerraform)
		}
		return nil
	}
}

// takeOver is an operator outside Terraform who changes what Terraform
// manages anyway, as after a terraform state rm: how a test makes drift.
var takeOver = leasecore.Writer{By: leasecore.ManagedByOperator, TakeOver: true}

// checkNoTask verifies that the store declares no task of that name.
func (ts *testStore) checkNoTask(name string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		got, err := ts.svc.GetTask(context.Background(), name)
		if err != nil {
			return err
		}
		if got != nil {
			return fmt.Errorf("task %q is still declared in the store", name)
		}
		return nil
	}
}

// checkPolicy verifies the policy the store has, through the Service.
func (ts *testStore) checkPolicy(want leasecore.RetentionPolicy) resource.TestCheckFunc {
	return func(*terraform.State) error {
		got, err := ts.svc.GetPolicy(context.Background(), want.Name)
		if err != nil {
			return err
		}
		if got == nil {
			return fmt.Errorf("retention policy %q does not exist in the store", want.Name)
		}
		if got.KeepFor != want.KeepFor || got.KeepLast != want.KeepLast {
			return fmt.Errorf("store has policy %+v, want %+v", *got, want)
		}
		return nil
	}
}

// words matches the words of a message in Terraform's output, which wraps
// long lines: any run of spaces may have become a line break.
func words(msg string) *regexp.Regexp {
	return regexp.MustCompile(wordsPattern(msg))
}

// diagnostic matches an error diagnostic in Terraform's output: its
// summary, then (after the configuration it points at) its detail.
func diagnostic(summary, detail string) *regexp.Regexp {
	return regexp.MustCompile(`Error: ` + regexp.QuoteMeta(summary) + `\n(?s:.*?)` + wordsPattern(detail))
}

func wordsPattern(msg string) string {
	fields := strings.Fields(msg)
	for i, f := range fields {
		fields[i] = regexp.QuoteMeta(f)
	}
	return strings.Join(fields, `\s+`)
}
