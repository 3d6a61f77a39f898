package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar"
)

// The lease model's outcomes, through a real sidecar: acquired, held (with
// the holder), renewed, lost for each reason, released, the reads.
func TestLeaseOutcomes(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st leasecore.Store) {
		hs := serve(t, st, sidecar.Options{})
		ctx := t.Context()
		w1 := newClient(t, hs, client.WithOwner("w1"))
		w2 := newClient(t, hs, client.WithOwner("w2"))

		lease, err := w1.Claim(ctx, client.ClaimParams{Task: "billing/nightly", TTL: time.Minute, Note: "n"})
		if err != nil || lease.Owner != "w1" || lease.Token < 1 || lease.Note != "n" || lease.TTL != time.Minute {
			t.Fatalf("claim: %+v, %v", lease, err)
		}
		_, err = w2.Claim(ctx, client.ClaimParams{Task: "billing/nightly"})
		var held *leasecore.HeldError
		if !errors.As(err, &held) || held.Holder.Owner != "w1" || held.Holder.TTLRemaining <= 0 || held.Holder.ExpiresAt.IsZero() || held.Task != "billing/nightly" {
			t.Fatalf("claim of a held task: %v, want a HeldError naming w1 and its expiry", err)
		}
		if errors.Is(err, leasecore.ErrUnavailable) {
			t.Fatalf("held is unavailable too: %v", err)
		}

		renewed, err := w1.Renew(ctx, client.RenewParams{Task: "billing/nightly", Token: lease.Token})
		if err != nil || renewed.Token != lease.Token || renewed.RenewCount != 1 || renewed.Note != "n" {
			t.Fatalf("renew without a note: %+v, %v; want renew_count 1 and the claim's note kept", renewed, err)
		}
		// A renewal's note replaces the lease's; new("") clears it.
		for i, note := range []string{"step 2 of 3", ""} {
			renewed, err = w1.Renew(ctx, client.RenewParams{Task: "billing/nightly", Note: new(note)})
			if err != nil || renewed.Note != note || renewed.RenewCount != int64(i+2) {
				t.Fatalf("renew with note %q: %+v, %v", note, renewed, err)
			}
			if got, err := w2.Get(ctx, "billing/nightly"); err != nil || got == nil || got.Note != note {
				t.Fatalf("get after renew with note %q: %+v, %v", note, got, err)
			}
		}
		if _, err := w1.Renew(ctx, client.RenewParams{Task: "billing/nightly", Note: new("before\x00after")}); !errors.Is(err, leasecore.ErrInvalid) {
			t.Fatalf("renew with a note holding NUL: %v, want invalid", err)
		}
		for _, tc := range []struct {
			p    client.RenewParams
			want leasecore.LostReason
		}{
			{client.RenewParams{Task: "billing/nightly", Token: lease.Token + 1}, leasecore.LostTokenMismatch},
			{client.RenewParams{Task: "billing/nightly", Owner: "w2"}, leasecore.LostHeldByOther},
			{client.RenewParams{Task: "nobody"}, leasecore.LostNotHeld},
		} {
			_, err := w1.Renew(ctx, tc.p)
			var lost *leasecore.LostError
			if !errors.As(err, &lost) || lost.Reason != tc.want || !errors.Is(err, leasecore.ErrLost) {
				t.Errorf("renew %+v: %v, want lost (%s)", tc.p, err, tc.want)
			}
		}
		// expired: a short lease, renewed after its expiry.
		short, err := w1.Claim(ctx, client.ClaimParams{Task: "short", TTL: leasecore.MinTTL})
		if err != nil {
			t.Fatal(err)
		}
		testsidecar.WaitFor(t, "the short lease to expire", func() bool { l, err := w1.Get(ctx, "short"); return err == nil && l == nil })
		var lost *leasecore.LostError
		if _, err := w1.Renew(ctx, client.RenewParams{Task: "short", Token: short.Token}); !errors.As(err, &lost) || lost.Reason != leasecore.LostExpired {
			t.Errorf("renew after expiry: %v, want lost (expired)", err)
		}

		got, err := w2.Get(ctx, "billing/nightly")
		if err != nil || got == nil || got.Owner != "w1" || got.Token != lease.Token {
			t.Fatalf("get: %+v, %v", got, err)
		}
		if l, err := w2.Get(ctx, "free"); l != nil || err != nil {
			t.Fatalf("get of a free task: %+v, %v", l, err)
		}

		// List by pages of one.
		if _, err := w2.Claim(ctx, client.ClaimParams{Task: "reports"}); err != nil {
			t.Fatal(err)
		}
		var tasks []string
		for after, pages := "", 0; ; pages++ {
			page, next, err := w1.List(ctx, client.ListParams{After: after, Limit: 1})
			if err != nil || len(page) > 1 || pages > 5 {
				t.Fatalf("list after %q: %d leases, %v", after, len(page), err)
			}
			for _, l := range page {
				tasks = append(tasks, l.Task)
			}
			if next == "" {
				break
			}
			after = next
		}
		if strings.Join(tasks, ",") != "billing/nightly,reports" {
			t.Errorf("list: %v", tasks)
		}

		if ok, err := w2.Release(ctx, client.ReleaseParams{Task: "billing/nightly"}); ok || err != nil {
			t.Errorf("release by another owner: %v, %v; want false, nil", ok, err)
		}
		if ok, err := w1.Release(ctx, client.ReleaseParams{Task: "billing/nightly", Token: lease.Token}); !ok || err != nil {
			t.Errorf("release: %v, %v", ok, err)
		}
		events, err := w1.History(ctx, "billing/nightly", 10)
		if err != nil || len(events) != 2 {
			t.Fatalf("history: %+v, %v", events, err)
		}
		kinds := map[leasecore.EventKind]bool{}
		for _, e := range events {
			kinds[e.Kind] = true
			if e.Token != lease.Token || e.Owner != "w1" || e.At.IsZero() {
				t.Errorf("history event %+v", e)
			}
		}
		if !kinds[leasecore.EventAcquired] || !kinds[leasecore.EventReleased] {
			t.Errorf("history kinds %v", kinds)
		}
		stt, err := w1.Status(ctx)
		if err != nil || !stt.Store.Ready {
			t.Errorf("status: %+v, %v", stt, err)
		}
	})
}

