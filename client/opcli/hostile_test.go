package opcli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"

	"github.com/leasehold/leasehold/client/leaserun"
	"github.com/leasehold/leasehold/client/opcli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/sidecar/api"
)

// terminalSafe fails the test when s holds a character a terminal would act
// on: anything not printable but the newline that ends a line.
func terminalSafe(t *testing.T, what, s string) {
	t.Helper()
	for i, r := range s {
		if r != '\n' && !unicode.IsPrint(r) {
			t.Errorf("%s: %U at byte %d reaches the terminal:\n%q", what, r, i, s)
			return
		}
	}
}

// hostileNote is a note as a careless or hostile client may set it (a
// sidecar accepts any UTF-8 without NUL): it retitles the terminal, clears
// the screen, forges a line, starts a C1 control sequence, reverses the
// text, and holds a backslash sequence and readable Unicode of its own.
const hostileNote = "\x1b]0;pwned\x07\x1b[2J\nforged: yes\u009b31m\x7f\u202eexe.txt `\\x1b` café 日本"

// hostileNoteShown is hostileNote as the human output prints it.
const hostileNoteShown = `\x1b]0;pwned\a\x1b[2J\nforged: yes\u009b31m\x7f\u202eexe.txt ` + "`" + `\\x1b` + "`" + ` café 日本`

// A note with escape sequences and newlines, set through a sidecar or a
// store, prints escaped in every verb that shows it, for people, and as
// the same value with nothing a terminal acts on in --json.
func TestServerTextEscaped(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, conn []string, _ api.StoreStatusKind) {
		run := func(verb string, args ...string) result {
			r := leasehold(t, nil, verb, with(conn, args...)...)
			terminalSafe(t, verb+" stdout", r.stdout)
			terminalSafe(t, verb+" stderr", r.stderr)
			return r
		}
		run("claim", "nightly", "--owner", "w1", "--note", hostileNote).expect(t, 0, "note      "+hostileNoteShown+"\n")
		run("get", "nightly").expect(t, 0, "note      "+hostileNoteShown+"\n")
		r := run("list")
		r.expect(t, 0, "  "+hostileNoteShown+"\n")
		if n := strings.Count(r.stdout, "\n"); n != 2 {
			t.Errorf("list: %d lines, want a header and one lease:\n%s", n, r.stdout)
		}
		r = run("get", "nightly", "--json")
		r.expect(t, 0)
		if s := decode[api.LeaseState](t, r); s.Lease == nil || s.Lease.Note != hostileNote {
			t.Errorf("get --json: %+v, want the note as it was set", s)
		}
		r = run("list", "--json")
		r.expect(t, 0)
		if l := decode[api.LeaseList](t, r); len(l.Leases) != 1 || l.Leases[0].Note != hostileNote {
			t.Errorf("list --json: %+v, want the note as it was set", l)
		}
		r = run("claim", "nightly", "--owner", "w1", "--note", hostileNote, "--json")
		r.expect(t, 0)
		if c := decode[api.ClaimAcquired](t, r); c.Lease.Note != hostileNote {
			t.Errorf("claim --json: %+v, want the note as it was set", c)
		}
	})
}

// fakeAnswer is one answer of a fake server: status, Content-Type (none
// when empty) and body.
type fakeAnswer struct {
	status int
	ct     string
	body   string
}

// fakeSidecar serves answers by "METHOD PATH" (the escaped path, no query),
// and 500 text for anything else.
func fakeSidecar(t *testing.T, answers map[string]fakeAnswer) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := answers[r.Method+" "+r.URL.EscapedPath()]
		if !ok {
			a = fakeAnswer{http.StatusInternalServerError, "text/plain", "no answer for " + r.Method + " " + r.URL.EscapedPath()}
		}
		if a.ct == "" {
			w.Header()["Content-Type"] = nil // no sniffing: no Content-Type at all
		} else {
			w.Header().Set("Content-Type", a.ct)
		}
		w.WriteHeader(a.status)
		fmt.Fprint(w, a.body)
	}))
	t.Cleanup(hs.Close)
	return hs
}

