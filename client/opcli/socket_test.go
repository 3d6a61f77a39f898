package opcli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/sidecar"
)

// Over a Unix socket (--addr unix:PATH, or LEASEHOLD_ADDR): status names
// the sidecar by its socket, and a socket nobody serves on is 69, naming
// it. (Every verb also runs over a socket in the socket/sqlite target.)
func TestOverAUnixSocket(t *testing.T) {
	t.Parallel()
	addr := testsidecar.ServeSocket(t, testsidecar.Handler(t, sidecar.Options{Store: testsidecar.OpenStore(t, testsidecar.SQLiteURL(t))}))
	r := leasehold(t, nil, "status", "--addr", addr)
	r.expect(t, 0, "sidecar   "+addr+"\n")
	r = leasehold(t, map[string]string{"LEASEHOLD_ADDR": addr}, "claim", "nightly", "--owner", "w1")
	r.expect(t, 0, "nightly", "w1")
	leasehold(t, nil, "get", "nightly", "--addr", "unix://"+strings.TrimPrefix(addr, "unix:")).expect(t, 0, "w1")

	dir, err := os.MkdirTemp("", "lh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	missing := "unix:" + filepath.Join(dir, "none.sock")
	for _, verb := range [][]string{{"status"}, {"get", "t"}, {"watch"}} {
		r := leasehold(t, nil, verb[0], append(verb[1:], "--addr", missing)...)
		r.expect(t, exitcode.Unavailable)
		if !strings.Contains(r.stderr, "sidecar "+missing+" unavailable") {
			t.Errorf("%v on a socket nobody serves on: stderr %q, want it named", verb, r.stderr)
		}
	}
}
