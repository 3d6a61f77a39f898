package opcli

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// display escapes what a terminal would act on, as Go quotes it, keeps any
// printable character, and doubles a backslash so that the result reads
// one way only.
func TestDisplay(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                        "",
		"weekly-report":           "weekly-report",
		"two words":               "two words",
		"café 日本 ✓ 🙂":             "café 日本 ✓ 🙂",
		"\x1b]0;pwned\x07":        `\x1b]0;pwned\a`,
		"\x1b[2J\x1b[H":           `\x1b[2J\x1b[H`,
		"line\nforged line":       `line\nforged line`,
		"cr\roverwrite":           `cr\roverwrite`,
		"tab\there":               `tab\there`,
		"del\x7f":                 `del\x7f`,
		"c1 \u009b31m csi":        `c1 \u009b31m csi`,
		"bidi \u202eexe.txt":      `bidi \u202eexe.txt`,
		"line sep\u2028":          `line sep\u2028`,
		"zero\u200bwidth":         `zero\u200bwidth`,
		"tag \U000e0041":          `tag \U000e0041`,
		`a literal \x1b`:          `a literal \\x1b`,
		`C:\dir`:                  `C:\\dir`,
		"bad \xff byte":           `bad \xff byte`,
		"replacement \ufffd kept": "replacement \ufffd kept",
	} {
		if got := display(in); got != want {
			t.Errorf("display(%q) = %q, want %q", in, got, want)
		}
		// escapeControls escapes the same, but keeps backslashes.
		if got, want := escapeControls(in), strings.ReplaceAll(display(in), `\\`, `\`); !strings.Contains(in, `\`) && got != want {
			t.Errorf("escapeControls(%q) = %q, want %q", in, got, want)
		}
	}
	if got := escapeControls(`task "a\x01" ` + "\x1b[31m"); got != `task "a\x01" \x1b[31m` {
		t.Errorf("escapeControls kept no backslash as it was: %q", got)
	}
}

// jsonText leaves a document that decodes to the same values, with no
// character that is not printable but the newlines of its indentation.
func TestJSONText(t *testing.T) {
	t.Parallel()
	note := "\x1b]0;pwned\x07\nforged\u009b31m\x7f\u202e\u2028\U000e0041 café 🙂 \\ \"q\""
	doc, err := json.MarshalIndent(map[string]any{"note": note, "n": 1, "list": []string{"\x1b"}}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out := jsonText(doc)
	var back map[string]any
	if err := json.Unmarshal(out, &back); err != nil || back["note"] != note || back["list"].([]any)[0] != "\x1b" {
		t.Fatalf("jsonText changed the values: %v, %q", err, out)
	}
	if !utf8.Valid(out) {
		t.Fatalf("jsonText wrote invalid UTF-8: %q", out)
	}
	for _, r := range string(out) {
		if r != '\n' && !isPrintable(r) {
			t.Errorf("jsonText left %U in %q", r, out)
		}
	}
	if strings.Count(string(out), "\n") != strings.Count(string(doc), "\n") {
		t.Errorf("jsonText changed the lines: %q", out)
	}
}

func isPrintable(r rune) bool { return display(string(r)) == string(r) || r == '\\' }

func TestMillisText(t *testing.T) {
	for ms, want := range map[int64]string{
		0: "0s", 1: "1ms", 12: "12ms", 999: "999ms", 1000: "1s", 1234: "1.2s",
		9_960: "10s", 10_400: "10s", 90_000: "1m30s", 86_400_000: "24h0m0s",
	} {
		if got := millisText(ms); got != want {
			t.Errorf("millisText(%d) = %q, want %q", ms, got, want)
		}
	}
}
