package endpoint

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		addr, base, socket, str string
	}{
		{"http://127.0.0.1:7411", "http://127.0.0.1:7411", "", "http://127.0.0.1:7411"},
		{"http://127.0.0.1:7411/", "http://127.0.0.1:7411", "", "http://127.0.0.1:7411"},
		{"https://sidecar.internal/prefix", "https://sidecar.internal/prefix", "", "https://sidecar.internal/prefix"},
		{"unix:/run/leasehold/leasehold.sock", "http://localhost", "/run/leasehold/leasehold.sock", "unix:/run/leasehold/leasehold.sock"},
		{"unix:///run/leasehold.sock", "http://localhost", "/run/leasehold.sock", "unix:///run/leasehold.sock"},
		{"unix:leasehold.sock", "http://localhost", "leasehold.sock", "unix:leasehold.sock"},
		{"unix://./leasehold.sock", "http://localhost", "./leasehold.sock", "unix://./leasehold.sock"},
	}
	for _, c := range cases {
		e, err := Parse(c.addr)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.addr, err)
			continue
		}
		if e.Base() != c.base || e.Socket() != c.socket || e.String() != c.str {
			t.Errorf("Parse(%q) = base %q, socket %q, string %q; want %q, %q, %q", c.addr, e.Base(), e.Socket(), e.String(), c.base, c.socket, c.str)
		}
		if got := e.URL("/v1/status"); got != c.base+"/v1/status" {
			t.Errorf("Parse(%q).URL = %q", c.addr, got)
		}
	}
	for addr, says := range map[string]string{
		"":                         "base URL",
		"127.0.0.1:7411":           "base URL",
		"ftp://127.0.0.1:7411":     "base URL",
		"http://":                  "base URL",
		"http://127.0.0.1:7411?x":  "base URL",
		"http://127.0.0.1:7411#x":  "base URL",
		"unix:":                    "needs the socket's path",
		"unix://":                  "needs the socket's path",
		"unix:/run/a\x00b.sock":    "NUL",
		"UNIX:/run/leasehold.sock": "base URL", // the prefix is lower case, as sqlite: is
	} {
		if _, err := Parse(addr); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", addr, err, says)
		}
	}
}

// A socket's transport dials the socket whatever host the URL names, and
// the request carries Host: localhost, as curl --unix-socket sends it.
func TestTransportDialsTheSocket(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "ep") // short: a socket's path has a length limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Host+" "+r.URL.Path)
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	e, err := Parse("unix:" + path)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: e.Transport()}
	t.Cleanup(hc.CloseIdleConnections)
	resp, err := hc.Get(e.URL("/v1/status"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "localhost /v1/status" {
		t.Errorf("the server saw %q, want Host localhost and the path", body)
	}

	// A path where nothing listens: the dial fails, naming the socket.
	gone, _ := Parse("unix:" + filepath.Join(dir, "missing.sock"))
	_, err = (&http.Client{Transport: gone.Transport()}).Get(gone.URL("/healthz"))
	if err == nil || !strings.Contains(err.Error(), "missing.sock") {
		t.Errorf("a request to a missing socket: %v, want an error naming it", err)
	}
}
