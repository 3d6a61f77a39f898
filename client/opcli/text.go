package opcli

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// What a sidecar or a store answers (tasks, owners, notes, details,
// times) is not trusted to be fit for a terminal: a note can carry an
// escape sequence that retitles the window, moves the cursor or hides a
// line, or a newline that forges one. The human output prints such strings
// through display, error messages go through escapeControls, and --json
// through jsonText.

// display returns s as the human output prints a string it was answered:
// printable characters (any script, spaces included) as they are, a
// backslash doubled, and every other character as Go writes it in a quoted
// string: \n, \t, \x1b, \x7f, \u009b, \u202e; an invalid byte as \xff.
// Doubling the backslash keeps the rendering unambiguous: a note that holds
// the four characters \x1b prints as \\x1b.
func display(s string) string { return escape(s, true) }

// escapeControls returns s with every character that is not printable
// escaped as display escapes it, but its backslashes kept: an error message
// quotes values with %q, whose backslashes are escapes already.
func escapeControls(s string) string { return escape(s, false) }

func escape(s string, backslash bool) string {
	if plain(s, backslash) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' && backslash:
			b.WriteString(`\\`)
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r) // '\x1b', '\n', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// plain reports whether escape would leave s as it is.
func plain(s string, backslash bool) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c >= 0x7f || c == '\\' && backslash {
			return plainRunes(s, backslash)
		}
	}
	return true
}

func plainRunes(s string, backslash bool) bool {
	for _, r := range s { // an invalid byte is utf8.RuneError, not printable here
		if r == utf8.RuneError || r == '\\' && backslash || !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// jsonText returns the JSON document doc (as encoding/json wrote it) with
// every character inside its strings that is not printable written as a
// \u escape. encoding/json escapes the characters below U+0020, but writes
// DEL, the C1 controls (U+0080 to U+009F, where U+009B starts a control
// sequence as ESC [ does) and the bidirectional overrides as they are. The
// document decodes to the same values. Outside strings encoding/json writes
// only printable ASCII and the newlines of its indentation, which are kept.
func jsonText(doc []byte) []byte {
	out := make([]byte, 0, len(doc))
	for i := 0; i < len(doc); {
		r, n := utf8.DecodeRune(doc[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...) // encoding/json writes none; as it would
		case r == '\n' || strconv.IsPrint(r):
			out = append(out, doc[i:i+n]...)
		default:
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
				out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
			} else {
				out = fmt.Appendf(out, `\u%04x`, r)
			}
		}
		i += n
	}
	return out
}