// js is s as a JSON string (Go's %q writes escapes JSON has not).
func js(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// leaseJSON is a Lease of the API.
func leaseJSON(task, owner, note string) string {
	return fmt.Sprintf(`{"task":%s,"owner":%s,"token":1,"acquired_at":"2026-12-03T17:14:51.742Z","renewed_at":"2026-12-03T17:14:51.742Z",`+
		`"expires_at":"2026-12-03T17:15:21.742Z","ttl_ms":30000,"ttl_remaining_ms":29877,"renew_count":0,"note":%s}`, js(task), js(owner), js(note))
}

const statusJSON = `{"version":"v0.4.0","started_at":"2026-12-03T17:14:50.729Z","store":{"kind":"sqlite","ready":true,"detail":""},` +
	`"streams":{"open":0,"max":20000},"watchers":0,"batching":[{"op":"claim","statements":1,"operations":1}]}`

// verbCase is a verb, the route it asks, and an answer of the API to it.
type verbCase struct {
	args  []string
	route string
	good  string // a 200 body of the API's
	code  int    // the exit status of the good answer
}

var verbCases = []verbCase{
	{[]string{"status"}, "GET /v1/status", statusJSON, 0},
	{[]string{"get", "t"}, "GET /v1/leases/t", `{"held":false}`, exitcode.Failure},
	{[]string{"list"}, "GET /v1/leases", `{"leases":[]}`, 0},
	{[]string{"history", "t"}, "GET /v1/leases/t/history", `{"events":[]}`, 0},
	{[]string{"claim", "t", "--owner", "w1"}, "POST /v1/leases/t/claim", `{"acquired":true,"lease":` + leaseJSON("t", "w1", "") + `}`, 0},
	{[]string{"release", "t", "--owner", "w1"}, "POST /v1/leases/t/release", `{"released":true}`, 0},
	{[]string{"tasks", "list"}, "GET /v1/tasks", `{"tasks":[` + taskJSON + `]}`, 0},
	{[]string{"tasks", "show", "t"}, "GET /v1/tasks/t", taskJSON, 0},
	{[]string{"tasks", "declare", "t", "--ttl", "1m"}, "PUT /v1/tasks/t", taskJSON, 0},
	{[]string{"policies", "list"}, "GET /v1/policies", `{"policies":[` + policyJSON + `]}`, 0},
	{[]string{"policies", "show", "p"}, "GET /v1/policies/p", policyJSON, 0},
	{[]string{"policies", "declare", "p"}, "PUT /v1/policies/p", policyJSON, 0},
}

// taskJSON and policyJSON are a declaration and a policy as the API
// answers them.
const (
	taskJSON = `{"name":"t","ttl_ms":60000,"description":"","retention_policy":"default","managed_by":"operator",` +
		`"created_at":"2026-12-03T17:14:51.742Z","updated_at":"2026-12-03T17:14:51.742Z"}`
	policyJSON = `{"name":"p","keep_for_ms":0,"keep_last":0,"managed_by":"operator",` +
		`"created_at":"2026-12-03T17:14:51.742Z","updated_at":"2026-12-03T17:14:51.742Z"}`
)

// A server that answers 200 (or anything) but not as the API does (null,
// {}, an HTML page, a JSON body of another shape, the API's body under
// another Content-Type) makes every verb fail, saying that the server at
// --addr is not a leasehold sidecar, and print nothing: not "no live
// leases", not an empty lease.
func TestNotASidecar(t *testing.T) {
	t.Parallel()
	for _, vc := range verbCases {
		t.Run(strings.Join(vc.args[:min(2, len(vc.args))], "_"), func(t *testing.T) {
			t.Parallel()
			// The fake serves the API's answer: the verb works.
			hs := fakeSidecar(t, map[string]fakeAnswer{vc.route: {200, "application/json", vc.good}})
			leasehold(t, nil, vc.args[0], append(vc.args[1:], "--addr", hs.URL)...).expect(t, vc.code)

			bad := []struct {
				name string
				fakeAnswer
			}{
				{"null", fakeAnswer{200, "application/json", "null"}},
				{"empty object", fakeAnswer{200, "application/json", "{}"}},
				{"empty body", fakeAnswer{200, "application/json", ""}},
				{"HTML page", fakeAnswer{200, "text/html; charset=utf-8", "<!doctype html><html><body><h1>It works!</h1></body></html>"}},
				{"JSON array", fakeAnswer{200, "application/json", "[1,2,3]"}},
				{"JSON of another shape", fakeAnswer{200, "application/json", `{"held":"yes","leases":"none","events":{},"released":"no","version":1,"acquired":"maybe","lease":[]}`}},
				{"the API's body as text/plain", fakeAnswer{200, "text/plain; charset=utf-8", vc.good}},
				{"the API's body without Content-Type", fakeAnswer{200, "", vc.good}},
				{"204", fakeAnswer{204, "", ""}},
				{"a 404 page", fakeAnswer{404, "text/html", "<html><body>Not Found</body></html>"}},
				{"a proxy's 502", fakeAnswer{502, "text/plain", "Bad Gateway"}},
				{"a refusal that is no problem", fakeAnswer{422, "application/json", `{"error":"nope"}`}},
			}
			for _, b := range bad {
				hs := fakeSidecar(t, map[string]fakeAnswer{vc.route: b.fakeAnswer})
				for _, asJSON := range []bool{false, true} {
					args := append(vc.args[1:len(vc.args):len(vc.args)], "--addr", hs.URL)
					if asJSON {
						args = append(args, "--json")
					}
					r := leasehold(t, nil, vc.args[0], args...)
					if r.code != exitcode.Unavailable || r.stdout != "" ||
						!strings.Contains(r.stderr, "the server at "+hs.URL+" did not answer like a leasehold sidecar") {
						t.Errorf("%s (json %v) answered %s: exit %d, want %d and nothing printed\nstdout: %s\nstderr: %s",
							vc.args[0], asJSON, b.name, r.code, exitcode.Unavailable, r.stdout, r.stderr)
					}
				}
			}
		})
	}
}

// Answers whose shape is the API's but which no sidecar would give.
func TestNotASidecarSemantics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		args   []string
		routes map[string]fakeAnswer
	}{
		{"held without a lease", []string{"get", "t"}, map[string]fakeAnswer{"GET /v1/leases/t": {200, "application/json", `{"held":true}`}}},
		{"a lease though not held", []string{"get", "t"}, map[string]fakeAnswer{"GET /v1/leases/t": {200, "application/json", `{"held":false,"lease":` + leaseJSON("t", "w1", "") + `}`}}},
		{"another task's lease", []string{"get", "t"}, map[string]fakeAnswer{"GET /v1/leases/t": {200, "application/json", `{"held":true,"lease":` + leaseJSON("u", "w1", "") + `}`}}},
		{"a lease null", []string{"get", "t"}, map[string]fakeAnswer{"GET /v1/leases/t": {200, "application/json", `{"held":true,"lease":null}`}}},
		{"a claim granted to another owner", []string{"claim", "t", "--owner", "w1"}, map[string]fakeAnswer{"POST /v1/leases/t/claim": {200, "application/json", `{"acquired":true,"lease":` + leaseJSON("t", "w2", "") + `}`}}},
		{"a held claim without holder", []string{"claim", "t", "--owner", "w1"}, map[string]fakeAnswer{"POST /v1/leases/t/claim": {409, "application/json", `{"acquired":false,"reason":"held"}`}}},
		{"pages that do not move on", []string{"list"}, map[string]fakeAnswer{"GET /v1/leases": {200, "application/json", `{"leases":[` + leaseJSON("a", "w1", "") + `],"next_after":"a"}`}}},
	} {
		hs := fakeSidecar(t, tc.routes)
		r := leasehold(t, nil, tc.args[0], append(tc.args[1:], "--addr", hs.URL)...)
		if r.code != exitcode.Unavailable || r.stdout != "" || !strings.Contains(r.stderr, "did not answer like a leasehold sidecar") {
			t.Errorf("%s: exit %d, want %d and nothing printed\nstdout: %s\nstderr: %s", tc.name, r.code, exitcode.Unavailable, r.stdout, r.stderr)
		}
	}
	// A value this build does not know (a newer sidecar's kind of event)
	// is no sign of another server: it prints.
	hs := fakeSidecar(t, map[string]fakeAnswer{"GET /v1/leases/t/history": {200, "application/json",
		`{"events":[{"id":7,"task":"t","kind":"revoked","owner":"w1","token":1,"at":"2026-12-03T17:14:51.742Z","detail":"by ops","credential":"ops"}]}`}})
	leasehold(t, nil, "history", "t", "--addr", hs.URL).expect(t, 0, "  revoked  ", "by ops\n")
	// A refusal in the API's problem shape stays the sidecar's refusal,
	// with its exit status, even for a status openapi.yaml does not list
	// there (a newer sidecar's).
	hs = fakeSidecar(t, map[string]fakeAnswer{"GET /v1/leases/t": {403, "application/problem+json",
		`{"type":"urn:leasehold:problem:forbidden","title":"Forbidden","status":403,"detail":"credential ops may not read t"}`}})
	r := leasehold(t, nil, "get", "t", "--addr", hs.URL)
	r.expect(t, exitcode.NoPerm)
	if !strings.Contains(r.stderr, "credential ops may not read t") {
		t.Errorf("a problem's refusal: stderr %q", r.stderr)
	}
}

