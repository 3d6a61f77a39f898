package e2e

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// restartMargin is what the lease must still have left when PostgreSQL
// accepts connections again, for the test to mean anything: a keeper retries
// a failed renewal every ttl × 0.1 (1 s here), and the retry must get
// through before the keeper's local deadline, on a machine busy with the
// race detector and the other tests.
const restartMargin = 3 * time.Second

// A keepalive stream outlives a PostgreSQL restart that is shorter than its
// lease's remaining ttl: the lease is renewed under the same token, no loss
// is reported, another sidecar sees the same holder afterwards, and hanging
// up still frees the task. "quick" restarts between two renewals, so the
// sidecar's pool meets only connections the restart broke; "across_a_renewal"
// keeps PostgreSQL down until a renewal has failed, so the keeper must retry.
func TestKeepaliveSurvivesPostgresRestart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// whileDown runs while PostgreSQL is stopped; PostgreSQL must be
		// starting again by deadline for the test to be valid.
		whileDown func(t *testing.T, a *sidecar, deadline time.Time)
	}{
		{"quick", nil},
		{"across_a_renewal", waitFailedRenewal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pg := pgtest.StartServer(t) // of its own: the shared server must never go down
			a := startSidecar(t, pg.URL())
			a.waitReady()

			const task = "restart-job"
			k := a.openKeepalive("/v1/leases/" + task + "/keepalive?owner=w1&ttl_ms=10000")
			acq := k.next()
			if acq.Name != "acquired" || acq.Data["owner"] != "w1" {
				t.Fatalf("first event %+v, want acquired by w1", acq)
			}
			token := acq.number(t, "token")
			ev := k.next()
			if ev.Name != "renewed" || ev.Data["token"] != token {
				t.Fatalf("event %+v, want a renewal under token %v", ev, token)
			}
			renewedAt := time.Now()
			remaining := time.Duration(ev.number(t, "ttl_remaining_ms")) * time.Millisecond
			renewCount := ev.number(t, "renew_count")

			// The restart, right after a renewal. While PostgreSQL is down
			// the sidecar notices (so the outage was real); its client must
			// not.
			stopAt := time.Now()
			pg.Stop()
			if code := a.readyz(); code != http.StatusServiceUnavailable {
				t.Fatalf("readyz = %d while PostgreSQL is stopped, want 503", code)
			}
			if tc.whileDown != nil {
				// A second to spare for PostgreSQL to start.
				tc.whileDown(t, a, renewedAt.Add(remaining-restartMargin-time.Second))
			}
			pg.Start()
			upAt := time.Now()
			downtime, sinceRenewal := upAt.Sub(stopAt), upAt.Sub(renewedAt)
			t.Logf("PostgreSQL was down for %s; it accepted connections again %s after the last renewal, whose lease had %s left",
				downtime.Round(time.Millisecond), sinceRenewal.Round(time.Millisecond), remaining)
			if sinceRenewal > remaining-restartMargin {
				t.Fatalf("test invalid, not a leasehold failure: PostgreSQL came back %s after the last renewal, "+
					"which leaves less than the %s margin of the lease's %s; this machine restarted PostgreSQL too slowly for this test",
					sinceRenewal, restartMargin, remaining)
			}

			// Renewals go on under the same token; no loss is reported.
			seen := 1
			for seen < 3 {
				ev := k.next()
				if ev.Name != "renewed" {
					t.Fatalf("event %+v after the restart, want renewals only", ev)
				}
				if ev.Data["token"] != token || ev.Data["owner"] != "w1" {
					t.Fatalf("renewal %+v after the restart, want owner w1 and token %v", ev, token)
				}
				c := ev.number(t, "renew_count")
				if c <= renewCount {
					t.Fatalf("renew_count %v after %v: renewals must add up", c, renewCount)
				}
				renewCount = c
				seen++
			}
			a.waitReady()

			// A sidecar that never saw the old server agrees on the holder.
			b := startSidecar(t, pg.URL())
			b.waitReady()
			got := b.call("GET", "/v1/leases/"+task, nil)
			if got.Body["held"] != true || got.lease(t)["owner"] != "w1" || got.lease(t)["token"] != token {
				t.Fatalf("after the restart another sidecar sees %s, want held by w1 under token %v", got.Raw, token)
			}
			if r := b.call("POST", "/v1/leases/"+task+"/claim", map[string]any{"owner": "w2"}); r.Status != http.StatusConflict {
				t.Fatalf("claim by w2 while the stream holds the lease: %s, want 409", r.Raw)
			}

			// Every renewal the client saw was counted as one. Whether a
			// renewal failed is up to the case: in "quick" the pool may
			// replace its broken connections before using them, so store
			// errors are only reported.
			m := a.metrics()
			if n := m[`leasehold_renewals_total{result="renewed"}`]; n < float64(seen) {
				t.Errorf("leasehold_renewals_total{result=\"renewed\"} = %v, want at least the %d renewals streamed", n, seen)
			}
			t.Logf("store errors during the restart: renewals %v, pings %v",
				renewErrors(m), m[`leasehold_store_errors_total{operation="ping"}`])

			k.close()
			took := b.waitFree(task)
			t.Logf("released %s after the client disconnected (seen from the other sidecar)", took)
			next := b.call("POST", "/v1/leases/"+task+"/claim", map[string]any{"owner": "w2"})
			if next.Status != http.StatusOK || float64(next.token(t)) != token+1 {
				t.Fatalf("claim after the stream ended: %s, want 200 with token %v+1", next.Raw, token)
			}
		})
	}
}

// waitFailedRenewal polls a's metrics until a renewal has failed for want of
// the store. A keeper renews every ttl × 0.4, so one is due well before
// deadline; if none failed by then the outage did not overlap a renewal and
// the test cannot tell anything.
func waitFailedRenewal(t *testing.T, a *sidecar, deadline time.Time) {
	t.Helper()
	for renewErrors(a.metrics()) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("test invalid: no renewal was attempted while PostgreSQL was down, and the lease has too little time left " +
				"to wait longer (either the keeper stopped renewing, which the renewals that follow would show, or this machine is too slow)")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// renewErrors adds up the store errors of renewals, whether a renewal went
// alone (operation "renew") or in a batch ("renew_batch").
func renewErrors(m map[string]float64) float64 {
	var n float64
	for series, v := range m {
		if strings.HasPrefix(series, `leasehold_store_errors_total{operation="renew`) {
			n += v
		}
	}
	return n
}

// number returns a numeric field of an event's data.
func (ev event) number(t *testing.T, key string) float64 {
	t.Helper()
	v, ok := ev.Data[key].(float64)
	if !ok {
		t.Fatalf("event %s has no numeric %s: %+v", ev.Name, key, ev.Data)
	}
	return v
}

// readyz returns the status of one GET /readyz.
func (s *sidecar) readyz() int {
	s.t.Helper()
	resp, err := http.Get(s.base + "/readyz")
	if err != nil {
		s.t.Fatalf("GET /readyz: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// metrics scrapes /metrics into a map from series (name{labels}) to value.
func (s *sidecar) metrics() map[string]float64 {
	s.t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		s.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	series := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			series[line[:i]] = v
		}
	}
	if err := sc.Err(); err != nil {
		s.t.Fatalf("read /metrics: %v", err)
	}
	return series
}
