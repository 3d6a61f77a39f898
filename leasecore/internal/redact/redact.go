// Package redact masks credentials in store URLs, connection strings and
// any text that may quote them (driver errors, log lines), whatever their
// shape: the password of a URL's userinfo (one host or several, parsed or
// not), a password, sslpassword or PGPASSWORD given as a URL query
// parameter (its key percent-encoded or not) or in a key=value connection
// string (quoted or not, escaped or not, any case).
//
// It works on patterns, not on a parse, so that a URL that does not parse
// (the one most likely to be logged, in the error that says so) is masked
// too. Where the text is ambiguous it masks too much rather than too
// little:
//
//   - A URL's userinfo ends at the last '@' before the first '/' or space
//     after "scheme://" (pgx reads a '?' or '#' before an '@' as part of
//     the userinfo), so a password may hold any character but those two
//     raw, '@', '?', '#' and quotes included; its password starts after
//     the first ':'. Where the path or query holds an '@' too, the host
//     after the chosen '@' must be a plain host list, or the next rule
//     applies.
//   - A password that holds a raw '/' or space leaves no such '@'; it is
//     masked up to the last '@' of its line (up to where another URL
//     starts) or, when the URL is quoted ("…", '…' or `…`, as errors
//     quote it), of the quoted text.
//   - A query value runs to the next '&' or space, or to the quote that
//     closes a quoted URL; a key=value value runs to the next unescaped
//     space, or its closing quote when quoted (libpq's \' and \\ escapes).
package redact

import (
	"regexp"
	"strings"
)

// Mask replaces every credential.
const Mask = "xxxxx"

var (
	// queryParam is a key=value pair of a query string outside a URL the
	// scheme pass recognised; see maskQuery for the keys it masks.
	queryParam = regexp.MustCompile("[?&]([^=&\\s'\"`]*)=([^&\\s'\"`]*)")
	// kvPassword is a password in a key=value connection string or an
	// environment assignment: password=secret, password = 'se cret',
	// password=se\ cret, PGPASSWORD=secret. Group 2 is the value: quoted
	// with libpq's backslash escapes, or unquoted up to an unescaped space.
	//
	// Any run of backslashes escapes the character after it: a text that
	// Go quoted (%q) doubles libpq's backslashes, so a space after two may
	// be an escaped one. Reading it so masks a word or two too many when a
	// password ends with a backslash.
	kvPassword = regexp.MustCompile("(?i)((?:^|[\\s'\"`(,;:])[a-z_]*password\\s*=\\s*)('(?:[^'\\\\]|\\\\+.?)*'?|(?:[^\\s\\\\]|\\\\+.?)*)")
	// hostList is what may follow a userinfo in an authority: no '@', quote
	// or backslash (pgx takes any text as a port, so no finer rule holds).
	hostList = regexp.MustCompile("^[^@'\"`\\\\]*$")
	// strictHostList is a host list as a well-formed URL writes it: names
	// or addresses, [IPv6], numeric ports.
	strictHostList = regexp.MustCompile(`^(?:[A-Za-z0-9._~%-]*|\[[0-9A-Za-z:.%]*\])(?::[0-9]+)?(?:,(?:[A-Za-z0-9._~%-]*|\[[0-9A-Za-z:.%]*\])(?::[0-9]+)?)*$`)
	// scheme is the start of a URL.
	scheme = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.\-]*://`)
)

