package sidecar

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
)

func TestServeRefusesBeforeOpeningAnything(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := map[string]Config{
		"non-loopback": {Listen: "0.0.0.0:0", Store: "sqlite:" + filepath.Join(dir, "a.db"), LogFormat: "text"},
		"token file":   {Listen: "0.0.0.0:0", Store: "sqlite:" + filepath.Join(dir, "b.db"), LogFormat: "text", TokenFile: filepath.Join(dir, "missing")},
		"bad store":    {Listen: "127.0.0.1:0", Store: "mysql://x", LogFormat: "text"},
	}
	for name, cfg := range cases {
		var logs lockedbuf.Buffer
		log, _ := cli.NewLogger("text", &logs)
		if err := Serve(context.Background(), cfg, log); err == nil {
			t.Errorf("%s: Serve accepted %+v", name, cfg)
		}
		if strings.Contains(logs.String(), "listening") {
			t.Errorf("%s: listened before refusing", name)
		}
	}
}

func TestServeStopsWithContext(t *testing.T) {
	t.Parallel()
	var logs lockedbuf.Buffer
	log, _ := cli.NewLogger("text", &logs)
	// --watch-store, deprecated, is ignored with a warning that names the
	// flag and not the URL, which may hold a password.
	const watchSecret = "w4tchs3cr3t"
	cfg := Config{Listen: "127.0.0.1:0", Store: "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db"), LogFormat: "text",
		WatchStore: "postgres://u:" + watchSecret + "@db-direct/l"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, log) }()

	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(logs.String(), "store migrated") {
		select {
		case err := <-done:
			t.Fatalf("Serve returned before migrating: %v\n%s", err, logs.String())
		case <-deadline:
			cancel()
			<-done
			t.Fatalf("Serve did not migrate within 30 s:\n%s", logs.String())
		case <-tick.C:
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v\n%s", err, logs.String())
	}
	out := logs.String()
	if !strings.Contains(out, "leasehold listening") || !strings.Contains(out, "addr=127.0.0.1:") || !strings.Contains(out, "msg=stopped") {
		t.Errorf("log lacks the address or the clean stop:\n%s", out)
	}
	// The listening line says where the web console is: the address's /ui/.
	if m := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+) console=(\S+)`).FindStringSubmatch(out); m == nil || m[2] != "http://"+m[1]+"/ui/" {
		t.Errorf("the listening line lacks console=http://ADDR/ui/:\n%s", out)
	}
	if !strings.Contains(out, "--watch-store (LEASEHOLD_WATCH_STORE) is ignored") || strings.Contains(out, watchSecret) {
		t.Errorf("log lacks the --watch-store warning, or shows its URL:\n%s", out)
	}
}

// The console's address is the listener's, through loopback for a
// wildcard address.
func TestConsoleURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr *net.TCPAddr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7411}, "http://127.0.0.1:7411/ui/"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 7411}, "http://127.0.0.1:7411/ui/"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 80}, "http://127.0.0.1:80/ui/"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 7411}, "http://[::1]:7411/ui/"},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8080}, "http://10.0.0.5:8080/ui/"},
	} {
		if got := consoleURL(c.addr); got != c.want {
			t.Errorf("consoleURL(%v) = %q, want %q", c.addr, got, c.want)
		}
	}
}

// With --probe-listen, Serve listens there too, names the address on its
// listening line, serves the probe routes there without a token while the
// API wants one, and closes it when it stops.
func TestServeProbeListener(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("serve-probe-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs lockedbuf.Buffer
	log, _ := cli.NewLogger("text", &logs)
	cfg := Config{Listen: "127.0.0.1:0", ProbeListen: "127.0.0.1:0", TokenFile: tokenFile, Store: "sqlite:" + filepath.Join(dir, "leasehold.db"), LogFormat: "text"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, log) }()

	line := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+) .*probe=(127\.0\.0\.1:\d+)`)
	var m []string
	deadline := time.After(30 * time.Second)
	for m = line.FindStringSubmatch(logs.String()); m == nil; m = line.FindStringSubmatch(logs.String()) {
		select {
		case err := <-done:
			t.Fatalf("Serve returned before listening: %v\n%s", err, logs.String())
		case <-deadline:
			cancel()
			<-done
			t.Fatalf("no listening line with addr= and probe= within 30 s:\n%s", logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	api, probe := "http://"+m[1], "http://"+m[2]
	if api == probe {
		t.Fatalf("one address for both listeners: %s", api)
	}
	status := func(url string) int {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for url, want := range map[string]int{
		probe + "/readyz": http.StatusOK, probe + "/v1/leases/job/held-here": http.StatusServiceUnavailable,
		probe + "/metrics": http.StatusNotFound, api + "/v1/leases/job/held-here": http.StatusUnauthorized,
	} {
		if got := status(url); got != want {
			t.Errorf("GET %s: %d, want %d", url, got, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v\n%s", err, logs.String())
	}
	if conn, err := net.Dial("tcp", m[2]); err == nil {
		conn.Close()
		t.Errorf("the probe listener %s still accepts connections after Serve returned", m[2])
	}
}

// A --probe-listen address that cannot be bound fails Serve, naming the
// flag, and nothing is left listening.
func TestServeProbeListenerBindFails(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var logs lockedbuf.Buffer
	log, _ := cli.NewLogger("text", &logs)
	cfg := Config{Listen: "127.0.0.1:0", ProbeListen: taken.Addr().String(), Store: "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db"), LogFormat: "text"}
	err = Serve(context.Background(), cfg, log)
	if err == nil || !strings.Contains(err.Error(), "--probe-listen") {
		t.Fatalf("Serve = %v, want an error naming --probe-listen", err)
	}
	if strings.Contains(logs.String(), "leasehold listening") {
		t.Errorf("logged a listening line although the probe listener failed:\n%s", logs.String())
	}
}
