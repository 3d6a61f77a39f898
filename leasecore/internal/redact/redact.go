// Package redact masks credentials in store URLs, connection strings and
// any text that may quote them (driver errors, log lines), whatever their
// shape: the password of a URL's userinfo (one host or several, parsed or
// not), a password, sslpassword or PGPASSWORD given as a URL query
// parameter or in a key=value connection string (quoted or not, any case).
//
// It works on patterns, not on a parse, so that a URL that does not parse
// (the one most likely to be logged, in the error that says so) is masked
// too. Where the text is ambiguous it masks too much rather than too
// little: a userinfo password that holds a raw '/', '?' or space is masked
// up to the last '@' on its line.
package redact

import (
	"regexp"
	"strings"
)

// Mask replaces every credential.
const Mask = "xxxxx"

var (
	// queryPassword is a password-like query parameter: ?password=…,
	// &sslpassword=… (the key percent-encoded too), its value up to the
	// next parameter.
	queryPassword = regexp.MustCompile("(?i)([?&][a-z_]*pass(?:w|%77)ord=)[^&#\\s'\"`]*")
	// kvPassword is a password in a key=value connection string or an
	// environment assignment: password=secret, password = 'se cret',
	// PGPASSWORD=secret.
	kvPassword = regexp.MustCompile("(?i)((?:^|[\\s'\"`(,;:])[a-z_]*password\\s*=\\s*)(?:'(?:[^'\\\\]|\\\\.)*'?|[^\\s'\"`]*)")
	// scheme is the start of a URL.
	scheme = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.\-]*://`)
)

// String returns s with every credential it can recognise replaced by Mask.
func String(s string) string {
	s = userinfo(s)
	s = queryPassword.ReplaceAllString(s, "${1}"+Mask)
	s = kvPassword.ReplaceAllString(s, "${1}"+Mask)
	return s
}

// Error is err with its text passed through String. It unwraps to err, so
// errors.Is and errors.As see what they saw before, but a log line or an
// answer that prints it shows no credential.
func Error(err error) error {
	if err == nil {
		return nil
	}
	return &redacted{err: err, msg: String(err.Error())}
}

type redacted struct {
	err error
	msg string
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// userinfo masks the password of every URL in s that has one.
func userinfo(s string) string {
	var b strings.Builder
	for {
		loc := scheme.FindStringIndex(s)
		if loc == nil {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:loc[1]])
		rest := s[loc[1]:]
		n := passwordSpan(rest)
		if n.end > n.start {
			b.WriteString(rest[:n.start])
			b.WriteString(Mask)
			rest = rest[n.end:]
		}
		s = rest
	}
}

type span struct{ start, end int }

// passwordSpan finds the userinfo password in rest, the text after a
// URL's "scheme://": from after the user's ':' to the '@' that ends the
// userinfo.
func passwordSpan(rest string) span {
	// The user name: up to ':' (a password follows) or anything else.
	colon := strings.IndexAny(rest, ":/?#@ \t\r\n'\"`")
	if colon < 0 || rest[colon] != ':' {
		return span{}
	}
	// The whole candidate: up to the end of the line or a quote that may
	// close the text quoting the URL.
	line := rest
	if i := strings.IndexAny(rest, "\r\n'\"`"); i >= 0 {
		line = rest[:i]
	}
	// A well-formed URL: the authority ends at the first '/', '?', '#' or
	// space, and its userinfo at the last '@' in it (as net/url reads it).
	auth := line
	if i := strings.IndexAny(line, "/?# \t"); i >= 0 {
		auth = line[:i]
	}
	if at := strings.LastIndexByte(auth, '@'); at > colon {
		return span{colon + 1, at}
	}
	// A malformed one: the password may hold '/', '?', '#' or a space, so
	// everything up to the last '@' of the line may be password.
	if at := strings.LastIndexByte(line, '@'); at > colon {
		return span{colon + 1, at}
	}
	return span{}
}
