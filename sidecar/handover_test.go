package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// refusedRenewals is the sum of leasehold_renewals_total over the results
// of a refused renewal: renewals the store said no to.
func refusedRenewals(t *testing.T, ts *testServer) float64 {
	t.Helper()
	text := string(ts.get("/metrics").body)
	var n float64
	for _, reason := range []string{"not_held", "expired", "held_by_other", "token_mismatch"} {
		series := `leasehold_renewals_total{result="` + reason + `"}`
		if strings.Contains(text, series+" ") {
			n += metricValue(t, text, series)
		}
	}
	return n
}

// lastEvent skips the stream's renewed events and returns the one after
// them.
func (s *sseStream) lastEvent() sseEvent {
	s.t.Helper()
	ev := s.next()
	for ev.name == "renewed" {
		ev = s.next()
	}
	return ev
}

// mustReleased fails t unless ev is the released event of a release
// request (reason release).
func mustReleased(t *testing.T, ev sseEvent) {
	t.Helper()
	var r api.KeepaliveReleased
	if err := json.Unmarshal([]byte(ev.data), &r); err != nil || ev.name != "released" || r.Reason != api.KeepaliveReleasedReasonRelease {
		t.Fatalf("event %s %s, want released (release)", ev.name, ev.data)
	}
}

// A release through this sidecar of a lease one of its streams holds ends
// the stream first: the stream stops renewing before the store is asked,
// its last event is released (reason release), held-here answers 503 as
// soon as the release has answered, and no renewal is refused, however the
// release falls between the renewals: 20 releases, of leases renewed
// directly (ttl 500 ms, renewals every 200 ms) and through the coalescer
// (ttl 5 s), with and without the token. With the old behaviour the stream
// renewed on, its next renewal was refused (counted) and it said lost.
func TestReleaseEndsTheLocalStream(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		const n = 20
		for i := range n {
			task := fmt.Sprintf("handover-%d", i)
			ttl := map[bool]int{true: 500, false: 5000}[i%2 == 0]
			s, r := ts.openStream(fmt.Sprintf("/v1/leases/%s/keepalive?owner=w1&ttl_ms=%d&note=kept", task, ttl))
			if s == nil {
				t.Fatalf("keepalive %d answered %d: %s", i, r.status, r.body)
			}
			first := s.next().lease(t)
			ts.waitHeldHere(task)
			if i%4 < 2 {
				// Wait for a renewal first, so that some releases fall just
				// after one, others while one is due or in flight.
				if ev := s.next(); ev.name != "renewed" {
					t.Fatalf("stream %d: event %s %s, want renewed", i, ev.name, ev.data)
				}
			}
			req := body{"owner": "w1"}
			if i%3 == 0 {
				req["token"] = first.Token
			}
			r = ts.post("/v1/leases/"+task+"/release", req)
			expect(t, r, http.StatusOK)
			if got := decode[api.ReleaseResult](t, r); !got.Released {
				t.Fatalf("release %d: %s, want released", i, r.body)
			}
			if st, code := ts.heldHere(task); code != http.StatusServiceUnavailable {
				t.Fatalf("held-here right after release %d answered: %d %+v, want 503", i, code, st)
			}
			mustReleased(t, s.lastEvent())
			s.waitEnded()
			if st := decode[api.LeaseState](t, ts.get("/v1/leases/"+task)); st.Held {
				t.Fatalf("after release %d the lease is held: %+v", i, st.Lease)
			}
			// The history holds one end of the lease: the request's release.
			h := decode[api.EventList](t, ts.get("/v1/leases/"+task+"/history"))
			if len(h.Events) != 2 || h.Events[0].Kind != api.EventKindReleased || h.Events[1].Kind != api.EventKindAcquired {
				t.Fatalf("history after release %d: %+v, want acquired then released", i, h.Events)
			}
		}
		if got := refusedRenewals(t, ts); got != 0 {
			t.Errorf("%v renewals refused over %d releases of streams' leases, want none", got, n)
		}
		text := string(ts.get("/metrics").body)
		if got := metricValue(t, text, `leasehold_releases_total{released="true"}`); got != n {
			t.Errorf("leasehold_releases_total{released=\"true\"} = %v, want %d (one per release, none more from the streams)", got, n)
		}
	})
}

