package fence_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/client/fence"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// resource is an HTTP resource behind the middleware: its handler counts
// its runs and writes a row in a transaction fenced again with what the
// middleware checked.
type resource struct {
	*httptest.Server
	ran atomic.Int64
	log bytes.Buffer
}

func newResource(t *testing.T, d fence.Dialect, db *sql.DB) *resource {
	t.Helper()
	r := &resource{}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.ran.Add(1)
		task, token, ok := fence.FromContext(req.Context())
		if !ok {
			http.Error(w, "no fence in the context", http.StatusInternalServerError)
			return
		}
		tx, err := db.BeginTx(req.Context(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer func() { _ = tx.Rollback() }()
		if err := fence.Check(req.Context(), tx, d, task, token); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		if err := tx.Commit(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "written by "+task+" at token "+strings.TrimSpace(req.Header.Get(fence.HeaderToken)))
	})
	log := slog.New(slog.NewTextHandler(&r.log, nil))
	r.Server = httptest.NewServer(fence.Middleware(db, d, h, fence.WithLogger(log)))
	t.Cleanup(r.Close)
	return r
}

// send makes a request with the given headers (a nil value: the header is
// left out) and returns the status, content type and body.
func (r *resource) send(t *testing.T, headers map[string][]string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.URL+"/report", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
}

func fenceHeaders(task string, token int64) map[string][]string {
	h := http.Header{}
	fence.SetHeaders(h, task, token)
	return h
}

// The middleware's answers, on both dialects: the handler runs only for an
// accepted token, and every refusal is the contract's problem document.
func TestMiddleware(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d fence.Dialect, db *sql.DB) {
		r := newResource(t, d, installed(t, d, db))
		for _, step := range []struct {
			name    string
			headers map[string][]string
			status  int
			body    string // the exact body of a problem; a handler's text
		}{
			{"first", fenceHeaders("nightly", 5), 200, "written by nightly at token 5"},
			{"equal", fenceHeaders("nightly", 5), 200, "written by nightly at token 5"},
			{"higher", fenceHeaders("nightly", 7), 200, "written by nightly at token 7"},
			{"stale", fenceHeaders("nightly", 3), 409,
				`{"type":"urn:leasehold:problem:stale-token","title":"Stale fencing token","status":409,` +
					`"detail":"stale fencing token 3 for task \"nightly\": highest seen is 7","task":"nightly","token":3,"highest_token":7}`},
			{"no token", map[string][]string{"Leasehold-Task": {"nightly"}}, 428,
				`{"type":"urn:leasehold:problem:fence-required","title":"Fencing token required","status":428,"detail":"Leasehold-Token header is required"}`},
			{"no task", map[string][]string{"Leasehold-Token": {"7"}}, 428,
				`{"type":"urn:leasehold:problem:fence-required","title":"Fencing token required","status":428,"detail":"Leasehold-Task header is required"}`},
			{"neither", nil, 428,
				`{"type":"urn:leasehold:problem:fence-required","title":"Fencing token required","status":428,"detail":"Leasehold-Task and Leasehold-Token headers are required"}`},
			{"empty task", map[string][]string{"Leasehold-Task": {""}, "Leasehold-Token": {"7"}}, 400,
				`{"type":"urn:leasehold:problem:invalid-fence","title":"Invalid fencing header","status":400,"detail":"Leasehold-Task header must not be empty"}`},
			{"token zero", map[string][]string{"Leasehold-Task": {"nightly"}, "Leasehold-Token": {"0"}}, 400, tokenRule},
			{"token negative", map[string][]string{"Leasehold-Task": {"nightly"}, "Leasehold-Token": {"-7"}}, 400, tokenRule},
			{"token signed", map[string][]string{"Leasehold-Task": {"nightly"}, "Leasehold-Token": {"+7"}}, 400, tokenRule},
			{"token fraction", map[string][]string{"Leasehold-Task": {"nightly"}, "Leasehold-Token": {"7.0"}}, 400, tokenRule},
			{"token word", map[string][]string{"Leasehold-Task": {"nightly"}, "Leasehold-Token": {"seven"}}, 400, tokenRule},
			{"token empty", map[string][]string{"Leasehold-Task": {"nightly"}, "Leasehold-Token": {""}}, 400, tokenRule},
			{"token too big", map[string][]string{"Leasehold-Task": {"nightly"}, "Leasehold-Token": {"9223372036854775808"}}, 400, tokenRule},
			{"token twice", map[string][]string{"Leasehold-Task": {"nightly"}, "Leasehold-Token": {"7", "8"}}, 400,
				`{"type":"urn:leasehold:problem:invalid-fence","title":"Invalid fencing header","status":400,"detail":"Leasehold-Token header must be given once"}`},
		} {
			before := r.ran.Load()
			status, ctype, body := r.send(t, step.headers)
			if status != step.status || body != step.body {
				t.Errorf("%s: %d %s\nwant %d %s", step.name, status, body, step.status, step.body)
			}
			ran := r.ran.Load() - before
			if step.status == 200 {
				if ran != 1 {
					t.Errorf("%s: the handler ran %d times, want once", step.name, ran)
				}
				continue
			}
			if ran != 0 {
				t.Errorf("%s: the handler ran on a %d", step.name, status)
			}
			if ctype != "application/problem+json" {
				t.Errorf("%s: Content-Type %q, want application/problem+json", step.name, ctype)
			}
			var p map[string]any
			if err := json.Unmarshal([]byte(body), &p); err != nil || p["status"] != float64(status) {
				t.Errorf("%s: the body is not a problem of status %d: %s", step.name, status, body)
			}
		}
		if got := recorded(t, db, "nightly"); got != 7 {
			t.Errorf("the record is %d, want 7", got)
		}
	})
}

