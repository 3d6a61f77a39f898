package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/postgres"
	"github.com/leasehold/leasehold/leasecore/sqlite"
	"github.com/leasehold/leasehold/sidecar/api"
)

// openSQLite opens a SQLite store on a fresh temporary file; migrate says
// whether to create its schema. It is closed when t ends.
func openSQLite(t testing.TB, migrate bool) *sqlite.Store {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "leasehold.db"))
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if migrate {
		if err := store.Migrate(context.Background()); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	return store
}

// openUnreachable opens a SQLite store whose directory does not exist: every
// operation is unavailable.
func openUnreachable(t *testing.T) *sqlite.Store {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "missing", "leasehold.db"))
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// testServer is a Server behind httptest, with a client whose every response
// is checked against openapi.yaml.
type testServer struct {
	t      *testing.T
	srv    *Server
	store  leasecore.Store // the store the server was given
	url    string
	client *http.Client
	token  string // sent as a bearer token when non-empty
}

type serverOption func(*Options)

func withStore(s leasecore.Store) serverOption { return func(o *Options) { o.Store = s } }
func withToken(tok string) serverOption {
	return func(o *Options) { o.Token = []byte(tok) }
}
func withDeclarations(maxAge time.Duration, require bool) serverOption {
	return func(o *Options) { o.DeclarationsMaxAge, o.RequireDeclared = maxAge, require }
}

// newTestServer starts a server over a migrated SQLite store (unless an
// option gives another store) and marks it migrated.
func newTestServer(t *testing.T, opts ...serverOption) *testServer {
	t.Helper()
	ts := startServer(t, opts...)
	if err := ts.srv.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return ts
}

// startServer is newTestServer without the migration: readyz says 503.
func startServer(t *testing.T, opts ...serverOption) *testServer {
	t.Helper()
	o := Options{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.Store == nil {
		o.Store = openSQLite(t, false)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	sp, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	return &testServer{
		t:      t,
		srv:    srv,
		store:  o.Store,
		url:    hs.URL,
		client: &http.Client{Transport: &conformingTransport{t: t, spec: sp, base: hs.Client().Transport}},
	}
}

// response is what a test looks at: status, headers and the raw body.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with body (JSON when contentType is application/json)
// and returns the response, already checked against openapi.yaml.
func (ts *testServer) do(method, path, contentType string, body []byte) response {
	ts.t.Helper()
	return ts.doCtx(context.Background(), method, path, contentType, body)
}

// doCtx is do under ctx.
func (ts *testServer) doCtx(ctx context.Context, method, path, contentType string, body []byte) response {
	ts.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, ts.url+path, r)
	if err != nil {
		ts.t.Fatalf("NewRequest %s %s: %v", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if ts.token != "" {
		req.Header.Set("Authorization", "Bearer "+ts.token)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// post sends v as a JSON body.
func (ts *testServer) post(path string, v any) response {
	ts.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		ts.t.Fatal(err)
	}
	return ts.do(http.MethodPost, path, "application/json", b)
}

func (ts *testServer) get(path string) response {
	ts.t.Helper()
	return ts.do(http.MethodGet, path, "", nil)
}

// decode decodes the body into a T, failing the test on error.
func decode[T any](t *testing.T, r response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decoding %T from %d %s: %v", v, r.status, r.body, err)
	}
	return v
}

// expect fails the test unless the response has the status.
func expect(t *testing.T, r response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body: %s", r.status, status, r.body)
	}
}

// expectProblem checks a problem+json response and returns it.
func expectProblem(t *testing.T, r response, status int, typ string) api.Problem {
	t.Helper()
	expect(t, r, status)
	if ct := r.header.Get("Content-Type"); ct != contentTypeProblem {
		t.Fatalf("Content-Type %q, want %s", ct, contentTypeProblem)
	}
	p := decode[api.Problem](t, r)
	if p.Status != status || p.Type != typ || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want status %d type %s with title and detail", p, status, typ)
	}
	return p
}

// conformingTransport checks every response against openapi.yaml: its status
// must be declared for the operation and its headers and body must match the
// declared schema. A response to a path the document does not know (404,
// 405) must be a Problem. A response that does not conform fails the test.
type conformingTransport struct {
	t    *testing.T
	spec *specRouter
	base http.RoundTripper
}

func (ct *conformingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := ct.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := ct.check(req, resp, body); err != nil {
		ct.t.Errorf("%s %s → %d does not conform to openapi.yaml: %v\nbody: %s", req.Method, req.URL.RequestURI(), resp.StatusCode, err, body)
	}
	return resp, nil
}

func (ct *conformingTransport) check(req *http.Request, resp *http.Response, body []byte) error {
	if strings.Contains(strings.ToLower(string(body)), "<html") || strings.Contains(string(body), "goroutine ") {
		return errorString("HTML or a stack trace in the body")
	}
	head := req.Method == http.MethodHead
	if head {
		// HEAD is answered as the GET of the same path, without the body.
		if len(body) != 0 {
			return errorString("HEAD answered with a body")
		}
		if resp.StatusCode == http.StatusMethodNotAllowed {
			return nil // HEAD on the keepalive stream or a POST route
		}
		get := req.Clone(req.Context())
		get.Method = http.MethodGet
		req = get
	}
	route, params, err := ct.spec.findRoute(req)
	if err != nil {
		if got := resp.Header.Get("Content-Type"); got != contentTypeProblem {
			return errorString("Content-Type " + got + ", want " + contentTypeProblem)
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return err
		}
		return ct.spec.doc.Components.Schemas["Problem"].Value.VisitJSON(v)
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	input.Options.ExcludeResponseBody = head
	return openapi3filter.ValidateResponse(context.Background(), input)
}

type errorString string

func (e errorString) Error() string { return string(e) }

// Seams: stores that embed a real one and override one method.

// failingClaimStore answers every claim unavailable.
type failingClaimStore struct{ leasecore.Store }

func (failingClaimStore) Claim(context.Context, leasecore.ClaimParams) (*leasecore.Lease, error) {
	return nil, leasecore.Unavailable("claim", errorString("connection refused"))
}

// panickingGetStore panics on Get.
type panickingGetStore struct{ leasecore.Store }

func (panickingGetStore) Get(context.Context, string) (*leasecore.Lease, error) {
	panic("driver bug")
}

// flakyMigrateStore fails its first migration.
type flakyMigrateStore struct {
	leasecore.Store
	calls chan struct{} // receives one value per call
}

func (s flakyMigrateStore) Migrate(ctx context.Context) error {
	select {
	case s.calls <- struct{}{}:
		return leasecore.Unavailable("migrate", errorString("database is starting up"))
	default:
		return s.Store.Migrate(ctx)
	}
}

// eachStore runs f once over a server on a fresh SQLite file and once over a
// server on a fresh PostgreSQL database, as parallel subtests; opts apply to
// both servers.
func eachStore(t *testing.T, f func(t *testing.T, ts *testServer), opts ...serverOption) {
	t.Helper()
	stores := []struct {
		name string
		open func(t *testing.T) leasecore.Store
	}{
		{"sqlite", func(t *testing.T) leasecore.Store { return openSQLite(t, false) }},
		{"postgres", func(t *testing.T) leasecore.Store { return openPostgres(t) }},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			o := append([]serverOption{withStore(s.open(t))}, opts...)
			f(t, newTestServer(t, o...))
		})
	}
}

// openPostgres opens a PostgreSQL store on a fresh database (see
// internal/harness/pgtest for when that skips or fails). It is closed when t ends.
func openPostgres(t testing.TB) leasecore.Store {
	t.Helper()
	store, err := postgres.Open(context.Background(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}
