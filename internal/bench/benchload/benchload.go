// Package benchload drives a benchmark's operations from several concurrent
// clients, the way every leasehold throughput benchmark measures: b.N
// operations shared by a fixed number of goroutines, one warm-up call per
// client before the timer starts, and the throughput reported as ops/s.
package benchload

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// Run runs b.N calls of op spread over clients goroutines and reports ops/s.
// op gets the client's number (0…clients-1); the first error stops the
// benchmark. ns/op is then wall time per operation across all clients, the
// inverse of throughput. cpu-ns/op is the CPU time the whole process (the
// clients and the code they call, not a database server in another
// process) used per operation: on a machine shared with other work it
// varies less than ns/op does.
func Run(b *testing.B, clients int, op func(ctx context.Context, client int) error) {
	b.Helper()
	ctx := b.Context()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		failOnce sync.Once
		failure  error
	)
	fail := func(err error) { failOnce.Do(func() { failure = err }) }
	// Warm up: one call per client at once, so pools have opened their
	// connections (and each client's row exists) before the clock starts.
	for c := range clients {
		wg.Go(func() {
			if err := op(ctx, c); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	if failure != nil {
		b.Fatal(failure)
	}
	b.ResetTimer()
	cpuBefore, cpuOK := processCPU()
	for c := range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := op(ctx, c); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpuAfter, _ := processCPU()
	if failure != nil {
		b.Fatal(failure)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	if cpuOK {
		b.ReportMetric(float64(cpuAfter-cpuBefore)/float64(b.N), "cpu-ns/op")
	}
}
