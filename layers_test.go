package leasehold_test

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The module's layering (docs/design.md, "Parts and dependencies"): each
// rule names a package (or a prefix ending in "/") and the packages it
// must never depend on, directly or through another package of the module.
var layerRules = []struct {
	pkg       string
	forbidden []string
	why       string
}{
	{"leasecore", []string{"sidecar", "client", "client/", "cmd/", "leasecore/postgres", "leasecore/sqlite", "tfprovider", "github.com/labstack/echo/v4", "net/http"},
		"the model imports no transport and no driver"},
	{"leasecore/watch", []string{"sidecar", "client", "client/", "cmd/", "leasecore/postgres", "leasecore/sqlite", "tfprovider", "github.com/labstack/echo/v4", "net/http"},
		"the watch follows any store through the Service's HistoryFeed, and knows no transport"},
	{"leasecore/postgres", []string{"leasecore/sqlite", "sidecar", "tfprovider"}, "drivers never import each other or a face"},
	{"leasecore/sqlite", []string{"leasecore/postgres", "sidecar", "tfprovider"}, "drivers never import each other or a face"},
	{"client/leaserun", []string{"sidecar"}, "leasehold run shares CLI helpers through internal/cli, not the server"},
	{"sidecar/console", []string{"sidecar", "leasecore", "github.com/labstack/echo/v4"},
		"the console is static files and their handler: the page reads the model through the HTTP API only"},
	{"internal/cli", []string{"sidecar", "client/leaserun"}, "the CLI helpers serve both commands"},
	{"client/opcli", []string{"sidecar"}, "the operator commands ask a sidecar over HTTP, or a store through leasecore"},
	{"tfprovider", []string{"sidecar"}, "the provider talks to the store through leasecore"},
	{"internal/exitcode", []string{"sidecar", "client/opcli", "client/leaserun", "internal/cli", "cmd/", "leasecore/postgres", "leasecore/sqlite"},
		"the exit-code table maps outcomes (leasecore's, the Go client's) and knows no command, server or driver"},
	{"client/fence", []string{"sidecar", "sidecar/", "leasecore", "leasecore/", "client", "client/opcli", "client/leaserun", "internal/cli", "internal/exitcode", "cmd/",
		"github.com/labstack/echo/v4", "github.com/jackc/pgx/v5", "github.com/jackc/pgx/v5/", "modernc.org/sqlite", "modernc.org/sqlite/"},
		"the fence is the resource's half: database/sql and net/http only, with no server, store, lease client or driver, so any program can import it"},
	{"client/fence/fencepgx", []string{"sidecar", "sidecar/", "leasecore", "leasecore/", "client", "internal/cli", "internal/exitcode", "cmd/",
		"github.com/labstack/echo/v4", "modernc.org/sqlite", "modernc.org/sqlite/"},
		"the pgx fence adds pgx to the fence, and nothing else"},
	{"internal/fencecli", []string{"sidecar", "client/opcli", "client/leaserun", "tfprovider"},
		"leasehold fence works on the user's database alone: no sidecar, no operator verbs, no lease client of its own"},
	{"client", []string{"sidecar", "client/opcli", "client/leaserun", "internal/cli", "leasecore/postgres", "leasecore/sqlite"},
		"the Go client asks a sidecar over HTTP: it imports no server package and no store driver"},
}

const module = "github.com/leasehold/leasehold"

// workspacePatterns are every package of the workspace (go.work): the
// product's module and its test modules, which ./... does not reach (the
// Makefile's PKGS).
var workspacePatterns = []string{"./...", "./deploy/...", "./e2e/...", "./examples/..."}

// TestLayers fails when a package depends on one it must not: a rule
// written down in the design is kept by a check that can fail.
func TestLayers(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the module's packages: %v", err)
	}
	out, err := exec.Command(gobin, append([]string{"list", "-deps=false", "-json=ImportPath,Deps"}, workspacePatterns...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		deps[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = p.Deps
	}
	for _, rule := range layerRules {
		got, ok := deps[rule.pkg]
		if !ok {
			t.Errorf("rule for %s: no such package in the module (rename the rule with the package)", rule.pkg)
			continue
		}
		for _, dep := range got {
			local := strings.TrimPrefix(strings.TrimPrefix(dep, module), "/")
			for _, f := range rule.forbidden {
				if local == f || dep == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(local, f)) {
					t.Errorf("%s depends on %s: %s", rule.pkg, local, rule.why)
				}
			}
		}
	}
	// The commands are the top: nothing depends on them.
	for pkg, got := range deps {
		for _, dep := range got {
			if local := strings.TrimPrefix(dep, module+"/"); local != dep && strings.HasPrefix(local, "cmd/") {
				t.Errorf("%s depends on %s: nothing imports a command under cmd/", pkg, local)
			}
		}
	}
}

// TestPartsTableNamesEveryPackage: docs/design.md's parts table has a row
// for every package of the module and none for a package that is gone, so
// the map of the tree a newcomer reads cannot fall behind the tree.
func TestPartsTableNamesEveryPackage(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	start := strings.Index(section, "## Parts and dependencies")
	if start < 0 {
		t.Fatal(`docs/design.md has no "## Parts and dependencies"`)
	}
	section = section[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, name := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(first, -1) {
			listed[name[1]] = true
		}
	}
	out, err := exec.Command("go", append([]string{"list"}, workspacePatterns...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, path := range strings.Fields(string(out)) {
		pkg := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		if pkg == "" {
			continue // the root: the embedded openapi.yaml and the repository-wide tests
		}
		if !listed[pkg] {
			t.Errorf("docs/design.md's parts table has no row for %s", pkg)
		}
		delete(listed, pkg)
	}
	for pkg := range listed {
		t.Errorf("docs/design.md's parts table names %s, which is not a package of the module", pkg)
	}
}
