package pgtest_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// A dedicated server answers at its URL, refuses connections while stopped,
// and comes back at the same URL with its data.
func TestServerStopAndStart(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t)
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "postgres" || u.Hostname() != "127.0.0.1" || u.Port() == "" || u.User.Username() != "postgres" ||
		u.Path != "/postgres" || u.Query().Get("sslmode") != "disable" {
		t.Fatalf("URL %s, want postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable", srv.URL())
	}

	execSQL(t, srv.URL(), `CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)`)

	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.URL())
	if err == nil {
		conn.Close(context.Background())
		t.Fatal("connected to a stopped server")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("connect to a stopped server: %v, want connection refused", err)
	}

	srv.Start()
	var v int
	queryRow(t, srv.URL(), `SELECT v FROM kept`, &v)
	if v != 42 {
		t.Fatalf("after a restart the table holds %d, want 42", v)
	}

	srv.Restart()
	queryRow(t, srv.URL(), `SELECT v FROM kept`, &v)

	// An immediate stop (a crash, as far as the data is concerned) loses
	// nothing committed either.
	execSQL(t, srv.URL(), `INSERT INTO kept VALUES (43)`)
	for _, mode := range []string{"immediate", "fast"} {
		if err := srv.Bounce(mode); err != nil {
			t.Fatalf("Bounce(%s): %v", mode, err)
		}
		var n int
		queryRow(t, srv.URL(), `SELECT count(*) FROM kept`, &n)
		if n != 2 {
			t.Fatalf("after Bounce(%s) the table holds %d rows, want 2", mode, n)
		}
	}
	if err := srv.Bounce("smart"); err == nil {
		t.Fatal("Bounce accepted a mode other than fast and immediate")
	}
}

// Two dedicated servers at once get ports and directories of their own.
func TestServerTwoAtOnce(t *testing.T) {
	t.Parallel()
	a, b := pgtest.StartServer(t), pgtest.StartServer(t)
	if a.URL() == b.URL() {
		t.Fatalf("two servers share %s", a.URL())
	}
	a.Stop()
	var one int
	queryRow(t, b.URL(), `SELECT 1`, &one)
}

func execSQL(t *testing.T, dbURL, sql string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", dbURL, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryRow(t *testing.T, dbURL, sql string, dest ...any) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", dbURL, err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(t.Context(), sql).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// A synchronous standby has every commit the primary acknowledged, refuses
// writes until it is promoted, and a multi-host URL with
// target_session_attrs=read-write reaches whichever of the two is primary.
func TestStandbyFailover(t *testing.T) {
	t.Parallel()
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(true)
	if primary.URL() == standby.URL() {
		t.Fatalf("the standby shares the primary's URL %s", primary.URL())
	}
	multi := pgtest.MultiHostURL(standby, primary) // the standby first: it must be skipped

	execSQL(t, multi, `CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)`)
	var port int
	queryRow(t, multi, `SELECT current_setting('port')::int`, &port)
	if want := portOf(t, primary.URL()); port != want {
		t.Errorf("the multi-host URL reached port %d, want the primary's %d", port, want)
	}

	conn, err := pgx.Connect(t.Context(), standby.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var recovering bool
	if err := conn.QueryRow(t.Context(), `SELECT pg_is_in_recovery()`).Scan(&recovering); err != nil || !recovering {
		t.Fatalf("standby in recovery: %v %v", recovering, err)
	}
	_, err = conn.Exec(t.Context(), `INSERT INTO kept VALUES (1)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("write on the standby: %v, want SQLSTATE 25006", err)
	}

	primary.Kill()
	standby.Promote()
	var v int
	queryRow(t, multi, `SELECT v FROM kept`, &v) // synchronous: the acknowledged row is there
	if v != 42 {
		t.Fatalf("the promoted standby holds %d, want 42", v)
	}
	execSQL(t, multi, `INSERT INTO kept VALUES (43)`)
	queryRow(t, multi, `SELECT current_setting('port')::int`, &port)
	if want := portOf(t, standby.URL()); port != want {
		t.Errorf("after the failover the multi-host URL reached port %d, want the promoted standby's %d", port, want)
	}
}

func portOf(t *testing.T, dbURL string) int {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}
