package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/pgbouncer"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

// TestGivenUpStatementsKeepPgBouncersServer: statements whose callers give
// up while they wait in PgBouncer's queue answer their callers at once,
// and cost PgBouncer no server connection when it gets to them. With pgx's
// default (hang up on a cancelled context) each of them made PgBouncer
// close its one server connection and log in again, which is how a fleet
// behind PgBouncer stayed unavailable after a PostgreSQL restart (pool.go).
func TestGivenUpStatementsKeepPgBouncersServer(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	b := pgbouncer.StartT(t, dbURL, pgbouncer.Config{ServerConns: 1})
	ctx := context.Background()
	st, err := Open(ctx, b.URL+"&pool_max_conns=4")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "warm"); err != nil { // one server connection, logged in
		t.Fatal(err)
	}

	// Another client takes PgBouncer's only server connection and keeps it
	// in an open transaction, so the store's statements queue behind it.
	holder, err := pgx.Connect(ctx, b.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close(ctx) })
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	logins := serverLogins(b.Logs())

	const givenUp = 4
	for i := range givenUp {
		answer := make(chan error, 1)
		go func() {
			gctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, err := st.Get(gctx, "queued")
			answer <- err
		}()
		// The caller has its answer while the statement still waits (the
		// transaction holding the only server is open), not when
		// PgBouncer gets to it. The bound only keeps a failing test from
		// waiting out drainTimeout.
		select {
		case err := <-answer:
			if !errors.Is(err, leasecore.ErrUnavailable) {
				t.Fatalf("statement %d, given up in PgBouncer's queue: %v, want unavailable", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("statement %d: its caller gave up, but was not answered while the statement waited in PgBouncer's queue", i)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// PgBouncer now sends the given-up statements; the store serves again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := st.Get(rctx, "after")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not answer after the server was free: %v", err)
		}
	}
	// Every connection of the store's pool is idle again, and PgBouncer
	// never had to log in again: its server connection outlived all four.
	waitIdle(t, st)
	if got := serverLogins(b.Logs()); got != logins {
		t.Errorf("PgBouncer logged in to PostgreSQL %d more times after %d statements were given up in its queue, want 0:\n%s",
			got-logins, givenUp, b.Logs())
	}
}

// serverLogins counts the server connections PgBouncer's log says it
// opened, less those it opened only to pass on a cancel request (a
// statement given up after it had reached the server is cancelled there;
// that connection closes at once and replaces none). PgBouncer 1.18 logs
// such a connection's end as "successfully sent cancel request", or as
// "closing because: failed to send cancel req" when the client went idle
// before the request could go (it opens the connection all the same).
// A connection's id (its address) may be handed out again once it closed.
func serverLogins(logs string) int {
	logins, open := 0, map[string]bool{}
	for _, line := range strings.Split(logs, "\n") {
		id, _, ok := strings.Cut(strings.TrimSpace(line[strings.Index(line, "S-0x")+1:]), ":")
		if !strings.Contains(line, "S-0x") || !ok {
			continue
		}
		switch {
		case strings.Contains(line, "new connection to server"):
			logins++
			open[id] = true
		case open[id] && (strings.Contains(line, "successfully sent cancel request") || strings.Contains(line, "failed to send cancel req")):
			logins-- // a cancel request's connection, not a login
			delete(open, id)
		case strings.Contains(line, "closing because"):
			delete(open, id)
		}
	}
	return logins
}

// waitIdle waits until no connection of st's pool is in use: the
// statements given up by their callers have finished. A connection may wait
// up to drainTimeout for a given-up statement's answer before it hangs up
// (pool.go), so that is the bound here, with a margin; a drain slower than
// a few seconds is logged.
func waitIdle(t *testing.T, st *Store) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(drainTimeout + 15*time.Second)
	for st.pool.Stat().AcquiredConns() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still in use after %s", st.pool.Stat().AcquiredConns(), time.Since(start).Round(time.Second))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Logf("the pool took %s to drain its given-up statements", took.Round(100*time.Millisecond))
	}
}

// TestCancelsKeepPgBouncerUp: many statements whose callers give up while
// they run, or just as they end, are cancelled through PgBouncer, and
// PgBouncer stays up. PgBouncer 1.18 and 1.19 end with a FATAL
// ("disconnect_client(): bad client state") when a client closes its cancel
// request's connection before PgBouncer has finished forwarding it, which
// the store did whenever the statement ended first or the forwarding took
// longer than the delivery bound.
func TestCancelsKeepPgBouncerUp(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	b := pgbouncer.StartT(t, dbURL, pgbouncer.Config{ServerConns: 4})
	ctx := context.Background()
	st, err := Open(ctx, b.URL+"&pool_max_conns=8")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	const workers, rounds = 8, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				// Timeouts around the statement's own 10 ms, so that some
				// cancels arrive while it runs and some as it ends.
				d := time.Duration(2+(w*rounds+i)%16) * time.Millisecond
				sctx, cancel := context.WithTimeout(ctx, d)
				_, _ = st.pool.Exec(sctx, "SELECT pg_sleep(0.01)")
				cancel()
				if b.Exited() {
					return
				}
			}
		})
	}
	wg.Wait()
	// The connections finish their cancels; PgBouncer must be there after.
	waitIdle(t, st)
	if b.Exited() || strings.Contains(b.Logs(), "FATAL") {
		t.Fatalf("PgBouncer ended while the store cancelled given-up statements:\n%s", tail(b.Logs(), 40))
	}
	if _, err := st.Get(ctx, "after"); err != nil {
		t.Fatalf("the store does not answer through PgBouncer after the cancels: %v", err)
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestServerLogins: the log reader above, on PgBouncer 1.18's own lines. A
// cancel request's connection is no login, whether the request went or not;
// an id handed out again after its connection closed is a new login.
func TestServerLogins(t *testing.T) {
	const (
		login     = "LOG S-0x5592: db/postgres@127.0.0.1:26813 new connection to server (from 127.0.0.1:34360)\n"
		login2    = "LOG S-0x55aa: db/postgres@127.0.0.1:26813 new connection to server (from 127.0.0.1:34368)\n"
		sent      = "LOG S-0x55aa: db/postgres@127.0.0.1:26813 successfully sent cancel request\n"
		notSent   = "LOG S-0x55aa: db/postgres@127.0.0.1:26813 closing because: failed to send cancel req (age=0s)\n"
		closed    = "LOG S-0x55aa: db/postgres@127.0.0.1:26813 closing because: server conn crashed? (age=3s)\n"
		clientEnd = "LOG C-0x55bb: db/postgres@127.0.0.1:37656 closing because: not sending cancel request for client that is now idle (age=0s)\n"
	)
	for _, c := range []struct {
		name, logs string
		want       int
	}{
		{"one login", login, 1},
		{"a cancel sent", login + login2 + sent, 1},
		{"a cancel not sent", login + clientEnd + login2 + notSent, 1},
		{"an id handed out again", login + login2 + closed + login2, 3},
		{"a cancel, then the id again", login + login2 + sent + login2, 2},
	} {
		if got := serverLogins(c.logs); got != c.want {
			t.Errorf("%s: %d logins, want %d", c.name, got, c.want)
		}
	}
}