// Strings a sidecar answers that no real one would (owners, tasks, times,
// details with escape sequences) print escaped in every verb and in error
// messages, and as the same values in --json.
func TestHostileSidecarEscaped(t *testing.T) {
	t.Parallel()
	const evil = "\x1b]0;pwned\x07\x1b[2J\nforged\u009b1m\u202e"
	const shown = `\x1b]0;pwned\a\x1b[2J\nforged\u009b1m\u202e`
	ev := func(field string) string { return field + evil }
	jev := func(field string) string { return js(ev(field)) }
	const stamp = `"2026-12-03T17:14:51.742Z"` // times are checked: RFC 3339 or not the API's
	hs := fakeSidecar(t, map[string]fakeAnswer{
		"GET /v1/status": {200, "application/json", fmt.Sprintf(`{"version":%s,"started_at":%s,"store":{"kind":"postgres","ready":false,"detail":%s},`+
			`"streams":{"open":0,"max":1},"watchers":0,"batching":[{"op":%s,"statements":1,"operations":1}]}`, jev("v"), stamp, jev("d"), jev("op"))},
		"GET /v1/leases/t": {200, "application/json", fmt.Sprintf(`{"held":true,"lease":{"task":"t","owner":%s,"token":1,"acquired_at":%s,"renewed_at":%s,`+
			`"expires_at":%s,"ttl_ms":30000,"ttl_remaining_ms":1,"renew_count":0,"note":%s}}`, jev("o"), stamp, stamp, stamp, jev("n"))},
		"GET /v1/leases":           {200, "application/json", `{"leases":[` + leaseJSON(ev("t"), ev("o"), ev("n")) + `]}`},
		"GET /v1/leases/t/history": {200, "application/json", fmt.Sprintf(`{"events":[{"id":1,"task":"t","kind":"taken_over","owner":%s,"token":1,"at":%s,"detail":%s,"credential":%s}]}`, jev("o"), stamp, jev("d"), jev("c"))},
		"POST /v1/leases/t/claim": {409, "application/json", fmt.Sprintf(`{"acquired":false,"reason":"held","holder":{"owner":%s,"expires_at":%s,"ttl_remaining_ms":1},"detail":%s}`,
			jev("o"), stamp, jev("d"))},
		"POST /v1/leases/t/release": {422, "application/problem+json", fmt.Sprintf(`{"type":"urn:leasehold:problem:invalid-request","title":"Invalid","status":422,"detail":%s}`, jev("d"))},
	})
	for _, tc := range []struct {
		args []string
		code int
		want []string // in stdout+stderr
	}{
		{[]string{"status"}, exitcode.Unavailable, []string{"v" + shown, "not ready: d" + shown, "op" + shown}},
		{[]string{"get", "t"}, 0, []string{"o" + shown, "n" + shown}},
		{[]string{"list"}, 0, []string{"t" + shown, "o" + shown, "n" + shown}},
		{[]string{"history", "t"}, 0, []string{"o" + shown, "d" + shown}},
		{[]string{"claim", "t", "--owner", "w1"}, exitcode.Held, []string{"held by o" + shown + ", expires in "}},
		{[]string{"release", "t", "--owner", "w1"}, exitcode.Usage, []string{"d" + shown}},
	} {
		r := leasehold(t, nil, tc.args[0], append(tc.args[1:], "--addr", hs.URL)...)
		r.expect(t, tc.code)
		terminalSafe(t, tc.args[0]+" stdout", r.stdout)
		terminalSafe(t, tc.args[0]+" stderr", r.stderr)
		for _, w := range tc.want {
			if !strings.Contains(r.stdout+r.stderr, w) {
				t.Errorf("%s: output lacks %q:\n%s%s", tc.args[0], w, r.stdout, r.stderr)
			}
		}
		r = leasehold(t, nil, tc.args[0], append(tc.args[1:], "--addr", hs.URL, "--json")...)
		r.expect(t, tc.code)
		terminalSafe(t, tc.args[0]+" --json stdout", r.stdout)
		terminalSafe(t, tc.args[0]+" --json stderr", r.stderr)
	}
	r := leasehold(t, nil, "get", "t", "--addr", hs.URL, "--json")
	if s := decode[api.LeaseState](t, r); s.Lease == nil || s.Lease.Owner != ev("o") || s.Lease.Note != ev("n") {
		t.Errorf("get --json does not carry the values as answered: %+v", s.Lease)
	}
}

