package main

import (
	"math"
	"testing"
	"time"
)

func TestRenewEvery(t *testing.T) {
	t.Parallel()
	if got := renewEvery(30 * time.Second); got != 12*time.Second {
		t.Errorf("renewEvery(30s) = %s, want 12s", got)
	}
}

// Two lines of /proc/net/tcp for the server's side of two clients of port
// 6432 (0x1920), one for a client's own side, the listener, and a
// connection being closed.
const procNetTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1920 00000000:0000 0A 00000000:00000000 00:00000000 00000000   108        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1920 0100007F:D431 01 00000000:00000000 00:00000000 00000000   108        0 2 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:D431 0100007F:1920 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:1920 0100007F:D432 01 00000000:00000000 00:00000000 00000000   108        0 4 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:1920 0100007F:D433 06 00000000:00000000 00:00000000 00000000   108        0 5 1 0000000000000000 20 4 30 10 -1
`

func TestEstablishedTo(t *testing.T) {
	t.Parallel()
	n, err := establishedTo(procNetTCP, 6432)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("establishedTo(6432) = %d, want 2 (the listener, a client's own end and a closing socket do not count)", n)
	}
	if n, _ := establishedTo(procNetTCP, 54321); n != 1 {
		t.Errorf("establishedTo(54321) = %d, want 1", n)
	}
	if _, err := establishedTo("header\n 0: 0100007F 0100007F:1 01\n", 1); err == nil {
		t.Error("a local address without a port parsed")
	}
	if _, err := establishedTo("header\n 0: 0100007F:XYZ 0100007F:1 01\n", 1); err == nil {
		t.Error("a port that is not hex parsed")
	}
}

func TestPeakRate(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	var s series
	if got := s.peakRate(time.Second); got != 0 {
		t.Errorf("empty series: peakRate = %v, want 0", got)
	}
	// 10/s, then 50/s for a second, then a counter reset (a restarted
	// server), then 20/s.
	for i, v := range []float64{0, 10, 20, 70, 5, 25} {
		s.add(t0.Add(time.Duration(i)*time.Second), v)
	}
	if got := s.peakRate(time.Second); got != 50 {
		t.Errorf("peakRate(1s) = %v, want 50", got)
	}
	// Over two seconds the steepest pair is 0..20..70: (70-10)/2 = 30.
	if got := s.peakRate(2 * time.Second); got != 30 {
		t.Errorf("peakRate(2s) = %v, want 30", got)
	}
}

func TestCapacity(t *testing.T) {
	t.Parallel()
	c := capacity{ttl: 30 * time.Second, cpuPerStmt: 200 * time.Microsecond, walPerStmt: 500, pool: 2}
	if got := c.renewalsPerSecond(1200); got != 100 {
		t.Errorf("renewalsPerSecond(1200) = %v, want 100 (one every 12 s each)", got)
	}
	if got := c.cores(1200); math.Abs(got-0.02) > 1e-12 {
		t.Errorf("cores(1200) = %v, want 0.02", got)
	}
	// 4 cores at half: 2 core-seconds a second / 200 µs = 10,000
	// renewals/s, × 12 s = 120,000 pods.
	if got := c.podsFor(4, 0.5); got != 120000 {
		t.Errorf("podsFor(4, 0.5) = %d, want 120000", got)
	}
	if got := c.clientConns(1000); got != 2000 {
		t.Errorf("clientConns(1000) = %d, want 2000", got)
	}
	if got := c.walPerSecond(1200); got != 50000 {
		t.Errorf("walPerSecond(1200) = %v, want 50000", got)
	}
	if got := (capacity{ttl: 30 * time.Second}).podsFor(4, 0.5); got != 0 {
		t.Errorf("podsFor with no measured cost = %d, want 0", got)
	}
}
