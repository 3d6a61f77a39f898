package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar"
)

// Hold a task's lease while a job runs, as one replica of many would. A
// program would use client.FromEnv() (LEASEHOLD_ADDR, LEASEHOLD_TOKEN_FILE);
// the example starts a sidecar of its own.
func Example() {
	addr, stop := exampleSidecar()
	defer stop()

	c, err := client.New(addr, client.WithOwner("replica-1"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	err = c.Run(ctx, "nightly-report", func(ctx context.Context, lease leasecore.Lease) error {
		// ctx is cancelled if the lease is lost: stop writing then. Pass
		// lease.Token to whatever the job writes, to fence stale holders.
		fmt.Println("running under token", lease.Token)

		// Meanwhile another replica finds the task held.
		other, _ := client.New(addr, client.WithOwner("replica-2"))
		_, err := other.Claim(ctx, client.ClaimParams{Task: "nightly-report"})
		var held *leasecore.HeldError
		if errors.As(err, &held) {
			fmt.Println("replica-2: held by", held.Holder.Owner)
		}
		return nil
	})
	switch {
	case errors.Is(err, leasecore.ErrHeld):
		fmt.Println("another replica runs it")
	case errors.Is(err, leasecore.ErrUnavailable):
		fmt.Println("the sidecar or its store is down:", err)
	case err != nil:
		fmt.Println("failed:", err)
	}
	// Output:
	// running under token 1
	// replica-2: held by replica-1
}

// exampleSidecar starts a sidecar over a fresh SQLite store.
func exampleSidecar() (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "leasehold-example")
	if err != nil {
		panic(err)
	}
	st, err := storeurl.Open(context.Background(), storeurl.MustParse("sqlite:"+filepath.Join(dir, "leasehold.db")))
	if err != nil {
		panic(err)
	}
	srv, err := sidecar.New(sidecar.Options{Store: st})
	if err != nil {
		panic(err)
	}
	if err := srv.Migrate(context.Background()); err != nil {
		panic(err)
	}
	hs := httptest.NewServer(srv.Handler())
	return hs.URL, func() { hs.Close(); _ = st.Close(); _ = os.RemoveAll(dir) }
}
