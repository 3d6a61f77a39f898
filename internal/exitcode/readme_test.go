package exitcode_test

import (
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/exitcode"
)

// The README documents the exit statuses once, in ### Exit status: its
// table has exactly exitcode.Table's rows, in its order and words.
func TestREADMEExitStatus(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "| exit status | meaning |"); n != 1 {
		t.Errorf("the README has %d exit status tables; it documents them once, in ### Exit status", n)
	}
	_, section, ok := strings.Cut(string(readme), "\n### Exit status\n")
	if !ok {
		t.Fatal("README has no ### Exit status section")
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
			t.Errorf("the README's table lacks status %s (%s)", r.Status, r.Meaning)
		case m != r.Meaning:
			t.Errorf("status %s: the README says\n\t%s\nexitcode.Table says\n\t%s", r.Status, m, r.Meaning)
		}
	}
	for _, r := range rows {
		if _, ok := goRows[r.Status]; !ok {
			t.Errorf("the README's table has status %s, which exitcode.Table lacks", r.Status)
		}
	}
	if len(rows) == len(exitcode.Table) {
		for i, r := range rows {
			if r.Status != exitcode.Table[i].Status {
				t.Errorf("row %d: the README has %s, exitcode.Table %s: keep one order", i, r.Status, exitcode.Table[i].Status)
			}
		}
	}
}
