package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/e2e/chaos"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// failoverStreamTTL is the ttl of the keepalive streams that must outlive a
// failover: long beside the seconds a kill and a promotion take, even on a
// machine busy with the race detector.
const failoverStreamTTL = 20 * time.Second

// failoverLoad is how long the chaos load runs across a failover at least;
// the failover comes at half time. failoverGrants is its grant target,
// small: the test is about the failover, not the load.
const (
	failoverLoad   = 20 * time.Second
	failoverGrants = 100
)

// A fleet on a synchronously replicated PostgreSQL keeps its promises across
// a failover. Three sidecars on a multi-host URL (target_session_attrs=
// read-write) serve the chaos load (e2e/chaos: Go and python3 clients,
// short leases) while the primary is killed and the standby promoted, and
//   - e2e/leasecheck finds no violation in the whole history, and
//     porcupine finds it linearizable: tokens never go backwards, no grant
//     overlaps an acknowledged lease, no renewal succeeds after a later grant;
//   - the sidecars find the new primary by themselves;
//   - keepalive streams whose ttl outlasts the failover keep their leases,
//     renewed by the new primary under the same token, with no `lost` event;
//   - a task released before the failover is granted after it with a
//     higher token;
//   - a sidecar pointed at the standby alone is not ready and answers claims
//     503 unavailable while the standby is read-only, and grants once it is
//     promoted.
func TestPostgresFailover(t *testing.T) {
	t.Parallel()
	py := python3(t)
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(true)
	fleetURL := pgtest.MultiHostURL(primary, standby)
	f := startFleet(t, fleetURL, fleetURL, fleetURL)
	a, b := f.proc(0), f.proc(1)

	// The standby-only sidecar starts after the schema is in place (and
	// replicated), so what keeps it from serving is the standby being
	// read-only, not a missing schema.
	onStandby := startSidecar(t, standby.URL())
	assertNotReady(t, onStandby, "before the failover, on a read-only standby")

	// Streams that must ride out the failover, on two sidecars.
	type held struct {
		task  string
		k     *keepalive
		token float64
	}
	var streams []held
	for i, s := range []*sidecar{a, b, a, b} {
		task := fmt.Sprintf("failover-stream-%d", i)
		k := s.openKeepalive(fmt.Sprintf("/v1/leases/%s/keepalive?owner=stream-%d&ttl_ms=%d", task, i, failoverStreamTTL.Milliseconds()))
		ev := k.next()
		if ev.Name != "acquired" {
			t.Fatalf("%s: first event %+v, want acquired", task, ev)
		}
		streams = append(streams, held{task: task, k: k, token: ev.number(t, "token")})
	}

	// A task granted before the failover, released, then granted after it
	// must get a higher token from the new primary.
	before := a.call("POST", "/v1/leases/failover-token/claim", map[string]any{"owner": "before", "ttl_ms": 1000})
	if before.Status != http.StatusOK {
		t.Fatalf("claim before the failover: %d %s", before.Status, before.Raw)
	}
	tokenBefore := before.token(t)
	if r := a.call("POST", "/v1/leases/failover-token/release", map[string]any{"owner": "before", "token": tokenBefore}); r.Body["released"] != true {
		t.Fatalf("release before the failover: %d %s", r.Status, r.Raw)
	}

	// The load, with one fault at half time: the failover. Run returns
	// after the fault goroutine has ended, so promotedAt is set by then.
	var promotedAt time.Time
	failover := chaos.NewFault("postgres-failover", func(context.Context) error {
		killedAt := time.Now()
		if err := pgtest.Failover(primary, standby); err != nil {
			return err
		}
		promotedAt = time.Now()
		t.Logf("primary killed and standby promoted in %s", promotedAt.Sub(killedAt).Round(time.Millisecond))
		return nil
	})
	runChaos(t, f, py, failoverLoad, failoverGrants, []chaos.Fault{failover}, func(c *chaos.Config) {
		c.FaultGap = failoverLoad / 2
		c.Rounds = 1 // the failover cannot be undone: once
		c.TaskPrefix = "failover/"
	})
	if promotedAt.IsZero() {
		t.Fatal("the failover was not injected")
	}

	// The fleet is on the new primary.
	after := claimEventually(t, b, "failover-token", "after")
	if tok := after.token(t); tok <= tokenBefore {
		t.Fatalf("token after the failover is %d, not above %d from before it", tok, tokenBefore)
	}

	// The standby-only sidecar is now on a primary: ready, and granting.
	onStandby.waitReady()
	claimEventually(t, onStandby, "failover-on-promoted", "after")

	// Each stream was renewed by the new primary under its token, with no
	// loss in between, and its lease is still held by it.
	for _, s := range streams {
		for {
			ev := s.k.next()
			if ev.Name != "renewed" || ev.number(t, "token") != s.token {
				t.Fatalf("%s: event %+v across the failover, want renewals under token %v", s.task, ev, s.token)
			}
			renewedAt, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ev.Data["renewed_at"]))
			if err != nil {
				t.Fatalf("%s: renewed_at of %+v: %v", s.task, ev, err)
			}
			if renewedAt.After(promotedAt) {
				break
			}
		}
		r := a.call("GET", "/v1/leases/"+s.task, nil)
		if r.Body["held"] != true || r.token(t) != int64(s.token) {
			t.Fatalf("%s after the failover: %s, want held under token %v", s.task, r.Raw, s.token)
		}
	}
}