// Two streams of one owner hold one lease (the second claim refreshed the
// first's): a release ends both, each with its released event; a release
// by another owner, under another token or of another task, ends neither.
func TestReleaseEndsEveryStreamOfTheLease(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		a, _ := ts.openStream("/v1/leases/shared/keepalive?owner=w1&ttl_ms=5000")
		la := a.next().lease(t)
		b, _ := ts.openStream("/v1/leases/shared/keepalive?owner=w1&ttl_ms=5000")
		if lb := b.next().lease(t); lb.Token != la.Token {
			t.Fatalf("the second stream's lease has token %d, the first's %d: want one lease", lb.Token, la.Token)
		}
		other, _ := ts.openStream("/v1/leases/other/keepalive?owner=w1&ttl_ms=5000")
		other.next()
		ts.waitHeldHere("other")

		for _, req := range []body{{"owner": "w2"}, {"owner": "w1", "token": la.Token + 1}} {
			r := ts.post("/v1/leases/shared/release", req)
			expect(t, r, http.StatusOK)
			if got := decode[api.ReleaseResult](t, r); got.Released {
				t.Fatalf("release %v: released, want nothing released", req)
			}
			if st, code := ts.heldHere("shared"); code != http.StatusOK || *st.Token != la.Token {
				t.Fatalf("after release %v, which was not the streams': held-here %d %+v, want 200", req, code, st)
			}
		}
		expect(t, ts.post("/v1/leases/shared/release", body{"owner": "w1"}), http.StatusOK)
		if _, code := ts.heldHere("shared"); code != http.StatusServiceUnavailable {
			t.Fatalf("held-here after the release: %d, want 503", code)
		}
		mustReleased(t, a.lastEvent())
		mustReleased(t, b.lastEvent())
		a.waitEnded()
		b.waitEnded()
		if st, code := ts.heldHere("other"); code != http.StatusOK || *st.Owner != "w1" {
			t.Fatalf("the stream of another task after the release: held-here %d %+v, want 200", code, st)
		}
		if ev := other.next(); ev.name != "renewed" {
			t.Fatalf("the stream of another task: %s %s, want it renewing", ev.name, ev.data)
		}
		if got := refusedRenewals(t, ts); got != 0 {
			t.Errorf("%v renewals refused, want none", got)
		}
	})
}

// latePostStore makes the renewal in flight when a release arrives reach
// the store after the release has committed: when armed, a renewal waits
// (as one gathered in a batch does) until its caller gives up (the
// hand-over cancels it), answers the caller unavailable, as the coalescer
// does, and then sends the renewal on once the test says the release is
// done, as a batch already sent would. What the store answered it goes to
// late.
type latePostStore struct {
	leasecore.Store
	mu       sync.Mutex
	armed    bool
	inFlight chan struct{} // receives when an armed renewal waits
	sendOn   chan struct{} // closed by the test once the release has answered
	late     chan error    // what the store answered the late renewal
}

func (s *latePostStore) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
}

func (s *latePostStore) Renew(ctx context.Context, p leasecore.RenewParams) (*leasecore.Lease, error) {
	s.mu.Lock()
	armed := s.armed
	s.armed = false
	s.mu.Unlock()
	if !armed {
		return s.Store.Renew(ctx, p)
	}
	s.inFlight <- struct{}{}
	<-ctx.Done()
	go func() {
		<-s.sendOn
		_, err := s.Store.Renew(context.Background(), p)
		s.late <- err
	}()
	return nil, leasecore.Unavailable("renew", ctx.Err())
}

