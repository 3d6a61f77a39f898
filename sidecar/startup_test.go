package sidecar

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/internal/harness/readonly"
)

// serving runs Serve in the background until t ends and waits for it to
// log its address; it returns the address, the logs and Serve's result.
func serving(t *testing.T, cfg Config) (addr string, logs *lockedbuf.Buffer, done <-chan error) {
	t.Helper()
	logs = new(lockedbuf.Buffer)
	log, err := cli.NewLogger(cfg.LogFormat, logs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- Serve(ctx, cfg, log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-result; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "leasehold listening") {
				if _, rest, ok := strings.Cut(line, `"addr":"`); ok { // json
					addr, _, _ = strings.Cut(rest, `"`)
				} else {
					_, rest, _ = strings.Cut(line, "addr=")
					addr, _, _ = strings.Cut(rest, " ")
				}
				return addr, logs, result
			}
		}
		select {
		case err := <-result:
			result <- err // for the cleanup
			t.Fatalf("Serve returned before listening: %v\n%s", err, logs.String())
		case <-deadline:
			t.Fatalf("Serve did not listen within 30 s:\n%s", logs.String())
		case <-tick.C:
		}
	}
}

func status(t *testing.T, method, url, body string) int {
	t.Helper()
	code, _ := answer(t, method, url, body)
	return code
}

// TestServeMigratesBeforeServing: on a store that answers, the first
// readyz and the first claim after the address is logged succeed; nothing
// is answered 503 while the schema is migrated.
func TestServeMigratesBeforeServing(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "leasehold.db") },
		"postgres": func(t *testing.T) string { return pgtest.NewDatabase(t) },
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr, logs, _ := serving(t, Config{Listen: "127.0.0.1:0", Store: store(t), LogFormat: "text"})
			if got := status(t, http.MethodGet, "http://"+addr+"/readyz", ""); got != http.StatusOK {
				t.Errorf("first readyz: %d, want 200\n%s", got, logs.String())
			}
			if got := status(t, http.MethodPost, "http://"+addr+"/v1/leases/first/claim", `{"owner":"w1","ttl_ms":60000}`); got != http.StatusOK {
				t.Errorf("first claim: %d, want 200\n%s", got, logs.String())
			}
			out := logs.String()
			if m, l := strings.Index(out, "store migrated"), strings.Index(out, "leasehold listening"); m < 0 || m > l {
				t.Errorf("not migrated before listening:\n%s", out)
			}
		})
	}
}

// TestServeRefusesAnUnusableSQLiteFile: failures that waiting does not heal
// end Serve at start with the reason, before it listens.
func TestServeRefusesAnUnusableSQLiteFile(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		path   func(t *testing.T) string
		reason string
	}{
		"missing directory": {
			path:   func(t *testing.T) string { return filepath.Join(t.TempDir(), "missing", "leasehold.db") },
			reason: "cannot open the database file",
		},
		"not a database": {
			path: func(t *testing.T) string {
				path := filepath.Join(t.TempDir(), "leasehold.db")
				if err := os.WriteFile(path, []byte(strings.Repeat("not an SQLite database ", 10)), 0o600); err != nil {
					t.Fatal(err)
				}
				return path
			},
			reason: "not a database",
		},
		"read-only file": {
			path: func(t *testing.T) string {
				path := filepath.Join(t.TempDir(), "leasehold.db")
				migrateFile(t, path)
				readonly.Make(t, path)
				return path
			},
			reason: "not writable",
		},
		"read-only directory": {
			path: func(t *testing.T) string {
				dir := t.TempDir()
				migrateFile(t, filepath.Join(dir, "leasehold.db"))
				readonly.Make(t, dir)
				return filepath.Join(dir, "leasehold.db")
			},
			// SQLite cannot create the -wal file there.
			reason: "cannot open the database file",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var logs lockedbuf.Buffer
			log, _ := cli.NewLogger("text", &logs)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := Serve(ctx, Config{Listen: "127.0.0.1:0", Store: "sqlite:" + c.path(t), LogFormat: "text"}, log)
			if err == nil || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("Serve = %v, want an error saying %q\n%s", err, c.reason, logs.String())
			}
			if strings.Contains(logs.String(), "listening") {
				t.Errorf("listened before refusing:\n%s", logs.String())
			}
		})
	}
}

