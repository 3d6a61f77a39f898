package leasehold_test

import (
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEGoExample checks that the README's Go examples, whole programs
// (the Go library's, the Go client's), are gofmt'ed and pass go vet inside
// this module: their import paths, names and signatures must be the code's.
func TestREADMEGoExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, heading := range []string{"\n## Go library\n", "\n### Go\n"} {
		_, section, ok := strings.Cut(string(readme), heading)
		if !ok {
			t.Fatalf("README has no %q section", strings.TrimSpace(heading))
		}
		_, block, ok := strings.Cut(section, "```go\n")
		if !ok {
			t.Fatalf("the %q section has no ```go block", strings.TrimSpace(heading))
		}
		block, _, ok = strings.Cut(block, "```")
		if !ok {
			t.Fatalf("the %q section's ```go block is not closed", strings.TrimSpace(heading))
		}
		vetExample(t, block)
	}
}

// vetExample checks one whole-program example: package main, gofmt'ed,
// and clean under go vet.
func vetExample(t *testing.T, block string) {
	t.Helper()
	if !strings.HasPrefix(block, "package main\n") {
		t.Fatalf("the example is not a whole program (package main first):\n%s", block)
	}
	if formatted, err := format.Source([]byte(block)); err != nil || string(formatted) != block {
		t.Errorf("the README's Go example is not gofmt'ed (%v); gofmt gives:\n%s", err, formatted)
	}
	// A directory starting with _ inside the module: go vet takes it by
	// path, while ./... patterns (make lint, make test) never see it.
	dir, err := os.MkdirTemp(".", "_readme_example")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "vet", "./"+filepath.ToSlash(dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("go vet of the README's Go example: %v\n%s\n%s", err, out, block)
	}
}
