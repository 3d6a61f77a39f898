package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/faultproxy"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar"
)

// through returns a client of hs through a proxy a test can cut.
func through(t *testing.T, hs *httptest.Server, opts ...client.Option) (*client.Client, *faultproxy.Proxy) {
	t.Helper()
	p, err := faultproxy.New(strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := client.New("http://"+p.Addr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, p
}

// A watch whose connection breaks connects again from the last event it
// saw (Last-Event-ID): the events recorded meanwhile arrive once each, in
// order, and the break is reported.
func TestWatchResumes(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st leasecore.Store) {
		hs := serve(t, st, sidecar.Options{})
		direct := newClient(t, hs, client.WithOwner("w1"))
		watcher, proxy := through(t, hs)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		if _, err := direct.Claim(ctx, client.ClaimParams{Task: "a"}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var seen []string
		ready, reconnects := 0, 0
		done := make(chan error, 1)
		go func() {
			done <- watcher.Watch(ctx, client.WatchParams{Since: 0}, client.WatchHandler{
				Event: func(e leasecore.Event) error {
					mu.Lock()
					defer mu.Unlock()
					seen = append(seen, fmt.Sprintf("%d %s %s", e.ID, e.Kind, e.Task))
					if len(seen) == 3 {
						cancel()
					}
					return nil
				},
				Ready:     func(int64) { mu.Lock(); ready++; mu.Unlock() },
				Reconnect: func(error, time.Duration) { mu.Lock(); reconnects++; mu.Unlock() },
			})
		}()
		testsidecar.WaitFor(t, "the watch to be ready", func() bool { mu.Lock(); defer mu.Unlock(); return ready == 1 })
		proxy.Cut()
		if _, err := direct.Claim(ctx, client.ClaimParams{Task: "b"}); err != nil {
			t.Fatal(err)
		}
		if _, err := direct.Release(ctx, client.ReleaseParams{Task: "b"}); err != nil {
			t.Fatal(err)
		}
		testsidecar.WaitFor(t, "a reconnection attempt", func() bool { mu.Lock(); defer mu.Unlock(); return reconnects > 0 })
		proxy.Restore()
		if err := <-done; err != nil {
			t.Fatalf("watch: %v", err)
		}
		if len(seen) != 3 || !strings.HasSuffix(seen[0], "acquired a") || !strings.HasSuffix(seen[1], "acquired b") || !strings.HasSuffix(seen[2], "released b") {
			t.Errorf("watch saw %q; want each event once, in order, across the break", seen)
		}
	})
}

// A keepalive whose connection breaks is lost at once (the stream ended),
// and the sidecar releases the lease when the connection goes.
func TestKeepaliveConnectionLost(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st leasecore.Store) {
		hs := serve(t, st, sidecar.Options{})
		c, proxy := through(t, hs, client.WithOwner("w1"))
		h, err := c.Keepalive(t.Context(), client.KeepaliveParams{Task: "nightly", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		proxy.Cut()
		select {
		case <-h.Context().Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the holder's context was not cancelled after its connection broke")
		}
		if h.Err() == nil || !strings.Contains(h.Err().Error(), "stream ended") {
			t.Errorf("cause %v, want the stream's end", h.Err())
		}
		direct := newClient(t, hs)
		testsidecar.WaitFor(t, "the sidecar to release", func() bool { l, err := direct.Get(t.Context(), "nightly"); return err == nil && l == nil })
	})
}

// A sidecar that stops confirming renewals (pings do not count) loses the
// lease at the local deadline, while the stream is still open: the
// holder's context is cancelled with leasecore.ErrLocalDeadline.
func TestKeepaliveLocalDeadline(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().UTC()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "event: acquired\ndata: {\"task\":\"nightly\",\"owner\":%q,\"token\":3,\"acquired_at\":%q,\"renewed_at\":%q,\"expires_at\":%q,"+
			"\"ttl_ms\":300,\"ttl_remaining_ms\":300,\"renew_count\":0,\"note\":\"\"}\n\n",
			r.URL.Query().Get("owner"), now.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), now.Add(300*time.Millisecond).Format(time.RFC3339Nano))
		w.(http.Flusher).Flush()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				fmt.Fprint(w, ": ping\n\n")
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(hs.Close)
	c := newClient(t, hs, client.WithOwner("w1"))
	h, err := c.Keepalive(t.Context(), client.KeepaliveParams{Task: "nightly"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("the lease was not lost at its local deadline")
	}
	if !errors.Is(context.Cause(h.Context()), leasecore.ErrLocalDeadline) {
		t.Errorf("cause %v, want the local deadline", context.Cause(h.Context()))
	}
	if err := h.Close(); !errors.Is(err, leasecore.ErrLocalDeadline) {
		t.Errorf("Close: %v", err)
	}
}