// The keepalive holder's context is cancelled, and Lost closed, when the
// lease is taken from it (released behind its back, so the sidecar's
// renewal finds it not held); Close then reports the loss.
func TestKeepaliveLoss(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st leasecore.Store) {
		hs := serve(t, st, sidecar.Options{})
		c := newClient(t, hs, client.WithOwner("w1"))
		h, err := c.Keepalive(t.Context(), client.KeepaliveParams{Task: "nightly", TTL: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if h.Token() < 1 || h.Lease().Owner != "w1" {
			t.Fatalf("holder: token %d, lease %+v", h.Token(), h.Lease())
		}
		// Another program ends the lease in the store: the next renewal
		// the sidecar makes finds it gone.
		if ok, err := leasecore.New(st).Release(context.Background(), leasecore.ReleaseParams{Task: "nightly", Owner: "w1"}); !ok || err != nil {
			t.Fatalf("release behind the holder's back: %v, %v", ok, err)
		}
		select {
		case <-h.Context().Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the holder's context was not cancelled after the lease was lost")
		}
		<-h.Lost()
		if !errors.Is(context.Cause(h.Context()), leasecore.ErrLost) || !errors.Is(h.Err(), leasecore.ErrLost) {
			t.Errorf("cause %v, err %v; want lost", context.Cause(h.Context()), h.Err())
		}
		if err := h.Close(); !errors.Is(err, leasecore.ErrLost) {
			t.Errorf("Close after a loss: %v", err)
		}
	})
}

