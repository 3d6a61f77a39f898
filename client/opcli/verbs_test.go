package opcli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client/opcli"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// Every verb, for people and with --json, through a sidecar and straight
// on a store, on SQLite and PostgreSQL: the same answers and exit statuses.
func TestVerbs(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, conn []string, kind api.StoreStatusKind) {
		overHTTP := conn[0] == "--addr"
		run := func(verb string, args ...string) result { return leasehold(t, nil, verb, with(conn, args...)...) }

		// status
		r := run("status")
		if overHTTP {
			r.expect(t, 0, "store     "+string(kind)+", ready\n", "streams   0 open of 20000\n", "watchers  0\n")
		} else {
			r.expect(t, 0, "kind     "+string(kind)+"\n", "ready    yes\n", "schema   current\n")
		}
		r = run("status", "--json")
		r.expect(t, 0)
		if overHTTP {
			st := decode[api.SidecarStatus](t, r)
			if st.Store.Kind != kind || !st.Store.Ready || st.Version == "" || st.Streams.Max == 0 {
				t.Errorf("status --json: %+v", st)
			}
		} else {
			st := decode[opcli.StoreStatus](t, r)
			if st.Store.Kind != kind || !st.Store.Ready || st.Schema != "current" || st.Version == "" {
				t.Errorf("status --json on a store: %+v", st)
			}
		}

		// claim, and a claim of a held task
		r = run("claim", "nightly", "--owner", "w1", "--ttl", "30s", "--note", "hello there")
		r.expect(t, 0, "owner     w1\n", "token     1\n", "expires   in 30s (", "ttl       30s\n", "note      hello there\n")
		held := run("claim", "--json", "nightly", "--owner", "w2")
		held.expect(t, exitcode.Held)
		if h := decode[api.ClaimHeld](t, held); h.Reason != api.Held || h.Holder.Owner != "w1" || h.Holder.TtlRemainingMs <= 0 {
			t.Errorf("claim of a held task, --json: %+v", h)
		}
		run("claim", "nightly", "--owner", "w2").expect(t, exitcode.Held, "nightly is held by w1, expires in ")
		r = run("claim", "billing/a", "--owner", "w1", "--json")
		r.expect(t, 0)
		if c := decode[api.ClaimAcquired](t, r); !bool(c.Acquired) || c.Lease.Task != "billing/a" || c.Lease.Token != 1 || c.Lease.TtlMs != 30000 {
			t.Errorf("claim --json: %+v", c)
		}
		// Without --owner a claim takes a fresh owner and says which.
		r = run("claim", "solo", "--json")
		r.expect(t, 0)
		if c := decode[api.ClaimAcquired](t, r); !strings.Contains(c.Lease.Owner, "#") {
			t.Errorf("claim without --owner: owner %q, want host#pid#random", c.Lease.Owner)
		}
		run("claim", "leasehold:prune", "--owner", "w1").expect(t, exitcode.NoPerm)

		// get
		run("get", "nightly").expect(t, 0, "task      nightly\n", "owner     w1\n", "renewed   ")
		r = run("get", "nightly", "--json")
		r.expect(t, 0)
		if s := decode[api.LeaseState](t, r); !s.Held || s.Lease == nil || s.Lease.Owner != "w1" || s.Lease.Note != "hello there" {
			t.Errorf("get --json: %+v", s)
		}

		// list
		r = run("list")
		r.expect(t, 0)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "TASK") || !strings.HasPrefix(lines[1], "billing/a ") || !strings.HasPrefix(lines[2], "nightly ") {
			t.Errorf("list: want a header and three leases by task:\n%s", r.stdout)
		}
		if strings.Index(lines[0], "OWNER") != strings.Index(lines[2], "w1") {
			t.Errorf("list: columns not aligned:\n%s", r.stdout)
		}
		r = run("list", "--prefix", "billing/", "--json")
		r.expect(t, 0)
		if l := decode[api.LeaseList](t, r); len(l.Leases) != 1 || l.Leases[0].Task != "billing/a" {
			t.Errorf("list --prefix billing/ --json: %+v", l)
		}
		run("list", "--prefix", "zzz").expect(t, 0, "no live leases\n")

		// release: not held, wrong token, then released
		run("release", "nightly", "--owner", "w2").expect(t, exitcode.Lost, "not released: w2 holds no live lease")
		r = run("release", "nightly", "--owner", "w1", "--token", "9", "--json")
		r.expect(t, exitcode.Lost)
		if rr := decode[api.ReleaseResult](t, r); rr.Released {
			t.Error("release with a wrong token: released")
		}
		r = run("release", "nightly", "--owner", "w1", "--token", "1", "--json")
		r.expect(t, 0)
		if rr := decode[api.ReleaseResult](t, r); !rr.Released {
			t.Error("release: not released")
		}
		run("release", "billing/a", "--owner", "w1").expect(t, 0, "released billing/a\n")

		// get of a task with no live lease: 1
		run("get", "nightly").expect(t, exitcode.Failure, "nightly: no live lease\n")
		r = run("get", "nightly", "--json")
		r.expect(t, exitcode.Failure)
		if s := decode[api.LeaseState](t, r); s.Held || s.Lease != nil {
			t.Errorf("get --json of a released task: %+v", s)
		}

		// history
		r = run("history", "nightly")
		r.expect(t, 0)
		lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], " released ") || !strings.Contains(lines[2], " acquired ") {
			t.Errorf("history: want a header, released, acquired:\n%s", r.stdout)
		}
		r = run("history", "nightly", "--limit", "1", "--json")
		r.expect(t, 0)
		if l := decode[api.EventList](t, r); len(l.Events) != 1 || l.Events[0].Kind != api.EventKindReleased || l.Events[0].Owner != "w1" || l.Events[0].Token != 1 {
			t.Errorf("history --limit 1 --json: %+v", l)
		}
		run("history", "never-claimed").expect(t, 0, "never-claimed: no history\n")
	})
}

