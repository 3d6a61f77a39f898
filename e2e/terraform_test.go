package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The provider as docs/provider.md installs it: `make mirror` lays it out as a
// filesystem mirror, once for the package.
var mirror = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "leasehold-e2e-mirror-")
	if err != nil {
		return "", err
	}
	out, err := exec.Command("make", "-C", "..", "mirror", "BIN="+dir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("make mirror: %v\n%s", err, out)
	}
	return filepath.Join(dir, "mirror"), nil
})

// terraformBin finds terraform: outside CI a test without it skips, saying
// what to install; with CI set it fails.
func terraformBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" {
		return p
	}
	p, err := exec.LookPath("terraform")
	if err != nil {
		missingTool(t, "terraform not found on PATH, and CI never skips: install the Terraform CLI", "terraform not found on PATH: install the Terraform CLI (e.g. /usr/local/bin/terraform) to run this test")
	}
	return p
}

// workspace is one Terraform working directory using the mirrored provider
// on one store.
type workspace struct {
	t     *testing.T
	bin   string
	dir   string
	env   []string
	store string
}

func newWorkspace(t *testing.T, store string) *workspace {
	t.Helper()
	mirrorDir, err := mirror()
	if err != nil {
		t.Fatal(err)
	}
	return newMirrorWorkspace(t, mirrorDir, store)
}

// newMirrorWorkspace is a Terraform working directory whose CLI
// configuration is docs/provider.md's provider_installation block with
// mirrorDir as the filesystem mirror, on store.
func newMirrorWorkspace(t *testing.T, mirrorDir, store string) *workspace {
	t.Helper()
	bin := terraformBin(t)
	dir := t.TempDir()
	rc := strings.Replace(providerInstallation(t), `"/path/to/leasehold/bin/mirror"`, strconv.Quote(mirrorDir), 1)
	if err := os.WriteFile(filepath.Join(dir, "terraformrc"), []byte(rc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(cleanEnv(),
		"TF_CLI_CONFIG_FILE="+filepath.Join(dir, "terraformrc"),
		"CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", "TF_INPUT=0",
		"LEASEHOLD_STORE="+store) // the provider reads the store from here
	return &workspace{t: t, bin: bin, dir: dir, env: env, store: store}
}

// providerInstallation is the provider_installation block docs/provider.md
// tells a user to put in Terraform's CLI configuration.
func providerInstallation(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/provider.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(doc), "```hcl\n")[1:] {
		if block, _, _ = strings.Cut(block, "```"); strings.HasPrefix(block, "provider_installation {") {
			if !strings.Contains(block, `"/path/to/leasehold/bin/mirror"`) {
				t.Fatalf("docs/provider.md's provider_installation block names no /path/to/leasehold/bin/mirror:\n%s", block)
			}
			return block
		}
	}
	t.Fatal("docs/provider.md has no ```hcl block starting provider_installation {")
	return ""
}

// declare writes main.tf: a retention policy and the task nightly-report
// with the given ttl (max_ttl 2m); with no ttl, no task at all.
func (w *workspace) declare(ttl string) {
	w.t.Helper()
	cfg := `terraform {
  required_providers {
    leasehold = { source = "leasehold/leasehold" }
  }
}

provider "leasehold" {}

resource "leasehold_retention_policy" "short" {
  name      = "short"
  keep_for  = "24h"
  keep_last = 10
}
`
	if ttl != "" {
		cfg += fmt.Sprintf(`
resource "leasehold_task" "report" {
  name             = "nightly-report"
  description      = "the nightly report, one replica at a time"
  ttl              = %q
  max_ttl          = "2m"
  retention_policy = leasehold_retention_policy.short.name
}
`, ttl)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(cfg), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// run runs terraform with args and returns its exit code; any exit code
// not in ok fails the test with terraform's output.
func (w *workspace) run(ok []int, args ...string) int {
	w.t.Helper()
	cmd := exec.Command(w.bin, append(args, "-no-color")...)
	cmd.Dir, cmd.Env = w.dir, w.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		w.t.Fatalf("terraform %s: %v", strings.Join(args, " "), err)
	}
	for _, c := range ok {
		if c == code {
			return code
		}
	}
	w.t.Fatalf("terraform %s exited %d:\n%s", strings.Join(args, " "), code, out.String())
	return code
}

// Terraform declares a task while a sidecar in --require-declared mode
// runs; the sidecar honours the declaration, a change to it and its
// removal, each within the declarations' staleness bound and without a
// restart. The provider is the one `make mirror` builds, installed by the
// provider_installation block of docs/provider.md.
func TestTerraformDeclaresSidecarHonours(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			url := kind.url(t)
			w := newWorkspace(t, url)
			s := startSidecar(t, url, "--require-declared")
			s.waitReady()
			if r := s.call("POST", "/v1/leases/nightly-report/claim", map[string]any{"owner": "e2e"}); r.Status != 404 {
				t.Fatalf("claim before the declaration: %d %s, want 404 (undeclared)", r.Status, r.Raw)
			}

			w.declare("45s")
			w.run([]int{0}, "init", "-input=false")
			w.run([]int{0}, "apply", "-auto-approve", "-input=false")
			r := claimUntil(t, s, "nightly-report", func(r response) bool { return r.Status != 404 })
			if r.Status != 200 || r.lease(t)["ttl_ms"] != float64(45000) {
				t.Fatalf("claim after terraform apply: %d %s, want 200 with the declared ttl 45000", r.Status, r.Raw)
			}
			if r := s.call("POST", "/v1/leases/nightly-report/claim", map[string]any{"owner": "e2e", "ttl_ms": 180000}); r.Status != 422 || !strings.Contains(r.Raw, "ttl_ms") {
				t.Fatalf("claim above the declared max_ttl (2m): %d %s, want 422 naming ttl_ms", r.Status, r.Raw)
			}
			if task := s.call("GET", "/v1/tasks/nightly-report", nil); task.Status != 200 || task.Body["retention_policy"] != "short" {
				t.Fatalf("GET /v1/tasks/nightly-report: %d %s, want the declaration under policy short", task.Status, task.Raw)
			}
			if code := w.run([]int{0, 2}, "plan", "-detailed-exitcode", "-input=false"); code != 0 {
				t.Fatal("the plan after apply is not empty")
			}

			w.declare("50s") // an update in place
			w.run([]int{0}, "apply", "-auto-approve", "-input=false")
			r = claimUntil(t, s, "nightly-report", func(r response) bool { return r.Status == 200 && r.lease(t)["ttl_ms"] == float64(50000) })
			if r.Status != 200 || r.lease(t)["ttl_ms"] != float64(50000) {
				t.Fatalf("claim after changing the ttl to 50s: %d %s, want 200 with ttl 50000", r.Status, r.Raw)
			}

			w.declare("") // the task removed from the configuration
			w.run([]int{0}, "apply", "-auto-approve", "-input=false")
			if r := claimUntil(t, s, "nightly-report", func(r response) bool { return r.Status == 404 }); r.Status != 404 || !strings.Contains(r.Raw, "declared") {
				t.Fatalf("claim after terraform removed the task: %d %s, want 404 (undeclared)", r.Status, r.Raw)
			}
			w.run([]int{0}, "destroy", "-auto-approve", "-input=false")
		})
	}
}
