package leaserun

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
)

// --addr unix:PATH: the keepalive stream is opened over the socket, with
// Host: localhost, and closed once the command has exited.
func TestSidecarOnAUnixSocket(t *testing.T) {
	t.Parallel()
	hosts := make(chan string, 1)
	gone := make(chan struct{})
	addr := testsidecar.ServeSocket(t, withRelease(srv0, func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host + " " + r.URL.EscapedPath()
		beginStream(w)
		sendEvent(w, "acquired", leaseData("nightly", r.URL.Query().Get("owner"), 7, 30*time.Second, 30*time.Second))
		pingUntilGone(w, r)
		close(gone)
	}))
	r := start(t, Config{Addr: addr, Task: "nightly", Owner: "w1", Env: []string{}, Command: shell(`echo "token $LEASEHOLD_TOKEN"`)})
	r.expect(t, 0)
	if out := strings.TrimSpace(r.stdout.String()); out != "token 7" {
		t.Errorf("command saw %q, want token 7", out)
	}
	if h := <-hosts; h != "localhost /v1/leases/nightly/keepalive" {
		t.Errorf("request %q, want Host localhost and the keepalive path", h)
	}
	select {
	case <-gone:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream was not closed after the command exited")
	}
}

// A socket nobody serves on is unavailable (69), and the log names it; a
// unix: address without a path is a usage error naming --addr.
func TestSidecarSocketMissing(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "lh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	addr := "unix:" + filepath.Join(dir, "none.sock")
	marker := filepath.Join(t.TempDir(), "ran")
	r := start(t, Config{Addr: addr, Task: "nightly", Command: []string{"touch", marker}})
	r.expect(t, exitcode.Unavailable)
	r.logHas(t, "sidecar "+addr)
	if exists(marker) {
		t.Error("the command ran without a lease")
	}
	r = start(t, Config{Addr: "unix:", Task: "nightly", Command: []string{"touch", marker}})
	r.expect(t, exitcode.Usage)
	r.logHas(t, `--addr \"unix:\": unix: needs the socket's path`)
}
