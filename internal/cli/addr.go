package cli

import (
	"net/url"
	"strings"

	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// addrMask replaces a masked credential, as url.URL.Redacted masks one.
const addrMask = "xxxxx"

// RedactAddr returns a sidecar address fit to print: the password of its
// userinfo masked by url.URL.Redacted, and any password-like query value by
// storeurl.Redact. An address that has no URL authority to parse
// ("user:pw@host:7411" parses as the scheme "user", "http://u:pw@h:x" not
// at all) is masked up to its last '@', user name included, since no parse
// says where its password ends.
func RedactAddr(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Opaque == "" {
		return storeurl.Redact(u.Redacted())
	}
	prefix, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		prefix, rest = raw[:i+3], raw[i+3:]
	}
	if j := strings.LastIndexByte(rest, '@'); j >= 0 {
		return prefix + addrMask + rest[j:]
	}
	return storeurl.Redact(raw)
}

// TokenHint is what to do about a sidecar's 401, for a command that reads
// its token from --token-file (or LEASEHOLD_TOKEN_FILE): give one when
// none was given, else check the one given.
func TokenHint(tokenGiven bool) string {
	if tokenGiven {
		return "the sidecar does not know the token in --token-file (LEASEHOLD_TOKEN_FILE): check that it is the sidecar's, or a credential's it accepts"
	}
	return "give the file that holds the token with --token-file (or LEASEHOLD_TOKEN_FILE)"
}