// A renewal in flight when the release arrives is cancelled, not waited
// out: the release answers, the stream ends with released, and the
// renewal, reaching the store after the release, is refused (a renewal
// never revives a released lease) to nobody: the lease stays released and
// no refused renewal is counted.
func TestReleaseWhileARenewalIsInFlight(t *testing.T) {
	t.Parallel()
	for _, open := range []struct {
		name  string
		store func(t *testing.T) leasecore.Store
	}{
		{"sqlite", func(t *testing.T) leasecore.Store { return openSQLite(t, false) }},
		{"postgres", func(t *testing.T) leasecore.Store { return openPostgres(t) }},
	} {
		t.Run(open.name, func(t *testing.T) {
			t.Parallel()
			store := &latePostStore{Store: open.store(t), inFlight: make(chan struct{}, 1), sendOn: make(chan struct{}), late: make(chan error, 1)}
			ts := newTestServer(t, withStore(store))
			// ttl 4 s: renewed directly (not through the coalescer), every
			// 1.6 s, with 2.4 s left of the lease when one is sent.
			s, _ := ts.openStream("/v1/leases/job/keepalive?owner=w1&ttl_ms=4000")
			first := s.next().lease(t)
			store.arm()
			select {
			case <-store.inFlight:
			case <-time.After(10 * time.Second):
				t.Fatal("no renewal was sent in 10 s")
			}
			r := ts.post("/v1/leases/job/release", body{"owner": "w1", "token": first.Token})
			expect(t, r, http.StatusOK)
			if got := decode[api.ReleaseResult](t, r); !got.Released {
				t.Fatalf("release: %s, want released", r.body)
			}
			if _, code := ts.heldHere("job"); code != http.StatusServiceUnavailable {
				t.Fatalf("held-here right after the release: %d, want 503", code)
			}
			close(store.sendOn)
			select {
			case err := <-store.late:
				var lost *leasecore.LostError
				if !errors.As(err, &lost) || lost.Reason != leasecore.LostNotHeld {
					t.Fatalf("the late renewal: %v, want refused (not_held)", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the late renewal did not reach the store")
			}
			mustReleased(t, s.lastEvent())
			s.waitEnded()
			if st := decode[api.LeaseState](t, ts.get("/v1/leases/job")); st.Held {
				t.Fatalf("after the late renewal the lease is held again: %+v", st.Lease)
			}
			if got := refusedRenewals(t, ts); got != 0 {
				t.Errorf("%v renewals refused, want none (the late one was nobody's)", got)
			}
		})
	}
}

// failingReleaseStore fails the releases that carry a token while failing
// is set, as a store that is down would.
type failingReleaseStore struct {
	leasecore.Store
	mu      sync.Mutex
	failing bool
}

func (s *failingReleaseStore) fail(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = on
}

func (s *failingReleaseStore) Release(ctx context.Context, p leasecore.ReleaseParams) (bool, error) {
	s.mu.Lock()
	failing := s.failing && p.Token != 0
	s.mu.Unlock()
	if failing {
		return false, leasecore.Unavailable("release", errors.New("the store is down (test)"))
	}
	return s.Store.Release(ctx, p)
}

// A release that fails (the store did not answer) changes nothing: the
// request answers 503, and the stream it was handed over by renews again,
// still holds (held-here 200) and still releases when its client leaves.
func TestFailedReleaseLeavesTheStreamRenewing(t *testing.T) {
	t.Parallel()
	store := &failingReleaseStore{Store: openSQLite(t, false)}
	ts := newTestServer(t, withStore(store))
	s, _ := ts.openStream("/v1/leases/job/keepalive?owner=w1&ttl_ms=500")
	first := s.next().lease(t)
	ts.waitHeldHere("job")
	store.fail(true)
	expect(t, ts.post("/v1/leases/job/release", body{"owner": "w1", "token": first.Token}), http.StatusServiceUnavailable)
	store.fail(false)
	for range 2 {
		if ev := s.next(); ev.name != "renewed" || ev.lease(t).Token != first.Token {
			t.Fatalf("after the failed release: %s %s, want the stream renewing", ev.name, ev.data)
		}
	}
	if st, code := ts.heldHere("job"); code != http.StatusOK || *st.Token != first.Token {
		t.Fatalf("held-here after the failed release: %d %+v, want 200", code, st)
	}
	s.close()
	ts.waitFree("job")
	ts.waitNotHeldHere("job")
	if got := refusedRenewals(t, ts); got != 0 {
		t.Errorf("%v renewals refused, want none", got)
	}
}

// An operator's revoke through this sidecar ends the stream that holds the
// lease first, too; for its holder it is a loss, which the stream reports
// (lost, not_held, revoked by an operator), and held-here is 503 at once.
func TestRevokeEndsTheLocalStream(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		s, _ := ts.openStream("/v1/leases/job/keepalive?owner=w1&ttl_ms=500")
		s.next()
		ts.waitHeldHere("job")
		r := ts.post("/v1/leases/job/revoke", body{})
		expect(t, r, http.StatusOK)
		if got := decode[api.RevokeResult](t, r); !got.Released || got.Lease == nil || got.Lease.Owner != "w1" {
			t.Fatalf("revoke: %s, want w1's lease ended", r.body)
		}
		if _, code := ts.heldHere("job"); code != http.StatusServiceUnavailable {
			t.Fatalf("held-here right after the revoke: %d, want 503", code)
		}
		ev := s.lastEvent()
		var lost api.KeepaliveLost
		if err := json.Unmarshal([]byte(ev.data), &lost); err != nil || ev.name != "lost" ||
			lost.Reason != api.KeepaliveLostReasonNotHeld || !strings.Contains(lost.Detail, leasecore.RevokedDetail) {
			t.Fatalf("event %s %s, want lost (not_held, %s)", ev.name, ev.data, leasecore.RevokedDetail)
		}
		s.waitEnded()
		if got := refusedRenewals(t, ts); got != 0 {
			t.Errorf("%v renewals refused, want none", got)
		}
	})
}

// The client hanging up while its release is on its way: whichever comes
// first ends the lease, once; the history records one release, nothing is
// refused, and the task is free.
func TestReleaseRacesTheHangUp(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		for i := range 10 {
			task := fmt.Sprintf("race-%d", i)
			s, _ := ts.openStream("/v1/leases/" + task + "/keepalive?owner=w1&ttl_ms=500")
			s.next()
			var wg sync.WaitGroup
			wg.Go(s.close)
			r := ts.post("/v1/leases/"+task+"/release", body{"owner": "w1"})
			expect(t, r, http.StatusOK)
			wg.Wait()
			ts.waitFree(task)
			ts.waitNotHeldHere(task)
			deadline := time.Now().Add(10 * time.Second)
			for ts.srv.booked(task) != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("stream %d still booked 10 s after it ended", i)
				}
				time.Sleep(time.Millisecond)
			}
			h := decode[api.EventList](t, ts.get("/v1/leases/"+task+"/history"))
			if len(h.Events) != 2 || h.Events[0].Kind != api.EventKindReleased {
				t.Fatalf("history of race %d: %+v, want acquired then one released", i, h.Events)
			}
		}
		if got := refusedRenewals(t, ts); got != 0 {
			t.Errorf("%v renewals refused, want none", got)
		}
	})
}
