package leasehold_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
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
	{"leasecore", []string{"sidecar", "client", "leasecore/postgres", "leasecore/sqlite", "tfprovider", "github.com/labstack/echo/v4", "net/http"},
		"the model imports no transport and no driver"},
	{"leasecore/postgres", []string{"leasecore/sqlite", "sidecar", "tfprovider"}, "drivers never import each other or a face"},
	{"leasecore/sqlite", []string{"leasecore/postgres", "sidecar", "tfprovider"}, "drivers never import each other or a face"},
	{"sidecar/leaserun", []string{"sidecar"}, "leasehold run shares CLI helpers through internal/cli, not the server"},
	{"sidecar/console", []string{"sidecar", "leasecore", "github.com/labstack/echo/v4"},
		"the console is static files and their handler: the page reads the model through the HTTP API only"},
	{"internal/cli", []string{"sidecar", "sidecar/leaserun"}, "the CLI helpers serve both commands"},
	{"sidecar/opcli", []string{"sidecar"}, "the operator commands ask a sidecar over HTTP, or a store through leasecore"},
	{"tfprovider", []string{"sidecar"}, "the provider talks to the store through leasecore"},
	{"client", []string{"sidecar", "sidecar/opcli", "sidecar/leaserun", "internal/cli", "leasecore/postgres", "leasecore/sqlite"},
		"the Go client asks a sidecar over HTTP: it imports no server package and no store driver"},
}

const module = "github.com/leasehold/leasehold"

// TestLayers fails when a package depends on one it must not: a rule
// written down in the design is kept by a check that can fail.
func TestLayers(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the module's packages: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps=false", "-json=ImportPath,Deps", "./...").Output()
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
				if local == f || dep == f {
					t.Errorf("%s depends on %s: %s", rule.pkg, f, rule.why)
				}
			}
		}
	}
}
