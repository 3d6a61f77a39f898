package leasehold_test

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateGoAPI = flag.Bool("update-goapi", false, "rewrite testdata/goapi.txt from the exported Go API")

// goAPIPackages are the packages a Go program imports to use leasehold:
// the library, its stores and the conformance suite a third-party store
// runs, and the HTTP client. Their exported API follows semantic versioning
// (docs/compatibility.md). client/leaserun and client/opcli are the
// binary's verbs, importable but not promised.
var goAPIPackages = []string{
	"leasecore", "leasecore/migration", "leasecore/postgres", "leasecore/sqlite",
	"leasecore/storetest", "leasecore/storeurl", "leasecore/watch", "client",
}

// TestGoAPI holds the exported Go API of goAPIPackages to testdata/goapi.txt,
// one declaration a line, so that any change to it shows as a diff in
// review: a removal or a changed signature is a breaking change, which
// needs a new major version. After an intended addition,
// go test . -run TestGoAPI -update-goapi rewrites the file.
func TestGoAPI(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for _, dir := range goAPIPackages {
		lines, err := exportedAPI(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			fmt.Fprintf(&b, "%s: %s\n", dir, l)
		}
	}
	got := b.String()
	const golden = "testdata/goapi.txt"
	if *updateGoAPI {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		wantLines, gotLines := strings.Split(string(want), "\n"), strings.Split(got, "\n")
		var diff []string
		for _, l := range wantLines {
			if l != "" && !slices.Contains(gotLines, l) {
				diff = append(diff, "- "+l)
			}
		}
		for _, l := range gotLines {
			if l != "" && !slices.Contains(wantLines, l) {
				diff = append(diff, "+ "+l)
			}
		}
		t.Errorf("the exported Go API differs from %s (- removed, + added):\n%s\n"+
			"a removal or a changed signature breaks users (docs/compatibility.md); for an intended change run go test . -run TestGoAPI -update-goapi",
			golden, strings.Join(diff, "\n"))
	}
}

// exportedAPI lists the exported declarations of the package in dir: each
// const, var, func, type (with its exported fields and methods), printed
// without bodies or comments, sorted.
func exportedAPI(dir string) ([]string, error) {
	fset := token.NewFileSet()
	// go/build picks the package's files as a build for this platform
	// would, build tags included.
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	var lines []string
	d, err := doc.NewFromFiles(fset, files, filepath.ToSlash(dir))
	if err != nil {
		return nil, err
	}
	node := func(n any) string {
		var buf bytes.Buffer
		_ = printer.Fprint(&buf, fset, n)
		return strings.Join(strings.Fields(buf.String()), " ")
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			for _, spec := range v.Decl.Specs {
				vs := spec.(*ast.ValueSpec)
				for _, n := range vs.Names {
					if n.IsExported() {
						line := v.Decl.Tok.String() + " " + n.Name
						if vs.Type != nil {
							line += " " + node(vs.Type)
						}
						lines = append(lines, line)
					}
				}
			}
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			decl := *f.Decl
			decl.Body, decl.Doc = nil, nil
			lines = append(lines, node(&decl))
		}
	}
	values(d.Consts)
	values(d.Vars)
	funcs(d.Funcs)
	for _, typ := range d.Types {
		for _, spec := range typ.Decl.Specs {
			ts := spec.(*ast.TypeSpec)
			lines = append(lines, "type "+ts.Name.Name+" "+typeShape(ts.Type, node))
		}
		values(typ.Consts)
		values(typ.Vars)
		funcs(typ.Funcs)
		funcs(typ.Methods)
	}
	slices.Sort(lines)
	return lines, nil
}

// typeShape prints a type's exported surface: a struct's exported fields
// and an interface's methods, one by one; other types as written.
func typeShape(e ast.Expr, node func(any) string) string {
	var parts []string
	switch t := e.(type) {
	case *ast.StructType:
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 {
				parts = append(parts, node(f.Type))
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					parts = append(parts, n.Name+" "+node(f.Type))
				}
			}
		}
		return "struct { " + strings.Join(parts, "; ") + " }"
	case *ast.InterfaceType:
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				parts = append(parts, node(m.Type))
				continue
			}
			for _, n := range m.Names {
				if n.IsExported() {
					parts = append(parts, n.Name+strings.TrimPrefix(node(m.Type), "func"))
				}
			}
		}
		return "interface { " + strings.Join(parts, "; ") + " }"
	}
	return node(e)
}
