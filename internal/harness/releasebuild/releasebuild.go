// Package releasebuild builds an earlier release of leasehold from the
// commit RELEASES records for it, out of the clone's own history, for the
// tests that run an old build beside the tree's: the rolling upgrade and the
// provider's state upgrade.
//
// A build checks the commit out into a temporary git worktree, builds the
// asked-for command there with -trimpath and the release's version stamped,
// and keeps the binary under bin/releases/VERSION/ at the repository root,
// so later tests (and later runs) reuse it. A file lock serialises builders
// across the test binaries go test runs side by side.
//
// Without the commit (a shallow clone) a test is skipped with what to run,
// or fails when CI is set: under CI a missing release is never a skip.
package releasebuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/release"
)

// Leasehold and Provider are the commands a test may ask for, as package
// paths inside the repository, with the -X flag that stamps each one's
// version.
var (
	Leasehold = Command{Package: "./cmd/leasehold", Name: "leasehold", VersionVar: "github.com/leasehold/leasehold/internal/version.version"}
	Provider  = Command{Package: "./cmd/terraform-provider-leasehold", Name: "terraform-provider-leasehold", VersionVar: "main.version"}
)

// Command is a main package of the repository.
type Command struct {
	Package    string // relative to the repository root
	Name       string // the binary's file name
	VersionVar string // the variable -ldflags -X stamps with the version
}

// Root returns the repository's top directory, the one holding RELEASES.
func Root(tb testing.TB) string {
	tb.Helper()
	root, err := findRoot()
	if err != nil {
		tb.Fatalf("releasebuild: find the repository root with git rev-parse: %v", err)
	}
	return root
}

// findRoot asks git once per test binary.
var findRoot = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	return strings.TrimSpace(string(out)), err
})

// Latest returns the newest release RELEASES records; a record with none
// fails the test.
func Latest(tb testing.TB) release.Release {
	tb.Helper()
	all, err := release.Load(Root(tb))
	if err != nil {
		tb.Fatalf("releasebuild: %v", err)
	}
	r, ok := release.Latest(all)
	if !ok {
		tb.Fatalf("releasebuild: %s records no release yet", release.File)
	}
	return r
}

// Build returns the path of cmd built from release r's commit, building it
// the first time.
func Build(tb testing.TB, r release.Release, cmd Command) string {
	tb.Helper()
	root := Root(tb)
	if err := exec.Command("git", "-C", root, "cat-file", "-e", r.Commit+"^{commit}").Run(); err != nil {
		msg := fmt.Sprintf("release %s's commit %s is not in this clone (a shallow clone?): run git fetch --unshallow, or clone with full history", r.Version, r.Commit)
		if os.Getenv("CI") != "" {
			tb.Fatal(msg + " (CI is set, so this is a failure, not a skip)")
		}
		tb.Skip(msg)
	}
	dir := filepath.Join(root, "bin", "releases", r.Version)
	bin := filepath.Join(dir, cmd.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	unlock, err := lock(filepath.Join(dir, ".lock"))
	if err != nil {
		tb.Fatal(err)
	}
	defer unlock()
	// The commit is written beside the binary: a record whose line was
	// changed to another commit must not reuse a stale build.
	stamp := filepath.Join(dir, cmd.Name+".commit")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == r.Commit {
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	work, err := os.MkdirTemp("", "leasehold-"+r.Version+"-")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.RemoveAll(work)
	tree := filepath.Join(work, "tree")
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "worktree", "add", "--detach", tree, r.Commit).CombinedOutput(); err != nil {
		tb.Fatalf("releasebuild: git worktree add %s: %v\n%s", r.Commit, err, out)
	}
	defer exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).Run()
	tmp := bin + ".tmp"
	build := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", fmt.Sprintf("-X %s=%s", cmd.VersionVar, r.Version), "-o", tmp, cmd.Package)
	build.Dir = tree
	// The old tree's own go.work (if any) decides its modules; a GOWORK or
	// GOFLAGS meant for the current tree must not leak into it.
	build.Env = append(os.Environ(), "GOWORK=", "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	build.Stderr = &stderr
	if err := build.Run(); err != nil {
		tb.Fatalf("releasebuild: build %s of %s (%s): %v\n%s", cmd.Package, r.Version, r.Commit, err, stderr.String())
	}
	if err := os.Rename(tmp, bin); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(stamp, []byte(r.Commit), 0o644); err != nil {
		tb.Fatal(err)
	}
	return bin
}

// lock takes an exclusive lock on path, waiting for another builder.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
