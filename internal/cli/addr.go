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
