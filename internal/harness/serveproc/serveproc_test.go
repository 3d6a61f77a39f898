package serveproc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
)

// fake writes a shell script that stands in for leasehold: it prints what
// it is given to print and then does what rest says.
func fake(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leasehold")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStartLearnsTheAddress(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		line, base, socket string
	}{
		{`{"level":"INFO","msg":"leasehold listening","addr":"127.0.0.1:4242"}`, "http://127.0.0.1:4242", ""},
		{`time=x level=INFO msg="leasehold listening" addr=unix:/tmp/x.sock mode=0600`, "http://localhost", "/tmp/x.sock"},
	} {
		out := &lockedbuf.Buffer{}
		// The arguments reach the binary after serve and --listen.
		bin := fake(t, `echo "args: $*"; echo 'starting' >&2; echo '`+c.line+`' >&2; exec sleep 60`)
		p, err := Start(Options{Bin: bin, Args: []string{"--store", "sqlite:x.db"}, Output: out})
		if err != nil {
			t.Fatal(err)
		}
		if p.Endpoint.Base() != c.base || p.Endpoint.Socket() != c.socket {
			t.Errorf("from %s: base %q socket %q, want %q %q", c.line, p.Endpoint.Base(), p.Endpoint.Socket(), c.base, c.socket)
		}
		if !p.Stop(10 * time.Second) {
			t.Error("the process did not end on SIGTERM")
		}
		if !strings.Contains(out.String(), "args: serve --listen 127.0.0.1:0 --store sqlite:x.db") {
			t.Errorf("the process was not run as serve with the arguments given:\n%s", out.String())
		}
	}
}

func TestStartReportsAnEarlyExit(t *testing.T) {
	t.Parallel()
	bin := fake(t, `echo 'bad flag' >&2; exit 64`)
	_, err := Start(Options{Bin: bin})
	if !errors.Is(err, ErrExited) {
		t.Fatalf("Start = %v, want ErrExited", err)
	}
}

func TestStartRunsThroughAWrapper(t *testing.T) {
	t.Parallel()
	out := &lockedbuf.Buffer{}
	bin := fake(t, `echo 'leasehold listening addr=127.0.0.1:5151' >&2; exec sleep 60`)
	p, err := Start(Options{Bin: bin, Wrapper: []string{"/usr/bin/env", "WRAPPED=1"}, Output: out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if p.Endpoint.Base() != "http://127.0.0.1:5151" {
		t.Errorf("base %q", p.Endpoint.Base())
	}
}