// Run holds the lease while fn runs, gives fn a context that is cancelled
// on loss, and releases afterwards; a held task does not run fn.
func TestRun(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st leasecore.Store) {
		hs := serve(t, st, sidecar.Options{})
		c := newClient(t, hs, client.WithOwner("w1"))
		other := newClient(t, hs, client.WithOwner("w2"))
		ctx := t.Context()
		err := c.Run(ctx, "nightly", func(ctx context.Context, lease leasecore.Lease) error {
			if lease.Owner != "w1" || lease.Token < 1 || ctx.Err() != nil {
				return fmt.Errorf("fn got %+v, context %v", lease, ctx.Err())
			}
			_, err := other.Claim(ctx, client.ClaimParams{Task: "nightly"})
			if !errors.Is(err, leasecore.ErrHeld) {
				return fmt.Errorf("claim while Run holds it: %v", err)
			}
			return other.Run(ctx, "nightly", func(context.Context, leasecore.Lease) error {
				return errors.New("fn ran though the task is held")
			})
		})
		if !errors.Is(err, leasecore.ErrHeld) {
			t.Fatalf("Run: %v, want the inner Run's held", err)
		}
		// Released when fn returned (the sidecar releases on hang-up).
		testsidecar.WaitFor(t, "the release", func() bool { l, err := c.Get(ctx, "nightly"); return err == nil && l == nil })

		// A loss cancels fn's context.
		err = c.RunWith(ctx, client.KeepaliveParams{Task: "lost", TTL: 300 * time.Millisecond}, func(fctx context.Context, lease leasecore.Lease) error {
			if _, err := leasecore.New(st).Release(context.Background(), leasecore.ReleaseParams{Task: "lost", Owner: "w1"}); err != nil {
				return err
			}
			<-fctx.Done()
			return context.Cause(fctx)
		})
		if !errors.Is(err, leasecore.ErrLost) {
			t.Errorf("Run whose lease was lost: %v", err)
		}
	})
}

// A holder's own release (ReleaseRun) ends its stream with the sidecar's
// released event, which is no loss: Err and Close say nil, Lost stays
// open; the lease is free when it returns. A release of the holder's lease by another caller
// through the same sidecar ends the stream too, at once, and is the
// holder's loss.
func TestReleaseRunIsNoLoss(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st leasecore.Store) {
		hs := serve(t, st, sidecar.Options{})
		c := newClient(t, hs, client.WithOwner("w1"))
		ctx := t.Context()
		for i := range 5 {
			h, err := c.Keepalive(ctx, client.KeepaliveParams{Task: "nightly", TTL: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if i%2 == 1 {
				time.Sleep(250 * time.Millisecond) // past a renewal
			}
			released, err := h.ReleaseRun(ctx, leasecore.BodyOutcome(nil, time.Millisecond, false))
			if !released || err != nil {
				t.Fatalf("ReleaseRun %d: %v, %v; want released", i, released, err)
			}
			select {
			case <-h.Lost():
				t.Fatalf("ReleaseRun %d: Lost closed (%v), want no loss", i, h.Err())
			default:
			}
			if err := h.Err(); err != nil {
				t.Fatalf("ReleaseRun %d: Err %v, want nil", i, err)
			}
			if err := h.Close(); err != nil {
				t.Fatalf("Close after ReleaseRun %d: %v, want nil", i, err)
			}
			if l, err := c.Get(ctx, "nightly"); err != nil || l != nil {
				t.Fatalf("after ReleaseRun %d: %+v, %v; want the task free", i, l, err)
			}
		}

		h, err := c.Keepalive(ctx, client.KeepaliveParams{Task: "nightly", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.Release(ctx, client.ReleaseParams{Task: "nightly", Token: h.Token()}); !ok || err != nil {
			t.Fatalf("release of the holder's lease by another caller: %v, %v", ok, err)
		}
		select {
		case <-h.Lost():
		case <-time.After(10 * time.Second): // the lease's next renewal is 24 s away
			t.Fatal("the holder was not told its lease was released")
		}
		if err := h.Close(); err == nil || !strings.Contains(err.Error(), "released") {
			t.Errorf("Close after another caller's release: %v, want the release named", err)
		}
	})
}

// Run's release carries what fn did, and the history keeps it; a Run that
// ends well reports no loss although the stream saw its lease released.
func TestRunRecordsTheOutcome(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st leasecore.Store) {
		hs := serve(t, st, sidecar.Options{})
		c := newClient(t, hs, client.WithOwner("w1"))
		ctx := t.Context()
		for i, fnErr := range []error{nil, errors.New("no report today")} {
			err := c.RunWith(ctx, client.KeepaliveParams{Task: "report", MinHold: time.Duration(i+1) * time.Millisecond}, func(context.Context, leasecore.Lease) error {
				time.Sleep(20 * time.Millisecond)
				return fnErr
			})
			if !errors.Is(err, fnErr) {
				t.Fatalf("Run = %v, want %v", err, fnErr)
			}
			evs, err := c.History(ctx, "report", 1)
			if err != nil || len(evs) != 1 || evs[0].Kind != leasecore.EventReleased || evs[0].Run == nil {
				t.Fatalf("newest event %+v, %v; want released with a run", evs, err)
			}
			run, want := evs[0].Run, leasecore.RunSucceeded
			if fnErr != nil {
				want = leasecore.RunFailed
			}
			if run.Result() != want || run.Duration < 20*time.Millisecond || (fnErr != nil && run.Error != fnErr.Error()) {
				t.Errorf("run %+v: result %s, want %s, duration ≥ 20ms, fn's error", run, run.Result(), want)
			}
		}
	})
}

