package endpoint

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// AddrRule is what a sidecar address (--addr, LEASEHOLD_ADDR) must be, as
// the error of ParseAddr states it.
const AddrRule = "must be the sidecar's base URL: http:// or https://, a host, a port from 1 to 65535 when given, and no path, query or fragment, as in " + Example +
	"; or unix:PATH for a sidecar on a Unix socket"

// ParseAddr checks the address of a sidecar, the --addr of `leasehold run`
// and of the operator commands, and returns the endpoint that reaches it
// (endpoint.Parse of an address this rule admits). Its error says what
// is wrong, then AddrRule; it quotes no part of the address that may be a
// credential, so a caller prints the address with Endpoint.Redacted (an
// address that did not parse, with cli.RedactAddr).
//
// Each kind of address is one case of the scheme switch: a new one (a Unix
// socket, say) is a case of its own with its own rule.
func ParseAddr(raw string) (Endpoint, error) {
	if err := checkAddr(raw); err != nil {
		return Endpoint{}, err
	}
	return Parse(raw)
}

// checkAddr is ParseAddr's rule.
func checkAddr(raw string) error {
	if path, ok := SocketPath(raw); ok {
		if err := CheckSocketPath(path); err != nil {
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