// A sidecar that is not there, a store that cannot be reached: 69.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	stopped := sidecarOn(t, testsidecar.OpenStore(t, testsidecar.SQLiteURL(t)), "", false)
	stopped.Close()
	for _, verb := range [][]string{{"status"}, {"get", "t"}, {"list"}, {"history", "t"}, {"claim", "t"}, {"release", "t", "--owner", "w"}, {"watch"}} {
		r := leasehold(t, nil, verb[0], append(verb[1:], "--addr", stopped.URL)...)
		r.expect(t, exitcode.Unavailable)
		if !strings.Contains(r.stderr, "unavailable") {
			t.Errorf("%v on a stopped sidecar: stderr %q", verb, r.stderr)
		}
	}
	missing := "sqlite:" + filepath.Join(t.TempDir(), "missing", "x.db")
	leasehold(t, nil, "get", "t", "--store", missing).expect(t, exitcode.Unavailable)
	leasehold(t, nil, "claim", "t", "--store", missing).expect(t, exitcode.Unavailable)
	// Reading a store that is not there creates nothing.
	noFile := filepath.Join(t.TempDir(), "none.db")
	r := leasehold(t, nil, "status", "--store", "sqlite:"+noFile)
	r.expect(t, exitcode.Unavailable)
	if _, err := os.Stat(noFile); err == nil || !strings.Contains(r.stderr, "leasehold migrate") {
		t.Errorf("status of a missing SQLite file: created it, or no hint (%q)", r.stderr)
	}
	// A store without the schema: status says so.
	bareFile := filepath.Join(t.TempDir(), "bare.db")
	if err := os.WriteFile(bareFile, nil, 0o600); err != nil { // an empty file is an empty SQLite database
		t.Fatal(err)
	}
	bare := "sqlite:" + bareFile
	r = leasehold(t, nil, "status", "--store", bare, "--json")
	r.expect(t, exitcode.Unavailable)
	if st := decode[opcli.StoreStatus](t, r); st.Schema != "missing" || st.Store.Ready || !strings.Contains(st.Store.Detail, "leasehold migrate") {
		t.Errorf("status of a store without schema: %+v", st)
	}
}

// PostgreSQL that does not answer: 69, and its password in no output.
func TestUnavailablePostgres(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-Pw"
	closed := strings.Replace(pgtest.ClosedURL(t), "leasehold@", "leasehold:"+secret+"@", 1)
	for _, verb := range [][]string{{"status"}, {"get", "t"}, {"claim", "t"}} {
		r := leasehold(t, nil, verb[0], append(verb[1:], "--store", closed)...)
		r.expect(t, exitcode.Unavailable)
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("%v: the password is in the output:\n%s%s", verb, r.stdout, r.stderr)
		}
	}
}

