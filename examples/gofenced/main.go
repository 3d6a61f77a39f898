// Command gofenced holds nightly-report through a sidecar with the Go client and writes the
// report to the job's own SQLite database, fenced by the lease's token: a holder paused past
// its lease (a GC pause, a frozen VM) wakes up to a refused write, not to a row landing after
// its successor's. The database is fenced once, beforehand:
//
//	touch reports.db && leasehold fence install --db sqlite:reports.db
//	go run ./gofenced reports.db   # from examples/
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

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/fence"
	"github.com/leasehold/leasehold/leasecore"
	_ "modernc.org/sqlite" // the job's database driver; any database/sql driver does
)

const task = "nightly-report"

func main() {
	path := "reports.db"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS reports (token INTEGER NOT NULL, body TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	c, err := client.FromEnv() // LEASEHOLD_ADDR, LEASEHOLD_TOKEN_FILE
	if err != nil {
		log.Fatal(err)
	}
	err = c.Run(context.Background(), task, func(ctx context.Context, lease leasecore.Lease) error {
		return writeReport(ctx, db, lease.Token)
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

// writeReport writes under token in one transaction: the fence's check, then the row.
func writeReport(ctx context.Context, db *sql.DB, token int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after a Commit, a no-op
	if err := fence.Check(ctx, tx, fence.SQLite, task, token); err != nil {
		return err // *fence.StaleTokenError when a newer holder has written
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO reports VALUES (?, ?)`, token, "totals"); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	log.Printf("report written under fencing token %d", token)
	return nil
}
