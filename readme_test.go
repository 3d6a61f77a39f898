package leasehold_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// docPages is the README and every page of docs/: the pages whose links and
// examples these tests hold to the tree.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, pages...)
}

// fenced splits a Markdown page into its prose lines and its fenced code
// blocks (each block's text without the fences, and the info string after
// the opening fence).
func fenced(page string) (prose []string, blocks []codeBlock) {
	var cur *codeBlock
	for _, line := range strings.SplitAfter(page, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &codeBlock{lang: strings.TrimSpace(strings.TrimPrefix(line, "```"))}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line
		default:
			prose = append(prose, line)
		}
	}
	return prose, blocks
}

type codeBlock struct{ lang, text string }

// anchors are the fragment names GitHub gives a page's headings: lower case,
// punctuation dropped, spaces as hyphens, a repeated heading numbered.
func anchors(page string) map[string]bool {
	prose, _ := fenced(page)
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range prose {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

var mdLinkRE = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// TestDocsLinks: every relative link of the README and docs/ names a file or
// directory of the tree, and every #fragment a heading of its page, so that
// moving a section cannot leave a link behind.
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	for _, page := range docPages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		prose, _ := fenced(string(text))
		for _, line := range prose {
			for _, m := range mdLinkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				file := page
				if path != "" {
					file = filepath.Join(filepath.Dir(page), path)
					if _, err := os.Stat(file); err != nil {
						t.Errorf("%s links to %s, which does not exist", page, target)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(file, ".md") {
					t.Errorf("%s links to %s: a fragment of a file that is not Markdown", page, target)
					continue
				}
				doc, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors(string(doc))[frag] {
					t.Errorf("%s links to %s, but %s has no heading #%s", page, target, file, frag)
				}
			}
		}
	}
}

// The client examples the docs show: each file of examples/ that a page
// shows, and the page. examples/examples_test.go runs each of them against
// a real sidecar.
var shownExamples = []struct{ page, file string }{
	{"docs/clients.md", "examples/goclient/main.go"},
	{"docs/clients.md", "examples/gofenced/main.go"},
	{"docs/clients.md", "examples/golib/main.go"},
	{"docs/clients.md", "examples/python/claim.py"},
	{"docs/clients.md", "examples/python/run.py"},
	{"docs/clients.md", "examples/python/fenced.py"},
	{"docs/clients.md", "examples/typescript/main.js"},
}

// TestDocsShowExamples: a page that shows an example shows the file as it
// is, whole, in one fenced block, so that what a reader copies is what the
// tests run.
func TestDocsShowExamples(t *testing.T) {
	t.Parallel()
	for _, ex := range shownExamples {
		page, err := os.ReadFile(ex.page)
		if err != nil {
			t.Fatal(err)
		}
		file, err := os.ReadFile(ex.file)
		if err != nil {
			t.Fatal(err)
		}
		if !showsVerbatim(string(page), string(file)) {
			t.Errorf("%s does not show %s verbatim in a fenced block: copy the file into it whole", ex.page, ex.file)
		}
	}
}

// showsVerbatim reports whether one fenced block of page is exactly file.
func showsVerbatim(page, file string) bool {
	_, blocks := fenced(page)
	for _, b := range blocks {
		if b.text == file {
			return true
		}
	}
	return false
}

// TestShowsVerbatim: the helper tells a whole copy from a changed one.
func TestShowsVerbatim(t *testing.T) {
	t.Parallel()
	file := "package main\n\nfunc main() {}\n"
	page := "text\n\n```go\n" + file + "```\n"
	if !showsVerbatim(page, file) {
		t.Error("a page holding the file in a block: not found")
	}
	if showsVerbatim(strings.Replace(page, "main() {}", "main() { }", 1), file) {
		t.Error("a page holding a changed copy: found")
	}
	if showsVerbatim("```go\npackage main\n```\n", file) {
		t.Error("a page holding part of the file: found")
	}
}

// TestREADMEContents: the README is the first hour, not the reference: it
// stays short (the reference lives in docs/), and its table of contents
// lists every section, in order.
func TestREADMEContents(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	const most = 300
	if n := strings.Count(string(text), "\n"); n > most {
		t.Errorf("README.md has %d lines; keep it under %d and move reference text to a page of docs/", n, most)
	}
	prose, _ := fenced(string(text))
	var sections, listed []string
	inContents := false
	for _, line := range prose {
		switch {
		case strings.HasPrefix(line, "## "):
			inContents = line == "## Contents\n"
			if !inContents {
				sections = append(sections, strings.TrimSpace(strings.TrimPrefix(line, "## ")))
			}
		case inContents && strings.HasPrefix(line, "- ["):
			title, _, _ := strings.Cut(strings.TrimPrefix(line, "- ["), "]")
			listed = append(listed, title)
		}
	}
	if strings.Join(listed, "|") != strings.Join(sections, "|") {
		t.Errorf("README.md's Contents lists\n\t%s\nits sections are\n\t%s", strings.Join(listed, ", "), strings.Join(sections, ", "))
	}
}