// assertNotReady checks that s answers /readyz 503 and a claim 503
// unavailable.
func assertNotReady(t *testing.T, s *sidecar, when string) {
	t.Helper()
	// Give a fresh sidecar the time to try its store at least once.
	deadline := time.Now().Add(30 * time.Second)
	for s.readyz() != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatalf("%s: readyz still %d after 30s, want 503", when, s.readyz())
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := s.call("POST", "/v1/leases/failover-readonly/claim", map[string]any{"owner": "ro"})
	if r.Status != http.StatusServiceUnavailable || r.Body["reason"] != "unavailable" {
		t.Fatalf("%s: claim answered %d %s, want 503 unavailable", when, r.Status, r.Raw)
	}
}

// claimEventually claims task as owner through s until it is acquired, for
// up to 60 s (the failover and the sidecar's reconnection), and returns the
// answer. A claim may only be refused as unavailable meanwhile.
func claimEventually(t *testing.T, s *sidecar, task, owner string) response {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := s.call("POST", "/v1/leases/"+task+"/claim", map[string]any{"owner": owner, "ttl_ms": 1000})
		switch {
		case r.Status == http.StatusOK:
			return r
		case r.Status != http.StatusServiceUnavailable:
			t.Fatalf("claim %s during the failover: %d %s, want 200 or 503", task, r.Status, r.Raw)
		case time.Now().After(deadline):
			t.Fatalf("claim %s still unavailable 60s after the failover: %s", task, r.Raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With its synchronous standby gone, the primary cannot make a grant durable
// on two servers: claims answer 503 unavailable (never acquired, never
// held), and grants resume once the standby is back.
func TestSynchronousStandbyDownPausesGrants(t *testing.T) {
	t.Parallel()
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(true)
	a := startSidecar(t, primary.URL())
	a.waitReady()
	if r := a.call("POST", "/v1/leases/sync-paused/claim", map[string]any{"owner": "w1", "ttl_ms": 1000}); r.Status != http.StatusOK {
		t.Fatalf("claim with the standby up: %d %s", r.Status, r.Raw)
	}

	standby.Kill()
	r := a.call("POST", "/v1/leases/sync-paused-2/claim", map[string]any{"owner": "w1", "ttl_ms": 1000})
	if r.Status != http.StatusServiceUnavailable || r.Body["reason"] != "unavailable" {
		t.Fatalf("claim with the synchronous standby down: %d %s, want 503 unavailable", r.Status, r.Raw)
	}

	standby.Start()
	claimEventually(t, a, "sync-paused-3", "w1")
}
