// Command goclient holds the task nightly-report through a sidecar with the Go client while a
// job runs: client.Run claims, keeps the lease over a keepalive stream and releases it when the
// job returns. It asks the sidecar at LEASEHOLD_ADDR (default http://127.0.0.1:7411), with the
// token in LEASEHOLD_TOKEN_FILE when that is set, as the leasehold binary does.
package main

import (
	"context"
	"errors"
	"log"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/leasecore"
)

func main() {
	c, err := client.FromEnv() // LEASEHOLD_ADDR, LEASEHOLD_TOKEN_FILE
	if err != nil {
		log.Fatal(err)
	}
	err = c.Run(context.Background(), "nightly-report", func(ctx context.Context, lease leasecore.Lease) error {
		// ctx is cancelled when the lease is lost; hand lease.Token to what the job writes.
		log.Printf("running under token %d", lease.Token)
		return nil
	})
	switch {
	case errors.Is(err, leasecore.ErrHeld):
		log.Print("another replica runs it")
	case errors.Is(err, leasecore.ErrUnavailable):
		log.Printf("unavailable, skipping this run: %v", err)
	case err != nil:
		log.Fatal(err)
	}
}
