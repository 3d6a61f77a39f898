// Command golib uses the lease model as a Go library, with no sidecar: it opens the SQLite store
// ./leasehold.db (the file `make run` serves, when run from the repository root), claims and
// releases nightly-report, then holds it while a job runs with leasecore.Run.
package main

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

func main() {
	ctx := context.Background()
	url, err := storeurl.Parse("sqlite:./leasehold.db") // or "postgres://leasehold:PASSWORD@db:5432/leasehold"
	if err != nil {
		log.Fatal(err) // names the rule broken, never the password
	}
	log.Printf("store %v", url) // the password shows as xxxxx
	store, err := storeurl.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil { // create or upgrade the schema, as leasehold migrate does
		log.Fatal(err)
	}
	svc := leasecore.New(store)
	// An owner names this holder: <hostname>#<pid>#<12 random hex digits>, new per process.
	owner := leasecore.NewOwner()

	lease, err := svc.Claim(ctx, leasecore.ClaimParams{Task: "nightly-report", Owner: owner, TTL: time.Minute})
	var held *leasecore.HeldError
	switch {
	case err == nil: // acquired; lease.Token is the fencing token
		log.Printf("acquired nightly-report, token %d", lease.Token)
	case errors.As(err, &held): // someone else has it (errors.Is(err, leasecore.ErrHeld) too)
		log.Printf("held by %s for %s", held.Holder.Owner, held.Holder.TTLRemaining)
		return
	case errors.Is(err, leasecore.ErrUnavailable): // the store failed: nobody knows who holds it
		log.Fatal(err)
	default: // a bad task, owner or ttl (leasecore.ErrInvalid)
		log.Fatal(err)
	}
	if _, err := svc.Release(ctx, leasecore.ReleaseParams{Task: lease.Task, Owner: owner, Token: lease.Token}); err != nil {
		log.Print(err) // the lease ends at its expiry
	}

	// To hold a lease while a job runs, leasecore.Run claims, keeps the lease in the
	// background and releases it when the body returns; the body's context is
	// cancelled if the lease is lost.
	ran, err := leasecore.Run(ctx, svc, leasecore.ClaimParams{Task: "nightly-report", Owner: owner, TTL: 30 * time.Second},
		leasecore.KeeperConfig{}, func(ctx context.Context) error { return report(ctx) })
	log.Printf("ran=%v err=%v", ran, err)
}

func report(ctx context.Context) error { return ctx.Err() }
