package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar"
	"github.com/leasehold/leasehold/sidecar/api"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// problemType matches a problem type URI wherever the server's source or
// the contract spells one.
var problemType = regexp.MustCompile(`urn:leasehold:problem:[a-z-]+`)

// Every problem type the server's source or openapi.yaml names has a row
// in problemTable: a new problem type without one fails here.
func TestProblemTableCoversServer(t *testing.T) {
	t.Parallel()
	found := map[string]string{} // type: where
	add := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range problemType.FindAllString(string(b), -1) {
			found[m] = path
		}
	}
	add(filepath.Join("..", "openapi.yaml"))
	for _, dir := range []string{filepath.Join("..", "sidecar"), filepath.Join("..", "sidecar", "api")} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				add(f)
			}
		}
	}
	if len(found) < 10 {
		t.Fatalf("found only %d problem types; is the scan still looking in the right places? %v", len(found), found)
	}
	for typ, where := range found {
		if _, ok := problemTable[typ]; !ok {
			t.Errorf("problem type %s (in %s) has no row in problemTable", typ, where)
		}
	}
	if _, ok := problemTable[api.ProblemBlank]; !ok {
		t.Error("about:blank has no row in problemTable")
	}
}

// Each problem type, provoked from a real sidecar where a request can
// provoke it, and given to the table otherwise, is the outcome the package
// documentation promises; so is each model answer.
func TestProblemOutcomes(t *testing.T) {
	t.Parallel()
	st, err := storeurl.Open(context.Background(), storeurl.MustParse("sqlite:"+filepath.Join(t.TempDir(), "l.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	credFile := filepath.Join(t.TempDir(), "credentials.json")
	sum := sha256.Sum256([]byte("lh_billing"))
	b, _ := json.Marshal(auth.File{Credentials: []auth.FileCredential{{Name: "billing", TokenSHA256: hex.EncodeToString(sum[:]), Prefixes: []string{"billing/", "leasehold:"}, Rights: []auth.Right{"hold"}}}})
	if err := os.WriteFile(credFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	book, err := auth.OpenCredentialsFile(credFile, auth.BookOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hs := testsidecar.Serve(t, sidecar.Options{Store: st, Credentials: book, RequireDeclared: true})
	// Declare billing/nightly and claim it as other, so that held and lost
	// can be provoked.
	if _, err := leasecore.New(st).CreateTask(context.Background(), leasecore.TaskDecl{Name: "billing/nightly", TTL: 30 * time.Second}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	if _, err := leasecore.New(st).Claim(context.Background(), leasecore.ClaimParams{Task: "billing/nightly", Owner: "other"}); err != nil {
		t.Fatal(err)
	}

	type want func(error) bool
	is := func(target error) want { return func(err error) bool { return errors.Is(err, target) } }
	as := func(f func(error) bool) want { return f }
	field := func(name string) want {
		return func(err error) bool {
			var ve *leasecore.ValidationError
			return errors.As(err, &ve) && ve.Field == name
		}
	}
	status := func(code int) want {
		return func(err error) bool {
			var pe *ProblemError
			return errors.As(err, &pe) && pe.Status == code && !errors.Is(err, leasecore.ErrUnavailable)
		}
	}
	const token = "lh_billing"
	cases := []struct {
		name, op, task     string
		method, path, body string
		header             map[string]string
		typ                string // the problem type it provokes; "" for a model answer
		want               want
	}{
		{"held", "claim", "billing/nightly", "POST", "/v1/leases/billing%2Fnightly/claim", `{"owner":"w1"}`, nil, "",
			as(func(err error) bool {
				var h *leasecore.HeldError
				return errors.As(err, &h) && h.Holder.Owner == "other"
			})},
		{"lost", "renew", "billing/nightly", "POST", "/v1/leases/billing%2Fnightly/renew", `{"owner":"w1"}`, nil, "",
			as(func(err error) bool {
				var l *leasecore.LostError
				return errors.As(err, &l) && l.Reason == leasecore.LostHeldByOther
			})},
		{"malformed", "claim", "billing/nightly", "POST", "/v1/leases/billing%2Fnightly/claim", `{"owner":`, nil, api.ProblemMalformed, field("body")},
		{"invalid", "claim", "billing/nightly", "POST", "/v1/leases/billing%2Fnightly/claim", `{"owner":"w1","ttl_ms":1}`, nil, api.ProblemInvalid, field("ttl_ms")},
		{"undeclared", "claim", "billing/undeclared", "POST", "/v1/leases/billing%2Fundeclared/claim", `{"owner":"w1"}`, nil, api.ProblemUndeclared, is(leasecore.ErrUndeclared)},
		{"reserved", "claim", "leasehold:prune", "POST", "/v1/leases/leasehold:prune/claim", `{"owner":"w1"}`, nil, api.ProblemReserved, is(leasecore.ErrReserved)},
		{"forbidden", "claim", "payroll/run", "POST", "/v1/leases/payroll%2Frun/claim", `{"owner":"w1"}`, nil, api.ProblemForbidden, is(leasecore.ErrForbidden)},
		{"cross-site", "claim", "billing/nightly", "POST", "/v1/leases/billing%2Fnightly/claim", `{"owner":"w1"}`, map[string]string{"Sec-Fetch-Site": "cross-site"}, api.ProblemCrossSite, is(leasecore.ErrForbidden)},
		{"host not allowed", "get", "billing/nightly", "GET", "/v1/leases/billing%2Fnightly", "", map[string]string{"Host": "attacker.example"}, api.ProblemHostNotAllowed, status(http.StatusMisdirectedRequest)},
		{"unauthorized", "claim", "billing/nightly", "POST", "/v1/leases/billing%2Fnightly/claim", `{"owner":"w1"}`, map[string]string{"Authorization": "Bearer lh_wrong"}, api.ProblemBlank, is(ErrUnauthorized)},
		{"no route", "get", "", "GET", "/v1/nothing", "", nil, api.ProblemBlank, status(http.StatusNotFound)},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, hs.URL+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range tc.header {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p api.Problem
		_ = json.Unmarshal(body, &p)
		if p.Type != tc.typ {
			t.Errorf("%s: the sidecar answered %d type %q, want type %q: %s", tc.name, resp.StatusCode, p.Type, tc.typ, body)
			continue
		}
		seen[tc.typ] = true
		got := refusal(tc.op, tc.task, resp.StatusCode, resp.Header, body, noScrub)
		if !tc.want(got) {
			t.Errorf("%s: %d %s is %v (%T)", tc.name, resp.StatusCode, body, got, got)
		}
		if tc.typ != "" && !errors.As(got, new(*ProblemError)) {
			t.Errorf("%s: %v does not carry its problem", tc.name, got)
		}
	}

	// The store down: the sidecar's own 503 problem (a read) and its JSON
	// answer (a claim).
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := New(hs.URL, WithToken(token), WithOwner("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(t.Context(), "billing/nightly"); !errors.Is(err, leasecore.ErrUnavailable) || !errors.As(err, new(*ProblemError)) {
		t.Errorf("get with the store down: %v, want unavailable from a problem", err)
	} else {
		seen[api.ProblemUnavailable] = true
	}
	if _, err := c.Claim(t.Context(), ClaimParams{Task: "billing/nightly"}); !errors.Is(err, leasecore.ErrUnavailable) || errors.Is(err, leasecore.ErrHeld) {
		t.Errorf("claim with the store down: %v, want unavailable", err)
	}

	// What no request provokes from a read-only sidecar, through the table.
	for typ, want := range map[string]want{
		api.ProblemNotFound: is(leasecore.ErrNotFound),
		api.ProblemExists:   is(leasecore.ErrExists),
		api.ProblemInUse:    is(leasecore.ErrInUse),
		api.ProblemManaged:  is(leasecore.ErrManaged),
	} {
		b, _ := json.Marshal(api.Problem{Type: typ, Title: "t", Status: 409, Detail: "d"})
		if err := refusal("get", "t", 409, http.Header{"Content-Type": {"application/problem+json"}}, b, noScrub); !want(err) {
			t.Errorf("%s: %v", typ, err)
		}
		seen[typ] = true
	}
	// A 500 is unavailable (never held); a refusal that is no problem is a
	// ProblemError holding its text.
	if err := refusal("claim", "t", 500, http.Header{"Content-Type": {"application/problem+json"}}, []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"bug"}`), noScrub); !errors.Is(err, leasecore.ErrUnavailable) {
		t.Errorf("500: %v", err)
	}
	if err := refusal("claim", "t", 404, http.Header{"Content-Type": {"text/plain"}}, []byte("no such page"), noScrub); err == nil || err.Error() != "404 Not Found: no such page" {
		t.Errorf("a text 404: %v", err)
	}
	for typ := range problemTable {
		if !seen[typ] {
			t.Errorf("problem type %s is not checked by TestProblemOutcomes", typ)
		}
	}
}

// A problem's text says each invalid param once: the sidecar's detail names
// them already, and a param it does not name is added.
func TestProblemTextSaysEachParamOnce(t *testing.T) {
	rule := `must be at most 3600000, the max_ttl of task "t1"`
	p := &ProblemError{Status: 422, Detail: "invalid request: ttl_ms: " + rule,
		InvalidParams: []api.InvalidParam{{Name: "ttl_ms", Reason: rule}}}
	if got := p.Error(); strings.Count(got, rule) != 1 {
		t.Errorf("problem text %q says the rule %d times, want once", got, strings.Count(got, rule))
	}
	p = &ProblemError{Status: 422, Detail: "bad input",
		InvalidParams: []api.InvalidParam{{Name: "owner", Reason: "must not be empty"}}}
	if got := p.Error(); !strings.Contains(got, "owner must not be empty") {
		t.Errorf("problem text %q lost the param its detail does not name", got)
	}
}
