package sidecar

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/leasehold/leasehold/sidecar/api"
)

// Two checks keep web pages from driving a sidecar, before any route runs.
//
// Host names. A page on attacker.example can make its own name resolve to
// 127.0.0.1 (DNS rebinding) and then call the sidecar as a same-origin
// page: the browser sends "Host: attacker.example:7411". So the sidecar
// answers only requests whose Host it is configured for: loopback names,
// the name it listens on, names given with --allow-host, and IP literals
// (rebinding needs a name the attacker controls; a page whose origin is an
// IP address is not served by the attacker under that address). Every path
// is checked, the console's files and /metrics included.
//
// Cross-site requests. A page on another origin can still send requests to
// http://127.0.0.1:7411 without reading the answers: an <img>, an <iframe>,
// a form, a no-cors fetch or an EventSource. A GET of the keepalive route
// holds a lease for as long as the frame stays open, and a claim by form
// burns a fencing token, so no /v1 route is left to another origin's page.
// Browsers say where a request comes from in Sec-Fetch-Site (and Origin);
// net/http's CrossOriginProtection reads them, with the Origin fallback for
// browsers that send no Sec-Fetch-Site. It lets safe methods through,
// because for most servers a GET changes nothing; here every /v1 request is
// checked as an unsafe one would be, since no /v1 route is meant for a page
// of another origin (the console is same-origin). Clients that are not
// browsers (curl, the CLI, the Python and TypeScript clients) send neither
// header and pass.

// problem types of the two refusals.
const (
	problemHostNotAllowed = api.ProblemHostNotAllowed
	problemCrossSite      = api.ProblemCrossSite
)

// HostPolicy says which Host header values a sidecar answers.
type HostPolicy struct {
	any      bool
	names    map[string]bool
	suffixes []string // from "*.example": ".example"
}

// NewHostPolicy returns the policy of a sidecar that listens on listen
// (host:port) and was given allow (--allow-host: names, "*.suffix"
// patterns, or "*" for any Host). Loopback names and IP literals are
// always allowed. It refuses a pattern it cannot read, naming it.
func NewHostPolicy(listen string, allow []string) (HostPolicy, error) {
	p := HostPolicy{names: map[string]bool{"localhost": true}, suffixes: []string{".localhost"}}
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" && net.ParseIP(host) == nil {
		p.names[normalHost(host)] = true
	}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
			continue
		case a == "*":
			p.any = true
		case strings.HasPrefix(a, "*."):
			domain := normalHost(a[2:])
			if domain == "" || strings.ContainsAny(domain, "*:/ ") {
				return p, fmt.Errorf("--allow-host %q: a pattern is *.DOMAIN, as in *.svc.cluster.local", a)
			}
			p.suffixes = append(p.suffixes, "."+domain)
		default:
			if strings.ContainsAny(a, "*:/ ") {
				return p, fmt.Errorf("--allow-host %q: must be a host name without port or scheme (as in leasehold.default.svc), *.DOMAIN, or *", a)
			}
			p.names[normalHost(a)] = true
		}
	}
	return p, nil
}

// normalHost lower-cases a host name and drops a final dot.
func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// Allows reports whether a request's Host header (with or without port) is
// one this sidecar answers.
func (p HostPolicy) Allows(hostport string) bool {
	if p.any || hostport == "" { // HTTP/1.0 without Host: no browser sends that
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if net.ParseIP(host) != nil {
		return true
	}
	host = normalHost(host)
	if p.names[host] {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// guardOrigin refuses, before anything else runs, a request whose Host the
// policy does not allow (421) and a cross-site browser request to /v1 (403),
// counting each refusal. A nil policy checks no Host (a Unix socket, which
// no browser reaches).
func guardOrigin(next http.Handler, hosts *HostPolicy, m *metrics) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hosts != nil && !hosts.Allows(r.Host) {
			m.refused(refusedHost)
			writeProblemHTTP(w, newProblem(http.StatusMisdirectedRequest, problemHostNotAllowed, "Host not allowed",
				fmt.Sprintf("this sidecar does not answer for the host %q: it answers loopback names, IP addresses and the names given with --allow-host", r.Host)))
			return
		}
		if isAPIPath(r.URL.Path) {
			// CrossOriginProtection lets GET, HEAD and OPTIONS through; a
			// shallow copy with an unsafe method gets those the full
			// check. Only the method differs, so nothing it reads is lost.
			probe := r
			if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions {
				c := *r
				c.Method = http.MethodPost
				probe = &c
			}
			if err := cop.Check(probe); err != nil {
				m.refused(refusedCrossSite)
				writeProblemHTTP(w, newProblem(http.StatusForbidden, problemCrossSite, "Cross-site request",
					"this sidecar refuses requests that a page of another origin makes a browser send (Sec-Fetch-Site / Origin); "+
						"call it from a program, or from the console this sidecar serves at /ui/"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// isAPIPath says whether a path is /v1 or below it.
func isAPIPath(path string) bool { return path == "/v1" || strings.HasPrefix(path, "/v1/") }
