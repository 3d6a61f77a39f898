package exitcode_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/exitcode"
)

// The docs give the exit statuses once, in docs/cli.md's "## Exit status"
// (the README links there): its table has exactly exitcode.Table's rows, in
// its order and words, and no other page has such a table.
func TestDocsExitStatus(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	tables := 0
	for _, page := range append(pages, "../../README.md") {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(text), "| exit status | meaning |"); n > 0 && filepath.Base(page) != "cli.md" {
			t.Errorf("%s has an exit status table; the docs give it once, in docs/cli.md", page)
		}
		tables += strings.Count(string(text), "| exit status | meaning |")
	}
	if tables != 1 {
		t.Errorf("the docs have %d exit status tables; they give them once, in docs/cli.md's ## Exit status", tables)
	}
	cli, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(cli), "\n## Exit status\n")
	if !ok {
		t.Fatal("docs/cli.md has no ## Exit status section")
	}
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	var rows []exitcode.Row
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if !strings.HasPrefix(line, "|") || len(cells) != 2 {
			continue
		}
		status, meaning := strings.TrimSpace(cells[0]), strings.TrimSpace(cells[1])
		if status == "exit status" || status == "---" {
			continue
		}
		rows = append(rows, exitcode.Row{Status: status, Meaning: meaning})
	}
	readmeRows := map[string]string{}
	for _, r := range rows {
		readmeRows[r.Status] = r.Meaning
	}
	goRows := map[string]string{}
	for _, r := range exitcode.Table {
		goRows[r.Status] = r.Meaning
		switch m, ok := readmeRows[r.Status]; {
		case !ok:
			t.Errorf("docs/cli.md's table lacks status %s (%s)", r.Status, r.Meaning)
		case m != r.Meaning:
			t.Errorf("status %s: docs/cli.md says\n\t%s\nexitcode.Table says\n\t%s", r.Status, m, r.Meaning)
		}
	}
	for _, r := range rows {
		if _, ok := goRows[r.Status]; !ok {
			t.Errorf("docs/cli.md's table has status %s, which exitcode.Table lacks", r.Status)
		}
	}
	if len(rows) == len(exitcode.Table) {
		for i, r := range rows {
			if r.Status != exitcode.Table[i].Status {
				t.Errorf("row %d: docs/cli.md has %s, exitcode.Table %s: keep one order", i, r.Status, exitcode.Table[i].Status)
			}
		}
	}
}