const tokenRule = `{"type":"urn:leasehold:problem:invalid-fence","title":"Invalid fencing header","status":400,"detail":"Leasehold-Token header must be a decimal integer of at least 1"}`

// A database that fails, or has no fence, is 503 fence-unavailable with no
// secret in the answer; the cause is logged, and the handler does not run.
func TestMiddlewareUnavailable(t *testing.T) {
	t.Parallel()
	unreachable := func(t *testing.T) *sql.DB {
		// The server's URL, its port closed, with a password that must not show.
		u := strings.Replace(pgtest.ClosedURL(t), "leasehold@", "leasehold:s3cr3t@", 1)
		db, err := sql.Open("pgx", u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	closed := func(t *testing.T) *sql.DB {
		db := installed(t, fence.SQLite, openSQLite(t))
		_ = db.Close()
		return db
	}
	for _, c := range []struct {
		name   string
		d      fence.Dialect
		open   func(t *testing.T) *sql.DB
		detail string
	}{
		{"postgres unreachable", fence.Postgres, unreachable, "the fence check could not run on the resource database"},
		{"sqlite closed", fence.SQLite, closed, "the fence check could not run on the resource database"},
		{"sqlite without the fence", fence.SQLite, openSQLite, "the resource database has no fence installed"},
		{"postgres without the fence", fence.Postgres, openPostgres, "the resource database has no fence installed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newResource(t, c.d, c.open(t))
			status, ctype, body := r.send(t, fenceHeaders("nightly", 1))
			want := `{"type":"urn:leasehold:problem:fence-unavailable","title":"Fence unavailable","status":503,"detail":"` + c.detail + `"}`
			if status != 503 || ctype != "application/problem+json" || body != want {
				t.Errorf("%d %s %s\nwant 503 application/problem+json %s", status, ctype, body, want)
			}
			if r.ran.Load() != 0 {
				t.Error("the handler ran")
			}
			if !strings.Contains(r.log.String(), "fence check failed") {
				t.Errorf("the cause was not logged: %q", r.log.String())
			}
			if strings.Contains(body, "s3cr3t") {
				t.Errorf("the answer holds the password: %s", body)
			}
		})
	}
}

// A holder superseded after the middleware ran is refused by the fence in
// the handler's own write transaction.
func TestMiddlewareHandlerFencesAgain(t *testing.T) {
	t.Parallel()
	db := installed(t, fence.SQLite, openSQLite(t))
	var superseded atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		task, token, _ := fence.FromContext(req.Context())
		if superseded.Load() {
			// A newer holder fenced between the middleware and this write.
			if err := checkTx(t, db, fence.SQLite, task, token+1); err != nil {
				t.Error(err)
			}
		}
		tx, err := db.BeginTx(req.Context(), nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer func() { _ = tx.Rollback() }()
		if err := fence.Check(req.Context(), tx, fence.SQLite, task, token); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		_ = tx.Commit()
	})
	srv := httptest.NewServer(fence.Middleware(db, fence.SQLite, h))
	defer srv.Close()
	post := func() (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, nil)
		fence.SetHeaders(req.Header, "nightly", 3)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	if status, body := post(); status != 200 {
		t.Fatalf("token 3, not superseded: %d %s", status, body)
	}
	superseded.Store(true)
	if status, body := post(); status != 409 || body != `stale fencing token 3 for task "nightly": highest seen is 4` {
		t.Errorf("token 3, superseded while the handler ran: %d %s", status, body)
	}
}

// FromContext outside the middleware says so.
func TestFromContextOutside(t *testing.T) {
	t.Parallel()
	if task, token, ok := fence.FromContext(t.Context()); ok || task != "" || token != 0 {
		t.Errorf("FromContext outside the middleware: %q %d %v", task, token, ok)
	}
}
