package leasehold_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// slogFuncs are the log/slog functions and *slog.Logger methods whose
// arguments end up in a log line.
var slogFuncs = map[string]bool{
	"Debug": true, "Info": true, "Warn": true, "Error": true, "Log": true, "LogAttrs": true,
	"DebugContext": true, "InfoContext": true, "WarnContext": true, "ErrorContext": true,
	"With": true, "String": true, "Any": true, "Group": true,
}

// storeKey is a log key that names a store; storeName is an expression
// whose name says it holds a store URL or connection string.
var (
	storeKey  = regexp.MustCompile(`(?i)^(store|watch_store|store_url|url|dsn|database_url|conn(ection)?_?string)$`)
	storeName = regexp.MustCompile(`(?i)(store|storeurl|dsn|connstr(ing)?|databaseurl)$`)
)

// TestNoRawStoreStringLogged fails when a slog call anywhere in the module
// (tests aside) passes a store URL as a plain string, under a key such as
// "store" or from a variable or field named like one (cfg.Store, raw
// storeURL): a store goes to a log line as a storeurl.URL, whose LogValue
// masks its password, never as the string it was parsed from. A vet-like
// check: the module's packages are type-checked from source against the
// export data go list builds.
func TestNoRawStoreStringLogged(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the module's packages: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-export", "-deps", "-json=ImportPath,Export,Dir,GoFiles,Module", "./...")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	type pkg struct {
		ImportPath, Export, Dir string
		GoFiles                 []string
		Module                  *struct{ Path string }
	}
	exports := map[string]string{}
	var ours []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		exports[p.ImportPath] = p.Export
		if p.Module != nil && p.Module.Path == module {
			ours = append(ours, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	checked := 0
	for _, p := range ours {
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatalf("parse %s: %v", name, err)
			}
			files = append(files, f)
		}
		info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
		if _, err := (&types.Config{Importer: imp}).Check(p.ImportPath, fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", p.ImportPath, err)
		}
		checked++
		for _, f := range files {
			for _, finding := range rawStoreLogs(fset, info, f) {
				t.Errorf("%s: a store URL goes to slog as a plain string (%s): pass the storeurl.URL it parses to", finding.pos, finding.what)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d packages checked", checked)
	}
}

type finding struct {
	pos  token.Position
	what string
}

// rawStoreLogs finds the slog calls in f that pass a non-constant string
// under a store key, or from an expression named like a store.
func rawStoreLogs(fset *token.FileSet, info *types.Info, f *ast.File) []finding {
	var found []finding
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		fn, ok := info.Uses[sel.Sel].(*types.Func)
		if !ok || fn.Pkg() == nil || fn.Pkg().Path() != "log/slog" || !slogFuncs[fn.Name()] {
			return true
		}
		for i, arg := range call.Args {
			tv := info.Types[arg]
			if tv.Value != nil || tv.Type == nil {
				continue // a constant: a message or a key
			}
			if b, ok := tv.Type.Underlying().(*types.Basic); !ok || b.Kind() != types.String {
				continue
			}
			key := ""
			if i > 0 {
				if kv := info.Types[call.Args[i-1]].Value; kv != nil && kv.Kind() == constant.String {
					key = constant.StringVal(kv)
				}
			}
			name := exprName(arg)
			if storeKey.MatchString(key) || storeName.MatchString(name) {
				found = append(found, finding{fset.Position(arg.Pos()), fmt.Sprintf("key %q, value %s", key, name)})
			}
		}
		return true
	})
	return found
}

// exprName is the last name in an expression: x for x, cfg.x and f(…).x.
func exprName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.ParenExpr:
		return exprName(e.X)
	default:
		return ""
	}
}