// A sidecar with a token: 77 without it or with a wrong one; the token file
// and the address also come from the environment.
func TestCredentials(t *testing.T) {
	t.Parallel()
	hs := sidecarOn(t, testsidecar.OpenStore(t, testsidecar.SQLiteURL(t)), "right-token", false)
	dir := t.TempDir()
	wrong, right := filepath.Join(dir, "wrong"), filepath.Join(dir, "right")
	if err := os.WriteFile(wrong, []byte("wrong-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(right, []byte("right-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, verb := range [][]string{{"status"}, {"get", "t"}, {"list"}, {"claim", "t"}, {"watch"}} {
		leasehold(t, nil, verb[0], append(verb[1:], "--addr", hs.URL)...).expect(t, exitcode.NoPerm)
		leasehold(t, nil, verb[0], append(verb[1:], "--addr", hs.URL, "--token-file", wrong)...).expect(t, exitcode.NoPerm)
	}
	env := map[string]string{"LEASEHOLD_ADDR": hs.URL, "LEASEHOLD_TOKEN_FILE": right}
	leasehold(t, env, "claim", "t", "--owner", "w1").expect(t, 0, "owner     w1\n")
	// LEASEHOLD_OWNER and LEASEHOLD_TOKEN are leasehold run's outputs: a
	// release never takes them for its flags.
	env["LEASEHOLD_OWNER"], env["LEASEHOLD_TOKEN"] = "w1", "1"
	leasehold(t, env, "release", "t").expect(t, exitcode.Usage)
	// --store on the command line wins over LEASEHOLD_ADDR, and
	// LEASEHOLD_TOKEN_FILE, for a sidecar, is left aside.
	leasehold(t, env, "list", "--store", migrated(t, testsidecar.SQLiteURL(t))).expect(t, 0, "no live leases\n")
}

// A sidecar that requires declared tasks refuses a claim of another: 78.
func TestUndeclared(t *testing.T) {
	t.Parallel()
	hs := sidecarOn(t, testsidecar.OpenStore(t, testsidecar.SQLiteURL(t)), "", true)
	r := leasehold(t, nil, "claim", "nightly", "--addr", hs.URL)
	r.expect(t, exitcode.Undeclared)
	if !strings.Contains(r.stderr, "declare") {
		t.Errorf("stderr: %q", r.stderr)
	}
}

// Usage errors: 64, naming the flag or argument, with nothing asked.
func TestUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := "sqlite:" + filepath.Join(dir, "never.db")
	for _, tc := range []struct {
		verb   string
		args   []string
		env    map[string]string
		stderr string
	}{
		{"get", nil, nil, "needs one TASK"},
		{"get", []string{"a", "b"}, nil, "needs one TASK"},
		{"list", []string{"extra"}, nil, `unexpected argument "extra"`},
		{"get", []string{"a//b"}, nil, `TASK "a//b"`},
		{"get", []string{"t", "--addr", "http://127.0.0.1:1", "--store", store}, nil, "exclusive"},
		{"get", []string{"t"}, map[string]string{"LEASEHOLD_ADDR": "http://127.0.0.1:1", "LEASEHOLD_STORE": store}, "LEASEHOLD_ADDR and LEASEHOLD_STORE are exclusive"},
		{"get", []string{"t", "--addr", "127.0.0.1:7411"}, nil, "--addr"},
		{"get", []string{"t", "--addr", "unix:"}, nil, `--addr "unix:": unix: needs the socket's path`},
		{"get", []string{"t", "--store", "mysql://x"}, nil, "--store"},
		{"get", []string{"t", "--store", store, "--token-file", "/x"}, nil, "--token-file is for a sidecar"},
		{"get", []string{"t", "--token-file", filepath.Join(dir, "none")}, nil, "--token-file"},
		{"history", []string{"t", "--limit", "0"}, nil, "--limit 0"},
		{"claim", []string{"t", "--ttl", "10ms"}, nil, "--ttl 10ms"},
		{"claim", []string{"t", "--owner", ""}, nil, "--owner"},
		{"release", []string{"t"}, nil, "--owner is required"},
		{"release", []string{"t", "--owner", "w", "--token", "0"}, nil, "--token 0"},
		{"list", []string{"--prefix", "a b"}, nil, "--prefix"},
		{"watch", []string{"--since", "-3"}, nil, "--since -3"},
		{"list", []string{"--bogus"}, nil, "flag provided but not defined"},
	} {
		r := leasehold(t, tc.env, tc.verb, tc.args...)
		if r.code != exitcode.Usage || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("%s %v: exit %d, stderr %q; want 64 and %q", tc.verb, tc.args, r.code, r.stderr, tc.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "never.db")); err == nil {
		t.Error("a usage error created the store")
	}
	r := leasehold(t, nil, "claim", "-h")
	r.expect(t, 0, "Usage: leasehold claim TASK", "-ttl", "-addr", "LEASEHOLD_TOKEN_FILE")
}

// history shows the credential each event was recorded for, "-" for none,
// and --json carries it, through a sidecar and straight on a store.
func TestHistoryShowsCredential(t *testing.T) {
	t.Parallel()
	url := migrated(t, testsidecar.SQLiteURL(t))
	store := testsidecar.OpenStore(t, url)
	svc := leasecore.New(store)
	l, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: "nightly", Owner: "w1", TTL: time.Minute, Credential: "deploy-bot"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := svc.Release(t.Context(), leasecore.ReleaseParams{Task: "nightly", Owner: "w1", Token: l.Token}); !ok || err != nil {
		t.Fatalf("release = %v, %v", ok, err)
	}
	for _, conn := range [][]string{{"--store", url}, {"--addr", sidecarOn(t, store, "", false).URL}} {
		r := leasehold(t, nil, "history", with(conn, "nightly")...)
		r.expect(t, 0)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 3 || !strings.Contains(lines[0], " CREDENTIAL ") ||
			strings.Fields(lines[1])[5] != "-" || strings.Fields(lines[2])[5] != "deploy-bot" {
			t.Errorf("history %s: want a CREDENTIAL column, - for the release (none), deploy-bot for the claim:\n%s", conn[0], r.stdout)
		}
		r = leasehold(t, nil, "history", with(conn, "nightly", "--json")...)
		r.expect(t, 0)
		if evs := decode[api.EventList](t, r).Events; len(evs) != 2 || evs[0].Credential != "" || evs[1].Credential != "deploy-bot" {
			t.Errorf("history --json %s: %+v, want the release for no credential, the claim for deploy-bot", conn[0], evs)
		}
	}
}
