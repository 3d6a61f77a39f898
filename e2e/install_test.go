package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// distVersion is the version the install test stamps its release with.
const distVersion = "v0.0.0-installtest"

// dist builds a release for this machine's platform once for the package,
// with scripts/dist.sh as make dist runs it, into a directory of its own;
// a second build of the same tree goes to another.
var distOnce = sync.OnceValues(func() ([2]string, error) {
	var dirs [2]string
	commit, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return dirs, fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	for i := range dirs {
		// Under TestMain's directory, which it removes at the end.
		dir, err := os.MkdirTemp(filepath.Dir(leaseholdBin), "dist-")
		if err != nil {
			return dirs, err
		}
		dirs[i] = dir
		cmd := exec.Command("../scripts/dist.sh", distVersion, strings.TrimSpace(string(commit)), dir)
		cmd.Env = append(os.Environ(), "DIST_PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH)
		if out, err := cmd.CombinedOutput(); err != nil {
			return dirs, fmt.Errorf("scripts/dist.sh: %v\n%s", err, out)
		}
	}
	return dirs, nil
})

func distDir(t *testing.T) string {
	t.Helper()
	dirs, err := distOnce()
	if err != nil {
		t.Fatal(err)
	}
	return dirs[0]
}

// TestDistIsReproducible builds the release twice from one tree: every file
// must have the same bytes, and SHA256SUMS must check.
func TestDistIsReproducible(t *testing.T) {
	t.Parallel()
	dirs, err := distOnce()
	if err != nil {
		t.Fatal(err)
	}
	sums := [2][]byte{}
	for i, dir := range dirs {
		if sums[i], err = os.ReadFile(filepath.Join(dir, "SHA256SUMS")); err != nil {
			t.Fatal(err)
		}
		check := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
		check.Dir = dir
		if out, err := check.CombinedOutput(); err != nil {
			t.Fatalf("sha256sum --check in %s: %v\n%s", dir, err, out)
		}
	}
	if !bytes.Equal(sums[0], sums[1]) {
		t.Fatalf("two builds of one tree differ:\n%s\n---\n%s", sums[0], sums[1])
	}
	v := strings.TrimPrefix(distVersion, "v")
	for _, want := range []string{
		fmt.Sprintf("leasehold_%s_%s_%s.tar.gz", v, runtime.GOOS, runtime.GOARCH),
		fmt.Sprintf("terraform-provider-leasehold_%s_%s_%s.zip", v, runtime.GOOS, runtime.GOARCH),
		"terraform-provider-leasehold_" + v + "_SHA256SUMS",
		"terraform-provider-leasehold_" + v + "_manifest.json",
		"leasehold_" + v + "_sbom.cdx.json",
		"leasehold-client-" + v + ".tgz",
		"leasehold_client-0.0.0.dev0+installtest-py3-none-any.whl", // the version in Python's form (PEP 440)
	} {
		if !bytes.Contains(sums[0], []byte("  "+want+"\n")) {
			t.Errorf("SHA256SUMS lists no %s:\n%s", want, sums[0])
		}
	}
	var sbom struct {
		BOMFormat  string `json:"bomFormat"`
		Components []struct {
			Name, Version string
		} `json:"components"`
	}
	data, err := os.ReadFile(filepath.Join(dirs[0], "leasehold_"+v+"_sbom.cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &sbom); err != nil || sbom.BOMFormat != "CycloneDX" {
		t.Fatalf("the SBOM is not CycloneDX JSON (%v)", err)
	}
	names := map[string]bool{}
	for _, c := range sbom.Components {
		names[c.Name] = true
	}
	for _, dep := range []string{"github.com/jackc/pgx/v5", "modernc.org/sqlite", "github.com/labstack/echo/v4"} {
		if !names[dep] {
			t.Errorf("the SBOM lists no %s", dep)
		}
	}
}

// TestInstallRelease installs each artifact of the release the way a user
// would, offline, into a fresh directory, and runs one claim (for the
// provider, one declaration) through each against a sidecar.
func TestInstallRelease(t *testing.T) {
	t.Parallel()
	dist := distDir(t)
	v := strings.TrimPrefix(distVersion, "v")
	platform := runtime.GOOS + "_" + runtime.GOARCH

	// leasehold: unpack the archive, and the binary says the release's version and serves.
	home := t.TempDir()
	untar := exec.Command("tar", "-xzf", filepath.Join(dist, "leasehold_"+v+"_"+platform+".tar.gz"), "-C", home)
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	bin := filepath.Join(home, "leasehold_"+v+"_"+platform, "leasehold")
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("leasehold version --json: %v", err)
	}
	var build struct{ Version, Commit string }
	if err := json.Unmarshal(out, &build); err != nil || build.Version != distVersion || len(build.Commit) != 40 {
		t.Fatalf("the installed leasehold says %s (%v); want version %s and a commit", out, err, distVersion)
	}
	store := "sqlite:" + filepath.Join(home, "leasehold.db")
	s, err := launchBin(t, bin, nil, store)
	if err != nil {
		t.Fatal(err)
	}
	s.waitReady()
	claim := exec.Command(bin, "claim", "install/binary", "--owner", "installer", "--ttl", "1m", "--addr", s.addr)
	claim.Env = cleanEnv()
	if out, err := claim.CombinedOutput(); err != nil {
		t.Fatalf("the installed leasehold's claim: %v\n%s", err, out)
	}

	t.Run("provider", func(t *testing.T) {
		t.Parallel()
		w := newMirrorWorkspace(t, filepath.Join(dist, "mirror"), store)
		cfg := fmt.Sprintf(`terraform {
  required_providers {
    leasehold = {
      source  = "leasehold/leasehold"
      version = %q
    }
  }
}

provider "leasehold" {}

resource "leasehold_task" "installed" {
  name = "install/provider"
  ttl  = "45s"
}
`, v)
		if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		w.run([]int{0}, "init")
		w.run([]int{0}, "apply", "-auto-approve")
		resp, err := http.Get(s.base + "/v1/tasks/install%2Fprovider")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"ttl_ms":45000`) {
			t.Fatalf("the sidecar does not see the installed provider's declaration: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("npm", func(t *testing.T) {
		t.Parallel()
		node, err := exec.LookPath("node")
		if err != nil {
			missingTool(t, "node not found; CI needs it", "node not found: install node 20 to run this test")
		}
		dir := t.TempDir()
		npm := func(args ...string) {
			t.Helper()
			cmd := exec.Command("npm", args...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		npm("init", "-y")
		npm("install", "--offline", "--no-audit", "--no-fund", filepath.Join(dist, "leasehold-client-"+v+".tgz"))
		script := `import { LeaseholdClient } from "@leasehold/client";
const c = new LeaseholdClient({ baseUrl: process.argv[2] });
const r = await c.claim("install/npm", { owner: "node-installer", ttlMs: 60000 });
console.log(r.kind, r.lease?.token);
`
		if err := os.WriteFile(filepath.Join(dir, "claim.mjs"), []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(node, "claim.mjs", s.base)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "acquired 1" {
			t.Fatalf("node claim through the installed package: %q, %v; want acquired 1", out, err)
		}
	})

	t.Run("wheel", func(t *testing.T) {
		t.Parallel()
		py := python3(t)
		dir := t.TempDir()
		venv := filepath.Join(dir, "venv")
		if out, err := exec.Command(py, "-m", "venv", venv).CombinedOutput(); err != nil {
			t.Fatalf("python3 -m venv: %v\n%s", err, out)
		}
		vpy := filepath.Join(venv, "bin", "python")
		pip := exec.Command(vpy, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check", filepath.Join(dist, "leasehold_client-0.0.0.dev0+installtest-py3-none-any.whl"))
		if out, err := pip.CombinedOutput(); err != nil {
			t.Fatalf("pip install the wheel: %v\n%s", err, out)
		}
		cmd := exec.Command(vpy, "-c", `import sys
from leasehold_client import Client
r = Client(sys.argv[1], owner="py-installer").claim("install/wheel", ttl_ms=60000)
print(type(r).__name__, r.lease.token)`, s.base)
		cmd.Dir = dir // not the checkout: the package must come from the venv
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "Acquired 1" {
			t.Fatalf("python claim through the installed wheel: %q, %v; want Acquired 1", out, err)
		}
	})
}
