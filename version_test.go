package leasehold_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/release"
)

// git runs git in dir with a fixed identity and fails the test on error.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestVersionScript walks scripts/version.sh through a release's life in a
// throwaway repository: before any release, at the recorded commit (also
// checked out on its own, before the line recording it), after it, and
// with a changed tree.
func TestVersionScript(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("scripts/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "scripts", "version.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	version := func() string {
		t.Helper()
		out, err := exec.Command("bash", filepath.Join(repo, "scripts", "version.sh")).Output()
		if err != nil {
			t.Fatalf("version.sh: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-qm", "first")
	cut := git(t, repo, "rev-parse", "HEAD")
	if got, want := version(), "v0.1.0-dev+"+cut[:12]; got != want {
		t.Errorf("before any release: %q, want %q", got, want)
	}
	if err := os.WriteFile(filepath.Join(repo, "RELEASES"), []byte("# releases\nv0.1.0 "+cut+" 2026-12-04\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "add", "RELEASES")
	git(t, repo, "commit", "-qm", "record v0.1.0")
	after := git(t, repo, "rev-parse", "HEAD")
	if got, want := version(), "v0.1.1-dev.1+"+after[:12]; got != want {
		t.Errorf("one commit after v0.1.0: %q, want %q", got, want)
	}
	git(t, repo, "checkout", "-q", "--detach", cut)
	if got := version(); got != "v0.1.0" {
		t.Errorf("at v0.1.0's commit (recorded on main only): %q, want v0.1.0", got)
	}
	if err := os.WriteFile(filepath.Join(repo, "scripts", "version.sh"), append(script, '\n'), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, want := version(), "v0.1.0-dev+"+cut[:12]+".dirty"; got != want {
		t.Errorf("a changed tree at v0.1.0's commit: %q, want %q (a changed tree is never the release)", got, want)
	}
}

// TestMakeStampsVersion builds leasehold with make build-leasehold and make
// install, and holds what each binary says to scripts/version.sh.
func TestMakeStampsVersion(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("builds leasehold twice; -short skips it (CI never skips this)")
	}
	t.Parallel()
	want, err := exec.Command("scripts/version.sh").Output()
	if err != nil {
		t.Fatal(err)
	}
	commit, err := exec.Command("scripts/version.sh", "--commit").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gobin := filepath.Join(dir, "gobin")
	for _, target := range []string{"build-leasehold", "install"} {
		cmd := exec.Command("make", "-s", target, "BIN="+dir)
		cmd.Env = append(os.Environ(), "GOBIN="+gobin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make %s: %v\n%s", target, err, out)
		}
	}
	for _, bin := range []string{filepath.Join(dir, "leasehold"), filepath.Join(gobin, "leasehold")} {
		out, err := exec.Command(bin, "version", "--json").Output()
		if err != nil {
			t.Fatalf("%s version --json: %v", bin, err)
		}
		var got struct{ Version, Commit string }
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s version --json: %v\n%s", bin, err, out)
		}
		if got.Version != strings.TrimSpace(string(want)) || got.Commit != strings.TrimSpace(string(commit)) {
			t.Errorf("%s says version %q commit %q; scripts/version.sh says %q and %q", bin, got.Version, got.Commit, strings.TrimSpace(string(want)), strings.TrimSpace(string(commit)))
		}
	}
}

// TestReleasesRecord holds RELEASES to the history and the changelog: each
// release's commit is in the clone, CHANGELOG.md has its entry with its
// date, and the commit it was cut from already carried that entry.
func TestReleasesRecord(t *testing.T) {
	t.Parallel()
	all, err := release.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("RELEASES records no release")
	}
	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		heading := "\n## " + r.Version + " - " + r.Date.Format("2006-01-02") + "\n"
		if !strings.Contains(string(changelog), heading) {
			t.Errorf("CHANGELOG.md has no heading %q for %s", strings.TrimSpace(heading), r.Version)
		}
		cut, err := exec.Command("git", "show", r.Commit+":CHANGELOG.md").Output()
		if err != nil {
			msg := fmt.Sprintf("%s's commit %s is not in this clone (a shallow clone? git fetch --unshallow): %v", r.Version, r.Commit, err)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		if !strings.Contains(string(cut), heading) {
			t.Errorf("%s was cut from %s, whose CHANGELOG.md has no entry for it", r.Version, r.Commit[:12])
		}
	}
}