// watch prints the events it is sent escaped, and as the same values in
// --json.
func TestWatchEscaped(t *testing.T) {
	t.Parallel()
	const evil = "\x1b]0;pwned\x07\nforged\u009b1m"
	for _, asJSON := range []bool{false, true} {
		ws := &watchScript{last: make(chan struct{}), scripts: []string{
			"event: ready\ndata: {\"position\": 1}\n\n" +
				fmt.Sprintf("id: 2\nevent: acquired\ndata: {\"id\":2,\"task\":%s,\"kind\":\"acquired\",\"owner\":%s,\"token\":1,\"at\":\"2026-12-02T17:34:02.123Z\",\"detail\":\"\",\"credential\":\"\"}\n\n",
					js("t"+evil), js("o"+evil)),
		}}
		hs := httptest.NewServer(ws)
		t.Cleanup(hs.Close)
		ctx, cancel := context.WithCancel(t.Context())
		go func() { <-ws.last; cancel() }()
		args := []string{"--addr", hs.URL}
		if asJSON {
			args = append(args, "--json")
		}
		var stdout, stderr bytes.Buffer
		if code := opcli.Main(ctx, "watch", args, func(string) string { return "" }, &stdout, &stderr); code != 0 {
			t.Fatalf("watch: exit %d: %s", code, stderr.String())
		}
		terminalSafe(t, "watch stdout", stdout.String())
		terminalSafe(t, "watch stderr", stderr.String())
		if asJSON {
			e := decode[api.Event](t, result{stdout: stdout.String()})
			if e.Task != "t"+evil || e.Owner != "o"+evil {
				t.Errorf("watch --json: %+v, want the values as sent", e)
			}
		} else if !strings.Contains(stdout.String(), `o\x1b]0;pwned\a\nforged\u009b1m`) {
			t.Errorf("watch: %q, want the owner escaped", stdout.String())
		}
	}
}

