// Command etcdload is make bench-http's etcd client: N concurrent clients,
// each with a connection of its own, each repeating a lease grant and a put
// of a new key attached to that lease (one op), against a running etcd
// server, for a duration. It prints one JSON result line (ops, errors,
// seconds, and the keys found under its prefix afterwards, which must equal
// ops) for cmd httpbench to read.
//
// It is a module of its own, with its own go.mod and go.sum, so that etcd's
// server and client dependencies (gRPC, OpenTelemetry, bbolt, ...) stay out
// of leasehold's go.mod: only the benchmark needs them. The same module
// builds the etcd server binary from its main package (the tool directive in
// go.mod): go build -o bin/etcd go.etcd.io/etcd/server/v3.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// result is the line cmd httpbench reads; keep the names in step with its
// loadResult.
type result struct {
	Ops     int64   `json:"ops"`
	Errors  int64   `json:"errors"`
	Seconds float64 `json:"seconds"`
	Keys    int64   `json:"keys"`
	Error   string  `json:"error,omitempty"`
}

func main() {
	var (
		endpoint = flag.String("endpoint", "", "the etcd client URL (http://127.0.0.1:PORT)")
		clients  = flag.Int("clients", 1, "concurrent clients, a connection each")
		duration = flag.Duration("duration", 10*time.Second, "how long to start new ops")
		prefix   = flag.String("prefix", "bench/", "key prefix, unique per run")
		ttl      = flag.Int64("ttl", 60, "lease TTL in seconds")
	)
	flag.Parse()
	res, err := run(*endpoint, *clients, *duration, *prefix, *ttl)
	if err != nil {
		res.Error = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
	if err != nil {
		os.Exit(1)
	}
}

func run(endpoint string, clients int, duration time.Duration, prefix string, ttl int64) (result, error) {
	var res result
	if endpoint == "" || clients < 1 {
		return res, errors.New("-endpoint is required and -clients must be at least 1")
	}
	cfg := clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	}
	conns := make([]*clientv3.Client, clients)
	for i := range conns {
		c, err := clientv3.New(cfg)
		if err != nil {
			return res, fmt.Errorf("connect client %d: %w", i, err)
		}
		defer c.Close()
		// Connect before the clock starts, as wrk's connections do.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.Get(ctx, "warm-up")
		cancel()
		if err != nil {
			return res, fmt.Errorf("client %d's first request: %w", i, err)
		}
		conns[i] = c
	}

	var ops, errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(duration)
	for i, c := range conns {
		wg.Go(func() {
			ctx := context.Background()
			// Ops started before the end run to completion, so that every
			// counted op is in the store and none in the store is uncounted.
			for n := 0; time.Now().Before(end); n++ {
				if err := grantPut(ctx, c, fmt.Sprintf("%s%d/%d", prefix, i, n), ttl); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.Ops, res.Errors = ops.Load(), errs.Load()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := conns[0].Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return res, fmt.Errorf("count keys: %w", err)
	}
	res.Keys = got.Count
	if err, _ := firstErr.Load().(error); err != nil {
		return res, fmt.Errorf("%d ops failed, the first: %w", res.Errors, err)
	}
	return res, nil
}

// grantPut is one op: a new lease, and a new key attached to it.
func grantPut(ctx context.Context, c *clientv3.Client, key string, ttl int64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lease, err := c.Grant(ctx, ttl)
	if err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	if _, err := c.Put(ctx, key, strings.Repeat("v", 16), clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}