// A store that fails makes every answer unavailable, never held, never a
// lease, and a keepalive is refused the same way.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st leasecore.Store) {
		hs := serve(t, st, sidecar.Options{})
		c := newClient(t, hs, client.WithOwner("w1"))
		other := newClient(t, hs, client.WithOwner("w2"))
		if _, err := other.Claim(t.Context(), client.ClaimParams{Task: "nightly"}); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := c.Claim(t.Context(), client.ClaimParams{Task: "nightly"})
		if !errors.Is(err, leasecore.ErrUnavailable) || errors.Is(err, leasecore.ErrHeld) {
			t.Errorf("claim with the store down: %v, want unavailable and not held", err)
		}
		if _, err := c.Renew(t.Context(), client.RenewParams{Task: "nightly"}); !errors.Is(err, leasecore.ErrUnavailable) || errors.Is(err, leasecore.ErrLost) {
			t.Errorf("renew with the store down: %v, want unavailable", err)
		}
		if _, err := c.Release(t.Context(), client.ReleaseParams{Task: "nightly"}); !errors.Is(err, leasecore.ErrUnavailable) {
			t.Errorf("release with the store down: %v, want unavailable", err)
		}
		if l, err := c.Get(t.Context(), "nightly"); l != nil || !errors.Is(err, leasecore.ErrUnavailable) {
			t.Errorf("get with the store down: %+v, %v, want unavailable", l, err)
		}
		if _, err := c.Keepalive(t.Context(), client.KeepaliveParams{Task: "nightly"}); !errors.Is(err, leasecore.ErrUnavailable) || errors.Is(err, leasecore.ErrHeld) {
			t.Errorf("keepalive with the store down: %v, want unavailable", err)
		}
	})
}

// A sidecar that is gone, or a server that is not a sidecar, is
// unavailable, naming the address with its password masked.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	hs := serve(t, testsidecar.OpenStore(t, "sqlite:"+filepath.Join(t.TempDir(), "l.db")), sidecar.Options{})
	url := strings.Replace(hs.URL, "http://", "http://user:secret@", 1)
	hs.Close()
	c, err := client.New(url, client.WithToken("tok-secret"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Claim(t.Context(), client.ClaimParams{Task: "t"})
	if !errors.Is(err, leasecore.ErrUnavailable) || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "user:xxxxx@") {
		t.Errorf("claim of a stopped sidecar: %v; want unavailable naming the address masked", err)
	}
}