// An --addr with a password prints it masked in every message and output:
// usage errors, an unreachable sidecar, a server that is not a sidecar, a
// refusal, and status.
func TestAddrPasswordMasked(t *testing.T) {
	t.Parallel()
	withPassword := func(u string) string { return strings.Replace(u, "http://", "http://user:secret@", 1) }
	real := sidecarOn(t, testsidecar.OpenStore(t, testsidecar.SQLiteURL(t)), "", false)
	locked := sidecarOn(t, testsidecar.OpenStore(t, testsidecar.SQLiteURL(t)), "the-token", false)
	stopped := sidecarOn(t, testsidecar.OpenStore(t, testsidecar.SQLiteURL(t)), "", false)
	stopped.Close()
	html := fakeSidecar(t, nil)
	port := real.Listener.Addr().String()[strings.LastIndexByte(real.Listener.Addr().String(), ':'):]
	for _, tc := range []struct {
		name string
		addr string
		env  bool // from LEASEHOLD_ADDR
		code int
	}{
		{"status of a sidecar", withPassword(real.URL), false, 0},
		{"a refusal", withPassword(locked.URL), false, exitcode.NoPerm},
		{"unreachable", withPassword(stopped.URL), false, exitcode.Unavailable},
		{"unreachable, from the environment", withPassword(stopped.URL), true, exitcode.Unavailable},
		{"not a sidecar", withPassword(html.URL), false, exitcode.Unavailable},
		{"port out of range", "http://user:secret@127.0.0.1:99999", false, exitcode.Usage},
		{"port out of range, from the environment", "http://user:secret@127.0.0.1:99999", true, exitcode.Usage},
		{"a port that does not parse", "http://user:secret@127.0.0.1:x", false, exitcode.Usage},
		{"another scheme", "ftp://user:secret@127.0.0.1" + port, false, exitcode.Usage},
		{"a path", withPassword(real.URL) + "/v1/leases", false, exitcode.Usage},
		{"a query", withPassword(real.URL) + "/?password=secret", false, exitcode.Usage},
		{"no scheme", "user:secret@127.0.0.1" + port, false, exitcode.Usage},
	} {
		for _, verb := range [][]string{{"status"}, {"get", "t"}, {"list"}, {"history", "t"}, {"claim", "t"}, {"release", "t", "--owner", "w"}} {
			args, env := verb[1:len(verb):len(verb)], map[string]string(nil)
			if tc.env {
				env = map[string]string{"LEASEHOLD_ADDR": tc.addr}
			} else {
				args = append(args, "--addr", tc.addr)
			}
			r := leasehold(t, env, verb[0], args...)
			if verb[0] == "status" || tc.code != 0 {
				r.expect(t, tc.code)
			}
			if out := r.stdout + r.stderr; strings.Contains(out, "secret") {
				t.Errorf("%s, %s: the password is in the output:\n%s", tc.name, verb[0], out)
			}
			if verb[0] == "status" && tc.code != 0 && tc.code != exitcode.NoPerm && !strings.Contains(r.stderr, "xxxxx@") {
				t.Errorf("%s, %s: the address is not named, masked:\n%s", tc.name, verb[0], r.stderr)
			}
		}
	}
	// leasehold run, likewise.
	for _, addr := range []string{withPassword(stopped.URL), withPassword(html.URL), "http://user:secret@127.0.0.1:99999", "ftp://user:secret@127.0.0.1" + port} {
		for _, env := range []bool{false, true} {
			args, environ := []string{"--addr", addr}, map[string]string(nil)
			if env {
				args, environ = nil, map[string]string{"LEASEHOLD_ADDR": addr}
			}
			var stdout, stderr bytes.Buffer
			code := leaserun.Main(t.Context(), append(args, "--task", "t", "--", "true"), func(k string) string { return environ[k] }, nil, &stdout, &stderr)
			named := addr == withPassword(html.URL) || strings.Contains(stderr.String(), "xxxxx@") // its refusal names no address
			if code == 0 || strings.Contains(stdout.String()+stderr.String(), "secret") || !named {
				t.Errorf("leasehold run, --addr %s (env %v): exit %d; want a failure naming the address with the password masked:\n%s%s", addr, env, code, stdout.String(), stderr.String())
			}
		}
	}
	r := leasehold(t, nil, "status", "--addr", withPassword(real.URL))
	r.expect(t, 0, "sidecar   "+withPassword(real.URL)[:len("http://user:")]+"xxxxx@"+strings.TrimPrefix(real.URL, "http://")+"\n")
}

