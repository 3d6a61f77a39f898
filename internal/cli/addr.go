package cli

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// AddrRule is what a sidecar address (--addr, LEASEHOLD_ADDR) must be, as
// the error of ParseAddr states it.
const AddrRule = "must be the sidecar's base URL: http:// or https://, a host, a port from 1 to 65535 when given, and no path, query or fragment, as in http://" + DefaultListen +
	"; or unix:PATH for a sidecar on a Unix socket"

// ParseAddr checks the address of a sidecar, the --addr of `leasehold run`
// and of the operator commands, and returns the endpoint that reaches it
// (endpoint.Parse of an address this rule admits). Its error says what
// is wrong, then AddrRule; it quotes no part of the address that may be a
// credential, so a caller prints the address with RedactAddr.
//
// Each kind of address is one case of the scheme switch: a new one (a Unix
// socket, say) is a case of its own with its own rule.
func ParseAddr(raw string) (endpoint.Endpoint, error) {
	if err := checkAddr(raw); err != nil {
		return endpoint.Endpoint{}, err
	}
	return endpoint.Parse(raw)
}

// checkAddr is ParseAddr's rule.
func checkAddr(raw string) error {
	if path, ok := endpoint.SocketPath(raw); ok {
		if err := endpoint.CheckSocketPath(path); err != nil {
			return addrError("%v", err)
		}
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the whole address, password and all
		}
		if !strings.Contains(raw, "://") {
			return addrError("it has no http:// or https://")
		}
		return addrError("%v", err)
	}
	switch u.Scheme {
	case "http", "https":
		return checkHTTPAddr(raw, u)
	case "":
		return addrError("it has no http:// or https://")
	default:
		if u.Opaque != "" {
			// localhost:7411 parses as the scheme "localhost".
			return addrError("it has no http:// or https://")
		}
		return addrError("scheme %q is not http or https", u.Scheme)
	}
}

// checkHTTPAddr checks the parts of an http(s) address past its scheme.
func checkHTTPAddr(raw string, u *url.URL) error {
	switch {
	case u.Opaque != "":
		return addrError("it has no // before the host")
	case u.Hostname() == "":
		return addrError("it names no host")
	case strings.HasSuffix(u.Host, ":"):
		return addrError("its port is empty")
	}
	if p := u.Port(); p != "" {
		// url.Parse lets only digits through; their value is checked here.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return addrError("port %s is out of range", p)
		}
	}
	switch {
	case u.Path != "" && u.Path != "/":
		return addrError("it has a path (%s): the API is at the sidecar's root", u.EscapedPath())
	case u.RawQuery != "" || u.ForceQuery:
		return addrError("it has a query")
	case strings.Contains(raw, "#"): // url.Parse cuts the fragment first, so any '#' starts one
		return addrError("it has a fragment")
	}
	return nil
}

func addrError(format string, a ...any) error {
	return fmt.Errorf(format+"; "+AddrRule, a...)
}

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