// FromEnv reads LEASEHOLD_ADDR and LEASEHOLD_TOKEN_FILE as the binary does;
// a bad address is refused naming the variable, a token never appears in
// an error.
func TestFromEnv(t *testing.T) {
	// Not parallel: it sets the process's environment.
	st := testsidecar.OpenStore(t, "sqlite:"+filepath.Join(t.TempDir(), "l.db"))
	const token = "lh_the-token-secret"
	hs := serve(t, st, sidecar.Options{Token: []byte(token)})
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(client.EnvAddr, hs.URL)
	t.Setenv(client.EnvTokenFile, tokenFile)
	c, err := client.FromEnv(client.WithOwner("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(t.Context(), client.ClaimParams{Task: "t"}); err != nil {
		t.Fatalf("claim with the token from the file: %v", err)
	}
	// Without the token: 401, ErrUnauthorized, the token nowhere.
	t.Setenv(client.EnvTokenFile, "")
	c, err = client.FromEnv(client.WithToken("lh_wrong-secret"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Claim(t.Context(), client.ClaimParams{Task: "t"})
	if !errors.Is(err, client.ErrUnauthorized) || strings.Contains(err.Error(), "secret") {
		t.Errorf("claim with a wrong token: %v", err)
	}
	t.Setenv(client.EnvAddr, "localhost:7411")
	_, err = client.FromEnv()
	var ve *leasecore.ValidationError
	if !errors.As(err, &ve) || ve.Field != client.EnvAddr || !strings.Contains(ve.Rule, "http://") {
		t.Errorf("FromEnv with a bad address: %v", err)
	}
}

// A client over a Unix socket works as over TCP.
func TestUnixSocket(t *testing.T) {
	t.Parallel()
	st := testsidecar.OpenStore(t, "sqlite:"+filepath.Join(t.TempDir(), "l.db"))
	addr := testsidecar.ServeSocket(t, testsidecar.Handler(t, sidecar.Options{Store: st}))
	c, err := client.New(addr, client.WithOwner("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := c.Claim(t.Context(), client.ClaimParams{Task: "t"}); err != nil || l.Owner != "w1" {
		t.Fatalf("claim over %s: %+v, %v", addr, l, err)
	}
}

// Watch replays the history from a position, says when it has caught up
// (in order with the events), then follows; with FromNow it sees only what
// comes after.
func TestWatch(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st leasecore.Store) {
		hs := serve(t, st, sidecar.Options{})
		c := newClient(t, hs, client.WithOwner("w1"))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		if _, err := c.Claim(ctx, client.ClaimParams{Task: "a"}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var seen []string
		readyAt := -1
		done := make(chan error, 1)
		go func() {
			done <- c.Watch(ctx, client.WatchParams{Since: 0}, client.WatchHandler{
				Event: func(e leasecore.Event) error {
					mu.Lock()
					defer mu.Unlock()
					seen = append(seen, string(e.Kind)+" "+e.Task)
					if len(seen) == 3 {
						cancel()
					}
					return nil
				},
				Ready: func(int64) {
					mu.Lock()
					defer mu.Unlock()
					readyAt = len(seen)
				},
			})
		}()
		testsidecar.WaitFor(t, "the watch to be ready", func() bool { mu.Lock(); defer mu.Unlock(); return readyAt >= 0 })
		if _, err := c.Claim(ctx, client.ClaimParams{Task: "b"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Release(ctx, client.ReleaseParams{Task: "b"}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("watch: %v", err)
		}
		if got := strings.Join(seen, ","); got != "acquired a,acquired b,released b" || readyAt != 1 {
			t.Errorf("watch saw %q, ready after %d events; want the replayed claim, ready, then the rest", got, readyAt)
		}
	})
}