// String returns s with every credential it can recognise replaced by Mask.
func String(s string) string {
	s = urls(s)
	s = replaceGroup(s, queryParam, func(m []string) bool { return secretKey(m[1]) }, 2)
	s = kvPasswords(s)
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

const space = " \t\r\n\v\f"

// urls masks the userinfo password and the password-like query values of
// every URL in s.
func urls(s string) string {
	var b strings.Builder
	for {
		loc := scheme.FindStringIndex(s)
		if loc == nil {
			b.WriteString(s)
			return b.String()
		}
		quote := byte(0)
		if loc[0] > 0 && isQuote(s[loc[0]-1]) {
			quote = s[loc[0]-1]
		}
		b.WriteString(s[:loc[1]])
		rest := s[loc[1]:]
		if n := passwordSpan(rest, quote); n.end > n.start {
			b.WriteString(rest[:n.start])
			b.WriteString(Mask)
			rest = rest[n.end:]
		}
		// The rest of the URL: to the first space or the quote that
		// closes it.
		tok := rest
		if i := strings.IndexAny(tok, space); i >= 0 {
			tok = tok[:i]
		}
		if quote != 0 {
			if i := strings.LastIndexByte(tok, quote); i >= 0 {
				tok = tok[:i]
			}
		}
		if i := strings.IndexByte(tok, '?'); i >= 0 {
			b.WriteString(tok[:i+1])
			b.WriteString(maskQuery(tok[i+1:]))
		} else {
			b.WriteString(tok)
		}
		s = rest[len(tok):]
	}
}

func isQuote(c byte) bool { return c == '\'' || c == '"' || c == '`' }

// maskQuery masks the value of every parameter of query whose key is
// password-like (see secretKey); a value runs to the next '&'.
func maskQuery(query string) string {
	pairs := strings.Split(query, "&")
	for i, p := range pairs {
		if k, _, ok := strings.Cut(p, "="); ok && secretKey(k) {
			pairs[i] = k + "=" + Mask
		}
	}
	return strings.Join(pairs, "&")
}

// secretKey reports whether a query key, percent-decoded as pgx decodes
// it (?%70assword= is a password), names a credential: any key holding
// "pass" in any case (password, sslpassword, and whatever else may be one).
func secretKey(raw string) bool {
	return strings.Contains(strings.ToLower(percentDecode(raw)), "pass")
}

// percentDecode decodes every valid %XX in s and keeps anything else as is.
func percentDecode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}

type span struct{ start, end int }

// passwordSpan finds the userinfo password in rest, the text after a
// URL's "scheme://": from after the first ':' of the userinfo to the '@'
// that ends it. quote is the quote character just before the URL (0 if
// none): the URL is quoted inside a larger text.
func passwordSpan(rest string, quote byte) span {
	// A well-formed URL: the userinfo ends at the last '@' before the
	// first '/' or space. (net/url ends the authority at a '?' or '#' too,
	// but pgx, like libpq, reads an '@' after them as ending the userinfo,
	// so a password may hold them.) Its password starts after the first
	// ':' of the userinfo.
	region := rest
	if i := strings.IndexAny(rest, "/"+space); i >= 0 {
		region = rest[:i]
	}
	// An '@' after the region makes it ambiguous: in the path (a database
	// name rarely holds one) or in a query key it is taken as stranded by
	// a raw '/' in the password; in a query value, the host after the
	// userinfo must be one a well-formed URL writes.
	tok := rest
	if i := strings.IndexAny(rest, space); i >= 0 {
		tok = rest[:i]
	}
	after := tok[len(region):]
	path, query, _ := strings.Cut(after, "?")
	laterAt := strings.IndexByte(after, '@') >= 0
	if at := strings.LastIndexByte(region, '@'); at >= 0 && !strings.Contains(path, "@") && !atInKey(query) {
		host := region[at+1:]
		if i := strings.IndexAny(host, "?#"); i >= 0 {
			host = host[:i]
		}
		if hostList.MatchString(host) && (!laterAt || host != "" && strictHostList.MatchString(host)) {
			if colon := strings.IndexByte(region[:at], ':'); colon >= 0 {
				return span{colon + 1, at}
			}
			return span{}
		}
	}
	// A malformed one (no '@' before the first '/', or one followed by
	// what is no host list): the password may hold '/', '?', '#' or a space, so
	// everything up to the last '@' of the line (or of the quoted text)
	// may be password. Its user name ends at the first ':' before a '/' or
	// a space (pgx reads a '?' or '#' before the '@' as userinfo).
	user := rest
	if i := strings.IndexAny(rest, "/"+space); i >= 0 {
		user = rest[:i]
	}
	colon := strings.IndexByte(user, ':')
	if colon < 0 {
		return span{}
	}
	// The line ends at a line break, or where another URL starts.
	line := rest
	if i := strings.IndexAny(rest, "\r\n"); i >= 0 {
		line = rest[:i]
	}
	for _, loc := range scheme.FindAllStringIndex(line, -1) {
		if startsWord(line, loc[0]) {
			line = line[:loc[0]]
			break
		}
	}
	if quote != 0 {
		// Quoted: the URL ends at a quote that closes the text, the last
		// one before which an '@' is followed by a host list (the
		// password may hold a quote). If none holds an '@', the URL has
		// no password; if some do but with no host list after it, the
		// line decides.
		ends := closingQuotes(line, quote)
		if len(ends) > 0 && ends[0] < colon {
			// The quoted URL ended before the ':': it has no password.
			return span{}
		}
		anyAt := false
		for i := len(ends) - 1; i >= 0; i-- {
			end := ends[i]
			if at := strings.LastIndexByte(line[:end], '@'); at > colon {
				if hostFollows(line[:end], at) {
					return span{colon + 1, at}
				}
				anyAt = true
			}
		}
		if len(ends) > 0 && !anyAt {
			return span{}
		}
	}
	if at := strings.LastIndexByte(line, '@'); at > colon {
		return span{colon + 1, at}
	}
	return span{}
}