// migrateFile creates a migrated SQLite file at path.
func migrateFile(t *testing.T, path string) {
	t.Helper()
	if err := cli.Migrate(context.Background(), "sqlite:"+path, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
}

// TestServeWaitsForAStoreThatIsDown: a PostgreSQL store that does not
// answer at start is not a reason to exit: Serve listens, answers 503, and
// keeps migrating in the background. The password, given every way a URL
// can give it, is in none of its log lines.
func TestServeWaitsForAStoreThatIsDown(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-Pw"
	closed := strings.Replace(pgtest.ClosedURL(t), "leasehold@", "leasehold:"+secret+"@", 1)
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			addr, logs, _ := serving(t, Config{Listen: "127.0.0.1:0", Store: closed + "&Password=" + secret, LogFormat: format})
			if got := status(t, http.MethodGet, "http://"+addr+"/readyz", ""); got != http.StatusServiceUnavailable {
				t.Errorf("readyz on a store that is down: %d, want 503", got)
			}
			if got := status(t, http.MethodPost, "http://"+addr+"/v1/leases/t/claim", `{"owner":"w1"}`); got != http.StatusServiceUnavailable {
				t.Errorf("claim on a store that is down: %d, want 503", got)
			}
			waitForLog(t, logs, "retrying")
			out := logs.String()
			if !strings.Contains(out, "store unavailable at start") {
				t.Errorf("log lacks the start-up failure:\n%s", out)
			}
			if strings.Contains(out, "s3cr3t") {
				t.Errorf("log holds the password:\n%s", out)
			}
		})
	}
}

// TestServeErrorHoldsNoSecret: a store URL that does not parse fails Serve;
// neither its error nor its log quotes the password.
func TestServeErrorHoldsNoSecret(t *testing.T) {
	t.Parallel()
	for _, store := range []string{
		"postgres://leasehold:s3cr3t pw@127.0.0.1:1/db",
		"postgres://leasehold:s3cr3t%zz@127.0.0.1:1/db",
		"postgres://leasehold@127.0.0.1:notaport/db?password=s3cr3t",
		"mysql://leasehold:s3cr3t@127.0.0.1/db",
	} {
		var logs lockedbuf.Buffer
		log, _ := cli.NewLogger("text", &logs)
		err := Serve(context.Background(), Config{Listen: "127.0.0.1:0", Store: store, LogFormat: "text"}, log)
		if err == nil {
			t.Errorf("Serve(%q) succeeded", store)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(logs.String(), "s3cr3t") {
			t.Errorf("Serve(%q) = %v, log:\n%s", store, err, logs.String())
		}
	}
}

func waitForLog(t *testing.T, logs *lockedbuf.Buffer, text string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(logs.String(), text) {
		select {
		case <-deadline:
			t.Fatalf("no %q in the log within 30 s:\n%s", text, logs.String())
		case <-tick.C:
		}
	}
}

// TestServeOnReadOnlyPostgres: a sidecar whose database turns read-only
// (default_transaction_read_only, as on a standby) is not ready and answers
// claims 503 saying so; once the database is writable again it serves
// again without a restart.
func TestServeOnReadOnlyPostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	if err := cli.Migrate(context.Background(), url, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var db string
	if err := conn.QueryRow(context.Background(), `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	alter := func(set string) {
		t.Helper()
		if _, err := conn.Exec(context.Background(), `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` `+set); err != nil {
			t.Fatal(err)
		}
	}
	alter(`SET default_transaction_read_only = on`)

	addr, logs, _ := serving(t, Config{Listen: "127.0.0.1:0", Store: url, LogFormat: "text"})
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/readyz", ""},
		{http.MethodPost, "/v1/leases/t/claim", `{"owner":"w1","ttl_ms":60000}`},
	} {
		code, body := answer(t, c.method, "http://"+addr+c.path, c.body)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "read-only") {
			t.Errorf("%s %s on a read-only database: %d %s, want 503 saying read-only\n%s", c.method, c.path, code, body, logs.String())
		}
	}

	alter(`RESET default_transaction_read_only`)
	if code, body := answer(t, http.MethodGet, "http://"+addr+"/readyz", ""); code != http.StatusOK {
		t.Errorf("readyz once the database is writable: %d %s", code, body)
	}
	if code, body := answer(t, http.MethodPost, "http://"+addr+"/v1/leases/t/claim", `{"owner":"w1","ttl_ms":60000}`); code != http.StatusOK {
		t.Errorf("claim once the database is writable: %d %s", code, body)
	}
}

func answer(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
