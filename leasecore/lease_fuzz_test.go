package leasecore

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// Fuzz targets for the input rules every store and the sidecar share. Their
// seeds run as ordinary tests; `make fuzz` runs each for FUZZTIME.

func FuzzValidateTask(f *testing.F) {
	for _, s := range []string{
		"", "a", "nightly-report", "billing/nightly", "leasehold:prune", "a@b:c_d.e-f",
		".", "..", "a/../b", "a/./b", "/a", "a/", "a//b", "...", ".hidden", "a..b",
		"a b", "a%2Fb", "é", "a\x00b", "\xff", strings.Repeat("t", 200), strings.Repeat("t", 201),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, task string) {
		err := ValidateTask(task)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Field != "Task" || ve.Rule == "" {
				t.Fatalf("ValidateTask(%q) = %v, want a *ValidationError for task with a rule", task, err)
			}
			return
		}
		if task == "" || len(task) > MaxTaskLen {
			t.Fatalf("ValidateTask accepts %q (%d bytes), outside 1..%d", task, len(task), MaxTaskLen)
		}
		for i := 0; i < len(task); i++ {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/@-", rune(task[i])) {
				t.Fatalf("ValidateTask accepts %q, whose byte %d (%q) is outside the charset", task, i, task[i])
			}
		}
		for _, seg := range strings.Split(task, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("ValidateTask accepts %q, which has the segment %q", task, seg)
			}
		}
	})
}

// ValidateOwner accepts exactly the strings of 1 to 256 printable runes of
// valid UTF-8.
func FuzzValidateOwner(f *testing.F) {
	for _, s := range []string{
		"", "w", "web-1#4242#k3j9", "'; DROP TABLE leases; --", "é", "😀", "a\u0007", "a\n", "\u00a0",
		"a\xff", "\xc0\xaf", "\ufffd", "\u200b", strings.Repeat("o", 256), strings.Repeat("o", 257),
		strings.Repeat("é", 256), strings.Repeat("é", 257),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, owner string) {
		want := owner != "" && utf8.ValidString(owner) && utf8.RuneCountInString(owner) <= MaxOwnerLen
		if want {
			for _, r := range owner {
				want = want && unicode.IsPrint(r)
			}
		}
		err := ValidateOwner(owner)
		if (err == nil) != want {
			t.Fatalf("ValidateOwner(%q) = %v; want accepted %v", owner, err, want)
		}
		var ve *ValidationError
		if err != nil && (!errors.As(err, &ve) || ve.Field != "Owner") {
			t.Fatalf("ValidateOwner(%q) = %v, want a *ValidationError for owner", owner, err)
		}
	})
}

// validateNote accepts exactly valid UTF-8 without NUL of at most 1024 bytes.
func FuzzValidateNote(f *testing.F) {
	for _, s := range []string{
		"", "pruning entries", "a\x00b", "a\xff", "\ud7ff", "été", "\x7f\x01",
		strings.Repeat("n", 1024), strings.Repeat("n", 1025), strings.Repeat("é", 512), strings.Repeat("é", 513),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, note string) {
		want := len(note) <= MaxNoteBytes && utf8.ValidString(note) && !strings.ContainsRune(note, 0)
		err := validateNote(note)
		if (err == nil) != want {
			t.Fatalf("validateNote(%q) = %v; want accepted %v", note, err, want)
		}
		// A claim applies the same rules, each under its field's name.
		p := ClaimParams{Task: "t", Owner: "o", Note: note}
		if cerr := p.Validate(); (cerr == nil) != want {
			t.Fatalf("ClaimParams{Note: %q}.Validate() = %v; want accepted %v", note, cerr, want)
		}
	})
}
