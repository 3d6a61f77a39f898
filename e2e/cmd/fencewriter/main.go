// Command fencewriter is a holder of the chaos run's job checks: it claims
// short leases through sidecars and, while it believes it holds one, writes
// rows to a fenced resource database (its own PostgreSQL database or SQLite
// file, not the lease store), each write a transaction that checks the
// lease's fencing token first (client/fence). Every attempt is printed as
// one JSON line (chaos.FenceAttempt) on stdout. The test freezes it
// (SIGSTOP) past its ttl now and then: when it wakes up it writes as if it
// still held the lease, and the fence must refuse it.
//
//	fencewriter -addrs URL,URL -tasks t1,t2 -db URL -writer NAME [-fence=false]
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/fence"
	"github.com/leasehold/leasehold/e2e/chaos"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

func main() {
	addrs := flag.String("addrs", "", "comma-separated sidecar base URLs")
	tasks := flag.String("tasks", "", "comma-separated tasks to hold")
	db := flag.String("db", "", "the resource database: postgres://… or sqlite:PATH")
	writer := flag.String("writer", "", "this writer's name (also its owner)")
	ttl := flag.Duration("ttl", 600*time.Millisecond, "lease ttl")
	fenced := flag.Bool("fence", true, "check the token in each write (false: the mutant)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, strings.Split(*addrs, ","), strings.Split(*tasks, ","), *db, *writer, *ttl, *fenced); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "fencewriter:", err)
		os.Exit(1)
	}
}

func open(db string) (*sql.DB, fence.Dialect, error) {
	if path, ok := storeurl.SQLitePath(db); ok {
		d, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
		return d, fence.SQLite, err
	}
	d, err := sql.Open("pgx", db)
	return d, fence.Postgres, err
}

func run(ctx context.Context, addrs, tasks []string, dbURL, writer string, ttl time.Duration, fenced bool) error {
	db, dialect, err := open(dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	insert := `INSERT INTO chaos_writes (task, token, writer, seq) VALUES ($1, $2, $3, $4)`
	if dialect == fence.SQLite {
		insert = `INSERT INTO chaos_writes (task, token, writer, seq) VALUES (?, ?, ?, ?)`
	}
	out := json.NewEncoder(os.Stdout)
	var seq int64
	write := func(task string, token int64) {
		seq++
		a := chaos.FenceAttempt{Writer: writer, Task: task, Token: token, Seq: seq, Start: time.Now().UnixNano()}
		err := func() error {
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			tx, err := db.BeginTx(tctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if fenced {
				if err := fence.Check(tctx, tx, dialect, task, token); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(tctx, insert, task, token, writer, seq); err != nil {
				return err
			}
			return tx.Commit()
		}()
		a.End = time.Now().UnixNano()
		var stale *fence.StaleTokenError
		switch {
		case err == nil:
			a.Outcome = "accepted"
		case errors.As(err, &stale):
			a.Outcome, a.Highest = "stale", stale.Highest
		default:
			a.Outcome = "error"
			fmt.Fprintf(os.Stderr, "fencewriter %s: write %d: %v\n", writer, seq, err)
		}
		_ = out.Encode(a)
	}

	var clients []*client.Client
	for _, a := range addrs {
		c, err := client.New(a, client.WithOwner(writer))
		if err != nil {
			return err
		}
		clients = append(clients, c)
	}
	for ctx.Err() == nil {
		c := clients[rand.IntN(len(clients))]
		task := tasks[rand.IntN(len(tasks))]
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		lease, err := c.Claim(cctx, client.ClaimParams{Task: task, TTL: ttl})
		cancel()
		if err != nil {
			time.Sleep(time.Duration(20+rand.IntN(60)) * time.Millisecond)
			continue
		}
		// Hold it for a few writes, renewing well inside the ttl; a
		// refused renewal ends the round. Each pause is followed by a
		// write, before the renewal that would tell the writer it lost
		// the lease: a writer frozen in its pause, past its ttl, wakes up
		// to a write.
		renewed := time.Now()
		write(task, lease.Token)
		for range 4 + rand.IntN(8) {
			time.Sleep(time.Duration(20+rand.IntN(40)) * time.Millisecond)
			write(task, lease.Token)
			if time.Since(renewed) < ttl/3 {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, ttl)
			_, err := c.Renew(rctx, client.RenewParams{Task: task, Token: lease.Token, TTL: ttl})
			cancel()
			if errors.Is(err, leasecore.ErrLost) {
				break
			}
			renewed = time.Now()
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = c.Release(rctx, client.ReleaseParams{Task: task, Token: lease.Token})
		cancel()
	}
	return nil
}