// A bad --addr (or LEASEHOLD_ADDR) is a usage error (64) that names it and
// the rule, alike in the operator commands and in leasehold run; the
// addresses one takes, the other takes too.
func TestAddrUsage(t *testing.T) {
	t.Parallel()
	stopped := sidecarOn(t, testsidecar.OpenStore(t, testsidecar.SQLiteURL(t)), "", false)
	stopped.Close()
	for _, tc := range []struct{ addr, why string }{
		{"http://127.0.0.1:99999", "port 99999 is out of range"},
		{"http://127.0.0.1:0", "port 0 is out of range"},
		{"http://127.0.0.1:port", "invalid port"},
		{"ftp://127.0.0.1:7411", `scheme "ftp" is not http or https`},
		{"127.0.0.1:7411", "no http:// or https://"},
		{"http://:7411", "names no host"},
		{"http://127.0.0.1:7411/v1", "has a path (/v1)"},
		{"http://127.0.0.1:7411?x=1", "has a query"},
		{"http://127.0.0.1:7411#top", "has a fragment"},
	} {
		for _, env := range []bool{false, true} {
			name, args, environ := "--addr", []string{"--addr", tc.addr}, map[string]string(nil)
			if env {
				name, args, environ = "LEASEHOLD_ADDR", nil, map[string]string{"LEASEHOLD_ADDR": tc.addr}
			}
			for _, verb := range [][]string{{"get", "t"}, {"list"}, {"watch"}} {
				r := leasehold(t, environ, verb[0], append(verb[1:len(verb):len(verb)], args...)...)
				if r.code != exitcode.Usage || !strings.Contains(r.stderr, name) || !strings.Contains(r.stderr, tc.why) || !strings.Contains(r.stderr, endpoint.AddrRule) {
					t.Errorf("%s %s %q: exit %d, stderr %q; want 64 naming %s, %q and the rule", verb[0], name, tc.addr, r.code, r.stderr, name, tc.why)
				}
			}
			var stdout, stderr bytes.Buffer
			code := leaserun.Main(t.Context(), append(args, "--task", "t", "--", "true"), func(k string) string { return environ[k] }, nil, &stdout, &stderr)
			if code != exitcode.Usage || !strings.Contains(stderr.String(), name) || !strings.Contains(stderr.String(), tc.why) || !strings.Contains(stderr.String(), endpoint.AddrRule) {
				t.Errorf("leasehold run %s %q: exit %d, stderr %q; want 64 naming %s, %q and the rule", name, tc.addr, code, stderr.String(), name, tc.why)
			}
		}
	}
	// What one takes the other takes: both then find no sidecar there.
	for _, addr := range []string{stopped.URL, stopped.URL + "/", strings.Replace(stopped.URL, "127.0.0.1", "localhost", 1)} {
		leasehold(t, nil, "get", "t", "--addr", addr).expect(t, exitcode.Unavailable)
		var stdout, stderr bytes.Buffer
		if code := leaserun.Main(t.Context(), []string{"--addr", addr, "--task", "t", "--", "true"}, func(string) string { return "" }, nil, &stdout, &stderr); code != exitcode.Unavailable {
			t.Errorf("leasehold run --addr %s: exit %d, want %d: %s", addr, code, exitcode.Unavailable, stderr.String())
		}
	}
}