// The local deadline errs early: it counts the acquired event's
// ttl_remaining_ms from when the keepalive request was sent, not from when
// the event was read, so a sidecar that stalls between measuring and
// sending (here 200 ms) cannot push it past the store's expiry.
func TestKeepaliveDeadlineFromSendTime(t *testing.T) {
	t.Parallel()
	arrived := make(chan time.Time, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/keepalive") {
			http.Error(w, "no store here", http.StatusServiceUnavailable) // the confirmation says nothing
			return
		}
		now := time.Now()
		arrived <- now
		time.Sleep(200 * time.Millisecond) // frozen after measuring ttl_remaining
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		u := now.UTC()
		fmt.Fprintf(w, "event: acquired\ndata: {\"task\":\"nightly\",\"owner\":%q,\"token\":3,\"acquired_at\":%q,\"renewed_at\":%q,\"expires_at\":%q,"+
			"\"ttl_ms\":300,\"ttl_remaining_ms\":300,\"renew_count\":0,\"note\":\"\"}\n\n",
			r.URL.Query().Get("owner"), u.Format(time.RFC3339Nano), u.Format(time.RFC3339Nano), u.Add(300*time.Millisecond).Format(time.RFC3339Nano))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(hs.Close)
	c := newClient(t, hs, client.WithOwner("w1"))
	h, err := c.Keepalive(t.Context(), client.KeepaliveParams{Task: "nightly"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	expiry := (<-arrived).Add(300 * time.Millisecond) // the store's expiry, at the latest
	if d := h.Deadline(); d.After(expiry) {
		t.Errorf("local deadline %s after the store's latest possible expiry: late by %s", d.Format(time.StampMicro), d.Sub(expiry))
	}
}

// A confirmation that finds the lease is no longer the holder's (another
// owner holds the task now) loses it at once, whatever the stream says.
func TestKeepaliveConfirmationFindsAnotherHolder(t *testing.T) {
	t.Parallel()
	renewals := make(chan struct{})
	firstGet := make(chan struct{}, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := time.Now().UTC()
		lease := func(owner string, token int) string {
			return fmt.Sprintf("{\"task\":\"nightly\",\"owner\":%q,\"token\":%d,\"acquired_at\":%q,\"renewed_at\":%q,\"expires_at\":%q,"+
				"\"ttl_ms\":60000,\"ttl_remaining_ms\":60000,\"renew_count\":0,\"note\":\"\"}",
				owner, token, u.Format(time.RFC3339Nano), u.Format(time.RFC3339Nano), u.Add(time.Minute).Format(time.RFC3339Nano))
		}
		if !strings.HasSuffix(r.URL.Path, "/keepalive") {
			select {
			case <-renewals: // after the renewal: another owner holds it
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, "{\"held\":true,\"lease\":%s}", lease("w2", 4))
			default:
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, "{\"held\":true,\"lease\":%s}", lease("w1", 3))
				firstGet <- struct{}{}
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "event: acquired\ndata: %s\n\n", lease("w1", 3))
		w.(http.Flusher).Flush()
		<-firstGet // the acquisition's confirmation found it ours
		close(renewals)
		fmt.Fprintf(w, "event: renewed\ndata: %s\n\n", lease("w1", 3))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(hs.Close)
	c := newClient(t, hs, client.WithOwner("w1"))
	h, err := c.Keepalive(t.Context(), client.KeepaliveParams{Task: "nightly"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("the lease was not lost when the store named another holder")
	}
	var lost *leasecore.LostError
	if !errors.As(h.Err(), &lost) || lost.Reason != leasecore.LostNotHeld || !strings.Contains(lost.Detail, `"w2"`) {
		t.Errorf("cause %v, want not_held naming w2", h.Err())
	}
	h.Close()
}

// Over a real sidecar, confirmations keep the deadline moving: a lease of
// 300 ms is held across many ttls, and the deadline never passes the
// store's expiry as a GET right after reading it bounds it.
func TestKeepaliveConfirmedDeadline(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st leasecore.Store) {
		hs := serve(t, st, sidecar.Options{})
		c := newClient(t, hs, client.WithOwner("w1"))
		h, err := c.Keepalive(t.Context(), client.KeepaliveParams{Task: "nightly", TTL: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		first := h.Deadline()
		for range 20 {
			d := h.Deadline()
			l, err := c.Get(t.Context(), "nightly")
			answered := time.Now()
			if err != nil || l == nil || l.Token != h.Token() {
				t.Fatalf("get: %+v, %v", l, err)
			}
			if latest := answered.Add(l.TTLRemaining); d.After(latest) {
				t.Fatalf("local deadline %s is after the store's expiry %s", d.Format(time.StampMicro), latest.Format(time.StampMicro))
			}
			time.Sleep(50 * time.Millisecond)
		}
		select {
		case <-h.Lost():
			t.Fatalf("lost: %v", h.Err())
		default:
		}
		if !h.Deadline().After(first) {
			t.Errorf("the deadline never moved from %s", first.Format(time.StampMicro))
		}
	})
}
