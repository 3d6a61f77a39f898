package main

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// renewEvery is how often a keepalive stream's lease is renewed at ttl:
// the keeper's cadence, ttl × 0.4 (DESIGN.md, "Keeper").
func renewEvery(ttl time.Duration) time.Duration { return ttl * 2 / 5 }

// establishedTo counts the established TCP connections whose local end is
// port, in the text of /proc/net/tcp or /proc/net/tcp6: a server's
// accepted client connections (the listening socket is in state 0A, not
// 01, and the clients' own ends have port as their remote port).
func establishedTo(procNetTCP string, port int) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(procNetTCP))
	n := 0
	first := true
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if first { // the header: sl local_address rem_address st ...
			first = false
			continue
		}
		if len(f) < 4 {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			return 0, fmt.Errorf("proc net tcp: local address %q has no port", f[1])
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			return 0, fmt.Errorf("proc net tcp: local port %q: %w", hexPort, err)
		}
		if int(p) == port && f[3] == "01" {
			n++
		}
	}
	return n, sc.Err()
}

// series is a counter sampled over time.
type series struct {
	at []time.Time
	v  []float64
}

func (s *series) add(at time.Time, v float64) {
	s.at = append(s.at, at)
	s.v = append(s.v, v)
}

// peakRate is the highest rate of the counter between two samples at least
// span apart (the first such pair after each sample), per second; 0 with
// fewer than two samples. A counter that went down (a restarted server's
// statistics) gives no rate for that pair.
func (s *series) peakRate(span time.Duration) float64 {
	peak := 0.0
	for i := range s.v {
		for j := i + 1; j < len(s.v); j++ {
			dt := s.at[j].Sub(s.at[i])
			if dt < span {
				continue
			}
			if d := s.v[j] - s.v[i]; d >= 0 {
				peak = max(peak, d/dt.Seconds())
			}
			break
		}
	}
	return peak
}

// capacity is the extrapolation from the simulation to a real fleet: what
// N pods, each with one keepalive stream at ttl behind a sidecar of its
// own, ask of PostgreSQL, from costs measured per statement.
type capacity struct {
	ttl time.Duration
	// cpuPerStmt is PostgreSQL's CPU per renewal statement (all of its
	// CPU in the steady window divided by the renewal statements: an upper
	// bound for a statement that carries one lease).
	cpuPerStmt time.Duration
	// walPerStmt is the WAL bytes per renewal statement likewise.
	walPerStmt float64
	// pool is each real sidecar's pool_max_conns.
	pool int
}

// renewalsPerSecond is the renewals N pods' streams need: one per stream
// every ttl × 0.4. A pod's sidecar holds one stream, so each renewal is a
// statement (and a commit) of its own: the coalescer has nothing to
// gather it with.
func (c capacity) renewalsPerSecond(pods int) float64 {
	return float64(pods) / renewEvery(c.ttl).Seconds()
}

// cores is the PostgreSQL CPU N pods' renewals take.
func (c capacity) cores(pods int) float64 {
	return c.renewalsPerSecond(pods) * c.cpuPerStmt.Seconds()
}

// podsFor is how many pods a PostgreSQL with the given cores carries with
// renewals taking at most the share util (0–1] of its CPU.
func (c capacity) podsFor(cores, util float64) int {
	if c.cpuPerStmt <= 0 {
		return 0
	}
	perSecond := cores * util / c.cpuPerStmt.Seconds()
	return int(perSecond * renewEvery(c.ttl).Seconds())
}

// clientConns is the connections N real pods open at PgBouncer: each
// sidecar's pool, at most.
func (c capacity) clientConns(pods int) int { return pods * c.pool }

// walPerSecond is the WAL N pods' renewals write, in bytes a second.
func (c capacity) walPerSecond(pods int) float64 {
	return c.renewalsPerSecond(pods) * c.walPerStmt
}
