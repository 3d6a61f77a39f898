package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/internal/harness/releasebuild"
)

// TestProviderUpgrade is a Terraform user's provider upgrade: a
// configuration of every resource type is applied with the latest
// release's provider (built from the commit RELEASES records for it), the
// configuration moves to this tree's provider (terraform init -upgrade),
// and the plan must show no change; an apply and a second plan then show
// that the upgraded state round-trips. Both providers come from one
// filesystem mirror, as docs/provider.md installs them.
func TestProviderUpgrade(t *testing.T) {
	t.Parallel()
	terraformBin(t) // skip (or fail under CI) before building anything
	latest := releasebuild.Latest(t)
	oldProvider := releasebuild.Build(t, latest, releasebuild.Provider)
	oldVersion := strings.TrimPrefix(latest.Version, "v")
	newVersion := nextPatch(t, oldVersion)

	dir := t.TempDir()
	newProvider := filepath.Join(dir, "terraform-provider-leasehold")
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+newVersion, "-o", newProvider, "github.com/leasehold/leasehold/cmd/terraform-provider-leasehold")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build this tree's provider: %v\n%s", err, out)
	}
	address, err := exec.Command(newProvider, "-address").Output()
	if err != nil {
		t.Fatal(err)
	}
	mirrorDir := filepath.Join(dir, "mirror")
	platform := runtime.GOOS + "_" + runtime.GOARCH
	for version, bin := range map[string]string{oldVersion: oldProvider, newVersion: newProvider} {
		at := filepath.Join(mirrorDir, strings.TrimSpace(string(address)), version, platform)
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(at, "terraform-provider-leasehold_v"+version), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// A PostgreSQL store, for leasehold_role_scope (a role's scope).
	admin, _, ownerURL := pgtest.NewOwnedDatabase(t)
	role, _ := pgtest.NewRole(t, admin, "lh_upgrade")
	migrate := exec.Command(leaseholdBin, "migrate", "--store", ownerURL)
	migrate.Env = cleanEnv()
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("leasehold migrate: %v\n%s", err, out)
	}

	w := newMirrorWorkspace(t, mirrorDir, ownerURL)
	configure := func(version string) {
		t.Helper()
		cfg := fmt.Sprintf(`terraform {
  required_providers {
    leasehold = {
      source  = "leasehold/leasehold"
      version = %q
    }
  }
}

provider "leasehold" {}

resource "leasehold_retention_policy" "short" {
  name      = "short"
  keep_for  = "24h"
  keep_last = 10
}

resource "leasehold_task" "report" {
  name             = "nightly-report"
  description      = "the nightly report"
  ttl              = "30s"
  max_ttl          = "2m"
  retention_policy = leasehold_retention_policy.short.name
}

resource "leasehold_task" "plain" {
  name = "pruner"
  ttl  = "1m"
}

resource "leasehold_role_scope" "team" {
  role     = %q
  prefixes = ["team-a/", "shared/"]
}
`, version, role)
		if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	configure(oldVersion)
	w.run([]int{0}, "init")
	w.run([]int{0}, "apply", "-auto-approve")
	w.run([]int{0}, "plan", "-detailed-exitcode") // the release agrees with itself

	configure(newVersion)
	w.run([]int{0}, "init", "-upgrade")
	w.run([]int{0}, "plan", "-detailed-exitcode") // 2 would be a change: printed, and the test fails
	w.run([]int{0}, "apply", "-auto-approve")
	w.run([]int{0}, "plan", "-detailed-exitcode")
	lock, err := os.ReadFile(filepath.Join(w.dir, ".terraform.lock.hcl"))
	if err != nil || !strings.Contains(string(lock), strconv.Quote(newVersion)) {
		t.Fatalf("after init -upgrade the lock file does not select %s (%v):\n%s", newVersion, err, lock)
	}
}

// nextPatch is version's next patch: 0.1.0 → 0.1.1.
func nextPatch(t *testing.T, version string) string {
	t.Helper()
	parts := strings.Split(version, ".")
	if len(parts) != 3 {
		t.Fatalf("version %q is not MAJOR.MINOR.PATCH", version)
	}
	patch, err := strconv.Atoi(parts[2])
	if err != nil {
		t.Fatalf("version %q: %v", version, err)
	}
	return fmt.Sprintf("%s.%s.%d", parts[0], parts[1], patch+1)
}
