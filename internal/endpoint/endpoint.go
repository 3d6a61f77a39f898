// Package endpoint reads a sidecar's address the way leasehold's clients
// are given it (--addr, LEASEHOLD_ADDR), and the bearer token they present
// (--token-file, LEASEHOLD_TOKEN_FILE): the base URL of its HTTP API,
// http://HOST:PORT or https://HOST:PORT, or unix:PATH for a sidecar serving
// on a Unix socket (`leasehold serve --listen unix:PATH`). The spelling
// mirrors the store's sqlite:PATH: unix:///abs/path and unix://rel read as
// paths too.
//
// An Endpoint gives the URL each request is made against and an
// http.Transport that reaches the sidecar: for a socket, one that dials the
// socket whatever host the URL names. Requests to a socket go to
// http://localhost, so they carry Host: localhost, as
// `curl --unix-socket PATH http://localhost/…` does.
package endpoint

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// UnixPrefix starts the address of a Unix socket: unix:PATH.
const UnixPrefix = "unix:"

// socketBase is the base URL of the requests sent over a Unix socket.
const socketBase = "http://localhost"

// Example is the address of a sidecar listening on its default address.
const Example = "http://127.0.0.1:7411"

// Rule is what a valid address looks like, for an error that names the
// flag it came from.
const Rule = "must be the sidecar's base URL, as in " + Example + ", or unix:PATH for a Unix socket"

// SocketPath returns the path of a unix: address and whether addr is one.
// The path may be empty or otherwise unusable: Parse and the server check it.
func SocketPath(addr string) (string, bool) {
	path, ok := strings.CutPrefix(addr, UnixPrefix)
	if !ok {
		return "", false
	}
	return strings.TrimPrefix(path, "//"), true
}

// Endpoint is a sidecar's address, parsed. The zero value is not usable.
type Endpoint struct {
	addr   string // as given, without a trailing slash
	base   string // the base URL of requests, without a trailing slash
	socket string // the Unix socket's path; empty for an HTTP URL
}

// Parse reads addr: an http:// or https:// URL with a host (and optionally a
// path prefix, but no query or fragment), or unix:PATH with a non-empty PATH.
// Its error says which rule addr breaks, without naming a flag.
func Parse(addr string) (Endpoint, error) {
	if path, ok := SocketPath(addr); ok {
		if err := CheckSocketPath(path); err != nil {
			return Endpoint{}, err
		}
		return Endpoint{addr: addr, base: socketBase, socket: path}, nil
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return Endpoint{}, errors.New(Rule)
	}
	trimmed := strings.TrimRight(addr, "/")
	return Endpoint{addr: trimmed, base: trimmed}, nil
}

// CheckSocketPath checks the path of a unix: address: not empty and without
// a NUL byte. Whether it is short enough for the system's socket addresses
// is the server's to check, where it binds.
func CheckSocketPath(path string) error {
	switch {
	case path == "":
		return errors.New("unix: needs the socket's path, as in unix:/run/leasehold/leasehold.sock")
	case strings.ContainsRune(path, 0):
		return errors.New("the socket's path holds a NUL byte")
	}
	return nil
}

// String is the address as given (without a trailing slash), for messages.
func (e Endpoint) String() string { return e.addr }

// Redacted is the address fit to print: as String, with the password of
// its userinfo (http://user:pw@host) masked as url.URL.Redacted masks it.
// An address ParseAddr admits has no query or path that could carry
// another secret.
func (e Endpoint) Redacted() string {
	if e.socket != "" {
		return e.addr
	}
	u, err := url.Parse(e.addr)
	if err != nil { // Parse admitted it: cannot happen
		return "(an address that does not parse)"
	}
	return u.Redacted()
}

// Socket is the Unix socket's path, or "" for an HTTP URL.
func (e Endpoint) Socket() string { return e.socket }

// Base is the base URL requests are made against, without a trailing slash:
// the address itself, or http://localhost for a Unix socket.
func (e Endpoint) Base() string { return e.base }

// URL is the URL of path (which starts with a slash, and may carry a query)
// on the sidecar.
func (e Endpoint) URL(path string) string { return e.base + path }

// Transport returns a new http.Transport, a clone of
// http.DefaultTransport, that reaches the sidecar. For a Unix socket it
// dials the socket for every request, whatever host the request's URL
// names, and uses no proxy.
func (e Endpoint) Transport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if e.socket == "" {
		return tr
	}
	path := e.socket
	dialer := &net.Dialer{}
	tr.Proxy = nil
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, "unix", path)
	}
	return tr
}
