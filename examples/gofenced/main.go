// Command gofenced holds nightly-report through a sidecar with the Go client and writes the
// report to the job's own database (PostgreSQL, or an SQLite file), fenced by the lease's
// token: a holder paused past its lease (a GC pause, a frozen VM) wakes up to a refused write,
// not to a row landing after its successor's. The database is fenced once, beforehand, and
// named the same way both times:
//
//	leasehold fence install --db "$APP_DB"   # postgres://USER@HOST:PORT/DB, or sqlite:PATH
//	go run ./gofenced "$APP_DB"              # from examples/
//
// It asks the sidecar at LEASEHOLD_ADDR (default http://127.0.0.1:7411), with the token in
// LEASEHOLD_TOKEN_FILE when that is set, as the leasehold binary does.
package main

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"os"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"; any database/sql driver does
	_ "modernc.org/sqlite"             // database/sql's "sqlite"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/fence"
	"github.com/leasehold/leasehold/leasecore"
)

const task = "nightly-report"

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: gofenced postgres://USER@HOST:PORT/DB | sqlite:PATH")
	}
	db, dialect, insert, err := open(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS reports (token bigint NOT NULL, body text NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	c, err := client.FromEnv() // LEASEHOLD_ADDR, LEASEHOLD_TOKEN_FILE
	if err != nil {
		log.Fatal(err)
	}
	err = c.Run(context.Background(), task, func(ctx context.Context, lease leasecore.Lease) error {
		// One transaction: the fence's check, then the row.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // after a Commit, a no-op
		if err := fence.Check(ctx, tx, dialect, task, lease.Token); err != nil {
			return err // a *fence.StaleTokenError when a newer holder has written
		}
		if _, err := tx.ExecContext(ctx, insert, lease.Token, "totals"); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		log.Printf("report written under fencing token %d", lease.Token)
		return nil
	})
	switch {
	case errors.Is(err, fence.ErrStale):
		log.Printf("stopped: %v", err) // rolled back: nothing was written
	case errors.Is(err, leasecore.ErrHeld):
		log.Print("another replica runs it")
	case errors.Is(err, leasecore.ErrUnavailable):
		log.Printf("unavailable, skipping this run: %v", err)
	case err != nil:
		log.Fatal(err)
	}
}

// open opens the job's database, named as leasehold fence install names it, and says its
// dialect and how to insert a report there.
func open(url string) (*sql.DB, fence.Dialect, string, error) {
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
		return db, fence.SQLite, `INSERT INTO reports VALUES (?, ?)`, err
	}
	db, err := sql.Open("pgx", url)
	return db, fence.Postgres, `INSERT INTO reports VALUES ($1, $2)`, err
}
