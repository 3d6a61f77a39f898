package leaserun

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar"
)

// TestUndeclaredTask: a sidecar serving with --require-declared refuses an
// undeclared task; leasehold run exits with exitcode.Undeclared (not
// exitcode.Unavailable), runs nothing and leaves no lease. A declared task runs.
func TestUndeclaredTask(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	srv, err := sidecar.New(sidecar.Options{Store: st.store, Logger: slog.New(slog.DiscardHandler), RequireDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	r := start(t, Config{Addr: hs.URL, Task: "not-declared", Owner: "w1", Command: shell(`echo ran`)})
	r.expect(t, exitcode.Undeclared)
	r.logHas(t, "msg=undeclared")
	r.logHas(t, "require-declared")
	if n := strings.Count(r.stderr.String(), "is not declared"); n != 1 {
		t.Errorf("the log says %d times that the task is not declared, want once:\n%s", n, r.stderr)
	}
	if r.stdout.String() != "" {
		t.Errorf("the command ran for an undeclared task: %q", r.stdout)
	}
	if l := st.get(t, "not-declared"); l != nil {
		t.Errorf("lease written for an undeclared task: %+v", l)
	}

	if _, err := st.svc.CreateTask(context.Background(), leasecore.TaskDecl{Name: "declared", TTL: 20 * time.Second}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	// The sidecar honours a new declaration within DeclarationsMaxAge;
	// waitFor polls until it does.
	testsidecar.WaitFor(t, "the declaration to reach the sidecar", func() bool {
		r := start(t, Config{Addr: hs.URL, Task: "declared", Owner: "w1", Command: shell(`echo ran`)})
		return r.wait(t) == 0
	})
}

// TestUnauthorizedHint: a sidecar that refuses the token (401) is told
// apart from one that was given none, and each says what to do about
// --token-file; the command does not run.
func TestUnauthorizedHint(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	hs := testsidecar.Serve(t, sidecar.Options{Store: st.store, Token: []byte("s3cret")})
	r := start(t, Config{Addr: hs.URL, Task: "t", Owner: "w1", Command: shell(`echo ran`)})
	r.expect(t, exitcode.NoPerm)
	r.logHas(t, "msg=unauthorized")
	r.logHas(t, "give the file that holds the token with --token-file")
	r = start(t, Config{Addr: hs.URL, BearerToken: "wrong", Task: "t", Owner: "w1", Command: shell(`echo ran`)})
	r.expect(t, exitcode.NoPerm)
	r.logHas(t, "does not know the token in --token-file")
	if strings.Contains(r.stderr.String(), "wrong") || r.stdout.String() != "" {
		t.Errorf("the token reached the log, or the command ran: stdout %q, stderr:\n%s", r.stdout, r.stderr)
	}
}
