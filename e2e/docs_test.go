package e2e

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The sessions the README and docs/ show (```console blocks: `$ ` lines and
// what they print) are what the commands print against a fresh sidecar, in
// the order written: each page's blocks run one after another against one
// sidecar, so an example that leaves a lease behind breaks the next.

// sessionStep is one `$ ` line of a console block (a trailing backslash
// continues it) and what the page says it prints; a `# exit N` line says
// it exits N.
type sessionStep struct{ command, want string }

// section is the part of page's text (doc) under the heading from, up to
// the next heading of the same level outside a code block.
func section(t *testing.T, page, doc, from string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+from+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", page, from)
	}
	level := from[:strings.Index(from, " ")+1]
	var b strings.Builder
	fence := false
	for _, line := range strings.SplitAfter(rest, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(line, level) {
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

// consoleSteps are the steps of every ```console block of page (relative to
// the repository root) from the heading from on (the whole page when from
// is empty) to the page's next heading of the same level, in order.
func consoleSteps(t *testing.T, page, from string) []sessionStep {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", page))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(text)
	if from != "" {
		doc = section(t, page, doc, from)
	}
	var steps []sessionStep
	in := false
	for _, line := range strings.SplitAfter(doc, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```console":
			in = true
		case in && strings.TrimSpace(line) == "```":
			in = false
		case in && strings.HasPrefix(line, "$ "):
			steps = append(steps, sessionStep{command: strings.TrimSuffix(strings.TrimPrefix(line, "$ "), "\n")})
		case in && len(steps) > 0 && strings.HasSuffix(steps[len(steps)-1].command, "\\") && steps[len(steps)-1].want == "":
			last := &steps[len(steps)-1]
			last.command = strings.TrimSuffix(last.command, "\\") + " " + strings.TrimSpace(line)
		case in && len(steps) > 0:
			steps[len(steps)-1].want += line
		case in:
			t.Fatalf("%s: a console block's first line is not a $ command: %q", page, line)
		}
	}
	if len(steps) == 0 {
		t.Fatalf("%s (%s) has no ```console block", page, from)
	}
	return steps
}

// runSession runs steps in order in sh against s: `localhost:7411` in a
// command is s's address, `bin/leasehold` and `leasehold` are the binary
// under test (with LEASEHOLD_ADDR set to s, as the default address would
// reach `make run`'s sidecar). What a step prints, stdout and stderr as a
// terminal shows them, must be what the page shows, times, remaining ttls,
// event ids and generated owners aside.
func runSession(t *testing.T, page string, s *sidecar, steps []sessionStep) {
	t.Helper()
	for _, tool := range []string{"curl", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			missingTool(t, tool+" not found; CI needs it for the docs' sessions", tool+" not found (outside CI this skips): install it to run the docs' sessions")
		}
	}
	u, err := url.Parse(s.base)
	if err != nil {
		t.Fatal(err)
	}
	// A directory standing for the checkout: bin/leasehold as make run builds it.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(leaseholdBin, filepath.Join(dir, "bin", "leasehold")); err != nil {
		t.Fatal(err)
	}
	env := append(cleanEnv(), "LEASEHOLD_ADDR="+s.addr, "PATH="+filepath.Join(dir, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, st := range steps {
		line := strings.ReplaceAll(st.command, "localhost:7411", u.Host)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		cancel()
		got := string(out)
		if err != nil {
			code := -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if !strings.HasSuffix(got, "\n") && got != "" {
				got += "\n"
			}
			got += "# exit " + strconv.Itoa(code) + "\n"
		}
		if normalizeSession(got) != normalizeSession(st.want) {
			t.Errorf("%s: $ %s\nprints:\n%s\nthe page shows:\n%s", page, st.command, got, st.want)
		}
	}
}

var (
	sessionRules = []struct {
		re   *regexp.Regexp
		with string
	}{
		{stampRE, "TIME"},
		{regexp.MustCompile(`"ttl_remaining_ms":\d+`), `"ttl_remaining_ms":N`},
		{regexp.MustCompile(`for another [0-9hm.]+s`), "for another Ns"},
		{regexp.MustCompile(`expires_in=[0-9.a-zµ]+`), "expires_in=N"},
		{regexp.MustCompile(`\bin [0-9hms.]+ \(`), "in N ("},
		{regexp.MustCompile(`"(id|position)":\d+`), `"$1":N`},
		{regexp.MustCompile(`(owner|run_by)=[^ ]+#\d+#[0-9a-f]+`), "$1=GENERATED"},
		{regexp.MustCompile(`[ \t]+`), " "},
		{regexp.MustCompile(` +\n`), "\n"},
	}
)

// normalizeSession drops what changes from run to run, and the column
// widths it sets.
func normalizeSession(s string) string {
	for _, r := range sessionRules {
		s = r.re.ReplaceAllString(s, r.with)
	}
	return strings.TrimSpace(s)
}

// The README's quick start, on a fresh sidecar as `make run` serves it.
func TestREADMEQuickStart(t *testing.T) { runREADMESection(t, "## Quick start") }

// The README's scheduled job, on a fresh sidecar: one run, one skip.
func TestREADMEScheduledJobs(t *testing.T) { runREADMESection(t, "## Scheduled jobs") }

// runREADMESection runs the console session under the README's heading on
// a fresh sidecar, as `make run` serves it.
func runREADMESection(t *testing.T, heading string) {
	t.Parallel()
	steps := consoleSteps(t, "README.md", heading)
	s := startSidecar(t, "sqlite:"+filepath.Join(t.TempDir(), "leasehold.db"))
	s.waitReady()
	runSession(t, "README.md", s, steps)
}

// docs/http-api.md's sessions, every one in the page's order, on one fresh
// sidecar.
func TestDocsHTTPSession(t *testing.T) {
	t.Parallel()
	steps := consoleSteps(t, "docs/http-api.md", "")
	if len(steps) < 10 {
		t.Fatalf("docs/http-api.md has %d console steps; it should walk through the API", len(steps))
	}
	s := startSidecar(t, "sqlite:"+filepath.Join(t.TempDir(), "leasehold.db"))
	s.waitReady()
	runSession(t, "docs/http-api.md", s, steps)
}

// docs/provider.md's fleet configuration, applied with the provider as the
// page installs it, then the page's declared-task sessions in order on a
// fresh sidecar over the same store.
func TestDocsProviderSession(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../docs/provider.md")
	if err != nil {
		t.Fatal(err)
	}
	var cfg string
	for _, block := range strings.Split(string(text), "```hcl\n")[1:] {
		if block, _, _ = strings.Cut(block, "```"); strings.HasPrefix(block, "terraform {") {
			cfg = block
		}
	}
	if cfg == "" {
		t.Fatal("docs/provider.md has no ```hcl block starting terraform {")
	}
	steps := consoleSteps(t, "docs/provider.md", "## Declared tasks")
	store := "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db")
	w := newWorkspace(t, store)
	if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	w.run([]int{0}, "init")
	w.run([]int{0}, "apply", "-auto-approve")
	s := startSidecar(t, store)
	s.waitReady()
	runSession(t, "docs/provider.md", s, steps)
}