// startsWord reports whether line[i:] starts a word: it follows a space, or
// an opening quote or parenthesis that follows one.
func startsWord(line string, i int) bool {
	isSpace := func(j int) bool { return j < 0 || strings.IndexByte(space, line[j]) >= 0 }
	if i == 0 || isSpace(i-1) {
		return true
	}
	return strings.IndexByte("'\"`(", line[i-1]) >= 0 && isSpace(i-2)
}

// atInKey reports whether an '@' of query is in a parameter's key (before
// its '='), where no well-formed URL puts one: it was stranded there by a
// raw '/' in a password.
func atInKey(query string) bool {
	for p := range strings.SplitSeq(query, "&") {
		if k, _, _ := strings.Cut(p, "="); strings.Contains(k, "@") {
			return true
		}
	}
	return false
}

// hostFollows reports whether the '@' at s[at] is followed by a non-empty
// host list, up to the end of the authority.
func hostFollows(s string, at int) bool {
	host := s[at+1:]
	if i := strings.IndexAny(host, "/?#"+space); i >= 0 {
		host = host[:i]
	}
	return host != "" && hostList.MatchString(host)
}

// closingQuotes are the indexes of the quotes in line that may end a
// quoted text: not escaped by a backslash, and followed by the end of the
// line, a space or punctuation.
func closingQuotes(line string, quote byte) []int {
	var ends []int
	for i := 1; i < len(line); i++ {
		if line[i] != quote || line[i-1] == '\\' {
			continue
		}
		if i+1 == len(line) || strings.IndexByte(space+":,;)]}.", line[i+1]) >= 0 {
			ends = append(ends, i)
		}
	}
	return ends
}

// kvPasswords masks the value of every password=… in s. An unquoted value
// runs to the next unescaped space; when the whole key=value text is
// quoted, the quote that closes it (and the punctuation after it) is kept.
func kvPasswords(s string) string {
	var b strings.Builder
	last := 0
	for _, m := range kvPassword.FindAllStringSubmatchIndex(s, -1) {
		vStart, vEnd := m[4], m[5]
		val := s[vStart:vEnd]
		if val != "" && val[0] != '\'' {
			// Is the key quoted by a quote this value ends with?
			lineStart := strings.LastIndexAny(s[:m[2]], "\r\n") + 1
			trimmed := strings.TrimRight(val, ":,;)].")
			if n := len(trimmed); n > 0 && isQuote(trimmed[n-1]) && (n < 2 || trimmed[n-2] != '\\') &&
				strings.IndexByte(s[lineStart:m[2]+1], trimmed[n-1]) >= 0 {
				vEnd = vStart + n - 1
			}
		}
		b.WriteString(s[last:vStart])
		b.WriteString(Mask)
		last = vEnd
	}
	b.WriteString(s[last:])
	return b.String()
}

// replaceGroup replaces group g of every match of re in s for which ok
// holds with Mask.
func replaceGroup(s string, re *regexp.Regexp, ok func([]string) bool, g int) string {
	var b strings.Builder
	last := 0
	for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
		groups := make([]string, len(m)/2)
		for i := range groups {
			if m[2*i] >= 0 {
				groups[i] = s[m[2*i]:m[2*i+1]]
			}
		}
		if !ok(groups) {
			continue
		}
		b.WriteString(s[last:m[2*g]])
		b.WriteString(Mask)
		last = m[2*g+1]
	}
	b.WriteString(s[last:])
	return b.String()
}
