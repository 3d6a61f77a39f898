package opcli_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/harness/testsidecar"
)

// The sessions of docs/cli.md (the ```console block of ## Operator commands,
// and of ## Declared tasks and retention policies) are what the commands
// print: each `$ leasehold …` line is run, in order, against one fresh
// sidecar per session, and its output must match the page's, times aside.
func TestDocsSession(t *testing.T) {
	t.Parallel()
	for _, heading := range []string{"Operator commands", "Declared tasks and retention policies"} {
		t.Run(heading, func(t *testing.T) {
			t.Parallel()
			section := docsSection(t, heading)
			_, block, ok := strings.Cut(section, "```console\n")
			if !ok {
				t.Fatalf("the %s section has no ```console block", heading)
			}
			block, _, _ = strings.Cut(block, "```")
			conn := []string{"--addr", sidecarOn(t, testsidecar.OpenStore(t, testsidecar.SQLiteURL(t)), "", false).URL}
			var commands int
			for _, step := range strings.Split(block, "$ ")[1:] {
				line, want, _ := strings.Cut(step, "\n")
				args := splitWords(t, line)
				if len(args) < 2 || args[0] != "leasehold" {
					t.Fatalf("docs/cli.md step %q is not a leasehold command", line)
				}
				commands++
				r := leasehold(t, nil, args[1], append(args[2:], conn...)...)
				got := r.stdout
				if r.code != 0 {
					got += "# exit " + strconv.Itoa(r.code) + "\n"
				}
				if normalize(got) != normalize(want) {
					t.Errorf("docs/cli.md: $ %s\nprints:\n%s\ndocs/cli.md shows:\n%s", line, got, want)
				}
			}
			if commands < 6 {
				t.Errorf("the docs/cli.md session runs %d commands; it should show the verbs", commands)
			}
		})
	}
}

// splitWords splits a command line at spaces, keeping a "double-quoted"
// word whole (the sessions quote nothing else).
func splitWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	for rest := strings.TrimSpace(line); rest != ""; rest = strings.TrimSpace(rest) {
		if rest[0] == '"' {
			word, after, ok := strings.Cut(rest[1:], `"`)
			if !ok {
				t.Fatalf("docs/cli.md step %q has an unclosed quote", line)
			}
			words, rest = append(words, word), after
			continue
		}
		word, after, _ := strings.Cut(rest, " ")
		words, rest = append(words, word), after
	}
	return words
}

// The escaping example of docs/cli.md (a note given as JSON, and the line
// `leasehold get` prints for it) is what get prints.
func TestDocsEscaping(t *testing.T) {
	t.Parallel()
	section := operatorSection(t)
	m := regexp.MustCompile("claimed with the note\\s+`(\"[^`]*\")` \\(as JSON\\) shows in `leasehold get` as\\s+```text\n([^\n]*)\n```").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("the Operator commands section has no escaping example (a note as JSON, then a ```text block)")
	}
	var note string
	if err := json.Unmarshal([]byte(m[1]), &note); err != nil {
		t.Fatalf("docs/cli.md's note %s is not a JSON string: %v", m[1], err)
	}
	conn := []string{"--addr", sidecarOn(t, testsidecar.OpenStore(t, testsidecar.SQLiteURL(t)), "", false).URL}
	leasehold(t, nil, "claim", append([]string{"report", "--owner", "w1", "--note", note}, conn...)...).expect(t, 0)
	leasehold(t, nil, "get", append([]string{"report"}, conn...)...).expect(t, 0, m[2]+"\n")
}

// operatorSection is docs/cli.md from its ## Operator commands on.
func operatorSection(t *testing.T) string {
	t.Helper()
	return docsSection(t, "Operator commands")
}

// docsSection is docs/cli.md from its ## heading on.
func docsSection(t *testing.T, heading string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("docs/cli.md has no ## %s section", heading)
	}
	return section
}

var (
	stampRE    = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`)
	relativeRE = regexp.MustCompile(`in [0-9hms.]+`)
	remainRE   = regexp.MustCompile(`"ttl_remaining_ms": \d+`)
	eventIDRE  = regexp.MustCompile(`(?m)^\d+ `)
	trailingRE = regexp.MustCompile(`(?m) +$`)
	spacesRE   = regexp.MustCompile(` +`)
)

// normalize drops what changes from run to run: times, remaining ttls,
// event IDs (a serving sidecar's pruner takes some), and the column widths
// they set.
func normalize(s string) string {
	s = stampRE.ReplaceAllString(s, "TIME")
	s = relativeRE.ReplaceAllString(s, "in N")
	s = remainRE.ReplaceAllString(s, `"ttl_remaining_ms": N`)
	s = eventIDRE.ReplaceAllString(s, "ID ")
	s = trailingRE.ReplaceAllString(s, "")
	return spacesRE.ReplaceAllString(strings.TrimSpace(s), " ")
}
