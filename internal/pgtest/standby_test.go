package pgtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/internal/pgtest"
)

// A synchronous standby has every acknowledged commit, refuses writes, and
// after the primary is killed and it is promoted, takes writes at the same
// multi-host URL that read-write sessions use.
func TestStandbyFailover(t *testing.T) {
	t.Parallel()
	primary := pgtest.StartServer(t, pgtest.WithSetting("synchronous_standby_names", "standby1"))
	standby := primary.StartStandby("standby1")
	multi := fmt.Sprintf("postgres://postgres@%s,%s/postgres?sslmode=disable&target_session_attrs=read-write",
		primary.HostPort(), standby.HostPort())

	// The standby reports sync once it has caught up with the primary.
	waitRow(t, primary.URL(), `SELECT count(*) FROM pg_stat_replication WHERE application_name = 'standby1' AND sync_state = 'sync'`, 1)

	// Synchronous: once the primary acknowledges the commit, the standby
	// has it (remote_apply is not the default, so poll for the replay).
	execSQL(t, primary.URL(), `CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)`)
	waitRow(t, standby.URL(), `SELECT count(*) FROM kept WHERE v = 42`, 1)

	err := tryExec(t, standby.URL(), `INSERT INTO kept VALUES (1)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("insert on the standby: %v, want SQLSTATE 25006 (read_only_sql_transaction)", err)
	}

	primary.Kill()
	standby.Promote()
	execSQL(t, multi, `INSERT INTO kept VALUES (43)`)
	var n int
	queryRow(t, standby.URL(), `SELECT count(*) FROM kept`, &n)
	if n != 2 {
		t.Fatalf("the promoted standby holds %d rows, want 2", n)
	}
}

func tryExec(t *testing.T, dbURL, sql string) error {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", dbURL, err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), sql)
	return err
}

// waitRow polls a count query until it answers want, for up to 30 s.
func waitRow(t *testing.T, dbURL, sql string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got int
		err := func() error {
			conn, err := pgx.Connect(t.Context(), dbURL)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			return conn.QueryRow(t.Context(), sql).Scan(&got)
		}()
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s: %d (err %v), want %d within 30s", sql, dbURL, got, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
