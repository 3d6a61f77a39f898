package leasecore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only when the test says so.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	ids     int
	added   chan time.Duration // every After and AfterFunc call, with its duration
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time // After
	f  func()         // AfterFunc
	id int
}

// fakeTimer stops an AfterFunc of a fakeClock.
type fakeTimer struct {
	c  *fakeClock
	id int
}

func (t fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, w := range t.c.waiters {
		if w.id == t.id {
			t.c.waiters = append(t.c.waiters[:i], t.c.waiters[i+1:]...)
			return true
		}
	}
	return false
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	c.ids++
	id := c.ids
	if d <= 0 {
		go f()
	} else {
		c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), f: f, id: id})
	}
	c.mu.Unlock()
	c.added <- d
	return fakeTimer{c: c, id: id}
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), added: make(chan time.Duration, 100)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
	} else {
		c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	}
	c.mu.Unlock()
	c.added <- d
	return ch
}

// Advance moves the clock and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			if w.f != nil {
				go w.f()
			} else {
				w.ch <- c.now
			}
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// nextWait returns the duration of the keeper's next After call.
func (c *fakeClock) nextWait(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.added:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper did not start waiting")
		return 0
	}
}

// scriptedRenewer hands every Renew to the test, which answers it.
type scriptedRenewer struct {
	renews   chan renewCall
	mu       sync.Mutex
	releases []ReleaseParams
}

type renewCall struct {
	p     RenewParams
	ctx   context.Context
	reply chan renewReply
}

type renewReply struct {
	lease *Lease
	err   error
}

func newScriptedRenewer() *scriptedRenewer {
	return &scriptedRenewer{renews: make(chan renewCall)}
}

func (r *scriptedRenewer) Renew(ctx context.Context, p RenewParams) (*Lease, error) {
	call := renewCall{p: p, ctx: ctx, reply: make(chan renewReply, 1)}
	r.renews <- call
	select {
	case rep := <-call.reply:
		return rep.lease, rep.err
	case <-ctx.Done():
		return nil, Unavailable("renew", ctx.Err())
	}
}

func (r *scriptedRenewer) Release(_ context.Context, p ReleaseParams) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases = append(r.releases, p)
	return true, nil
}

// nextRenew waits for the keeper's next renewal.
func (r *scriptedRenewer) nextRenew(t *testing.T) renewCall {
	t.Helper()
	select {
	case c := <-r.renews:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper did not renew")
		return renewCall{}
	}
}

// noRenewPending asserts that no renewal is waiting to be answered now.
func (r *scriptedRenewer) noRenewPending(t *testing.T) {
	t.Helper()
	select {
	case c := <-r.renews:
		t.Fatalf("unexpected renewal %+v", c.p)
	default:
	}
}

func heldLease(ttl time.Duration) *Lease {
	return &Lease{Task: "nightly", Owner: "w1", Token: 7, TTL: ttl, TTLRemaining: ttl}
}

func startKeeper(t *testing.T, cfg KeeperConfig) (*Keeper, *fakeClock, *scriptedRenewer) {
	t.Helper()
	clk := newFakeClock()
	cfg.Clock = clk
	r := newScriptedRenewer()
	k, err := Keep(context.Background(), r, heldLease(10*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.cancel(ErrStopped)
		// Unblock a renewal the test left unanswered.
		for {
			select {
			case c := <-r.renews:
				c.reply <- renewReply{err: Unavailable("renew", errors.New("test over"))}
			case <-k.Done():
				return
			}
		}
	})
	return k, clk, r
}

func TestKeeperRenewsAtTheCadence(t *testing.T) {
	t.Parallel()
	var renewed []Lease
	var mu sync.Mutex
	k, clk, r := startKeeper(t, KeeperConfig{OnRenew: func(l Lease) { mu.Lock(); renewed = append(renewed, l); mu.Unlock() }})

	d := clk.nextWait(t)
	for i := range 3 {
		if d != 4*time.Second {
			t.Fatalf("wait before renewal %d = %s, want ttl × 0.4 = 4s", i, d)
		}
		clk.Advance(d)
		call := r.nextRenew(t)
		// TTL zero: keep the lease's own ttl, so that a max_ttl declared
		// since the claim cannot refuse the renewal.
		if call.p.Task != "nightly" || call.p.Owner != "w1" || call.p.Token != 7 || call.p.TTL != 0 {
			t.Fatalf("renewal %d asked %+v, want the lease's task, owner and token, and ttl 0 (keep it)", i, call.p)
		}
		sentAt := clk.Now()
		// The store answers with 9.5 s left: the deadline is the send time
		// plus what the store promised, not plus the full ttl.
		call.reply <- renewReply{lease: &Lease{Task: "nightly", Owner: "w1", Token: 7, TTL: 10 * time.Second, TTLRemaining: 9500 * time.Millisecond, RenewCount: int64(i + 1)}}
		d = clk.nextWait(t)
		if got, want := k.Deadline(), sentAt.Add(9500*time.Millisecond); !got.Equal(want) {
			t.Fatalf("deadline %v, want send time + ttl_remaining = %v", got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(renewed) != 3 || renewed[2].RenewCount != 3 || k.Lease().RenewCount != 3 {
		t.Fatalf("OnRenew saw %d renewals (last %+v), want 3", len(renewed), k.Lease())
	}
	if k.Err() != nil || k.Context().Err() != nil {
		t.Fatalf("a kept lease reports %v / %v", k.Err(), k.Context().Err())
	}
}

func TestKeeperLosesAtOnceWhenTheStoreRefuses(t *testing.T) {
	t.Parallel()
	k, clk, r := startKeeper(t, KeeperConfig{})
	clk.nextWait(t)
	clk.Advance(4 * time.Second)
	lost := &LostError{Task: "nightly", Reason: LostHeldByOther}
	r.nextRenew(t).reply <- renewReply{err: lost}
	<-k.Done()
	if !errors.Is(k.Err(), ErrLost) || !errors.Is(context.Cause(k.Context()), ErrLost) {
		t.Fatalf("Err %v, cause %v; want the LostError", k.Err(), context.Cause(k.Context()))
	}
	var le *LostError
	if !errors.As(k.Err(), &le) || le.Reason != LostHeldByOther {
		t.Fatalf("loss %v does not carry the reason", k.Err())
	}
	r.noRenewPending(t)
}

func TestKeeperRetriesTransientErrorsUntilTheLocalDeadline(t *testing.T) {
	t.Parallel()
	k, clk, r := startKeeper(t, KeeperConfig{RetryEvery: time.Second})
	start := clk.Now()
	clk.nextWait(t)
	clk.Advance(4 * time.Second)
	calls := 0
	for {
		call := r.nextRenew(t)
		calls++
		if dl, ok := call.ctx.Deadline(); !ok || dl.IsZero() {
			t.Fatal("a renewal runs without a deadline")
		}
		call.reply <- renewReply{err: Unavailable("renew", errors.New("connection refused"))}
		d := clk.nextWait(t)
		if clk.Now().Add(d).After(start.Add(10 * time.Second)) {
			t.Fatalf("the keeper sleeps %s past its deadline", d)
		}
		clk.Advance(d)
		if !clk.Now().Before(start.Add(10 * time.Second)) {
			break
		}
	}
	<-k.Done()
	if !errors.Is(k.Err(), ErrLocalDeadline) || !errors.Is(context.Cause(k.Context()), ErrLocalDeadline) {
		t.Fatalf("Err %v, want ErrLocalDeadline", k.Err())
	}
	// Renewals at 4, 5, 6, 7, 8 and 9 s; at 10 s the deadline has come.
	if calls != 6 {
		t.Fatalf("%d renewals tried, want 6 (one a second from 4 s to 9 s)", calls)
	}
	r.noRenewPending(t)
}

// A keeper configured with a ttl other than the lease's asks for it at
// every renewal.
func TestKeeperAsksForItsConfiguredTTL(t *testing.T) {
	t.Parallel()
	_, clk, r := startKeeper(t, KeeperConfig{TTL: 20 * time.Second})
	clk.Advance(clk.nextWait(t))
	call := r.nextRenew(t)
	if call.p.TTL != 20*time.Second {
		t.Fatalf("renewal asked ttl %s, want the configured 20s", call.p.TTL)
	}
	call.reply <- renewReply{lease: heldLease(20 * time.Second)}
}

func TestKeeperHasOneRenewalInFlight(t *testing.T) {
	t.Parallel()
	k, clk, r := startKeeper(t, KeeperConfig{TTL: 10 * time.Second})
	clk.nextWait(t)
	clk.Advance(4 * time.Second)
	call := r.nextRenew(t)
	// A slow store: much time passes while the renewal is in flight, and
	// no second renewal starts.
	clk.Advance(5 * time.Second)
	r.noRenewPending(t)
	call.reply <- renewReply{lease: &Lease{Task: "nightly", Owner: "w1", Token: 7, TTL: 10 * time.Second, TTLRemaining: 10 * time.Second}}
	// The late answer delays the next renewal rather than stacking them:
	// the interval since the send has passed, so it renews once, now.
	if d := clk.nextWait(t); d > 0 {
		t.Fatalf("wait after a slow renewal = %s, want 0 (due now)", d)
	}
	r.nextRenew(t).reply <- renewReply{lease: heldLease(10 * time.Second)}
	if d := clk.nextWait(t); d != 4*time.Second {
		t.Fatalf("then the cadence resumes with %s, want 4s", d)
	}
	r.noRenewPending(t)
	if k.Err() != nil {
		t.Fatal(k.Err())
	}
}

func TestKeeperStopCancelsWithoutLoss(t *testing.T) {
	t.Parallel()
	k, clk, r := startKeeper(t, KeeperConfig{})
	clk.nextWait(t)
	if err := k.Stop(); err != nil {
		t.Fatalf("Stop = %v, want nil for a lease that was not lost", err)
	}
	if !errors.Is(context.Cause(k.Context()), ErrStopped) {
		t.Fatalf("cause after Stop = %v", context.Cause(k.Context()))
	}
	if ok, err := k.Release(); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.releases) != 1 || r.releases[0].Token != 7 || r.releases[0].Owner != "w1" {
		t.Fatalf("releases %+v, want one token-checked release", r.releases)
	}
}

func TestKeeperConfigTimingRules(t *testing.T) {
	t.Parallel()
	lease := heldLease(10 * time.Second)
	for _, tc := range []struct {
		name string
		cfg  KeeperConfig
		ok   bool
	}{
		{"defaults", KeeperConfig{}, true},
		{"renew before ttl", KeeperConfig{RenewEvery: 9 * time.Second}, true},
		{"renew at ttl", KeeperConfig{RenewEvery: 10 * time.Second}, false},
		{"renew negative", KeeperConfig{RenewEvery: -time.Second}, false},
		{"retry above renew", KeeperConfig{RenewEvery: 2 * time.Second, RetryEvery: 3 * time.Second}, false},
		{"retry negative", KeeperConfig{RetryEvery: -time.Second}, false},
		{"lead below renew", KeeperConfig{Lead: 3 * time.Second}, true},
		{"lead at renew", KeeperConfig{Lead: 4 * time.Second}, false},
		{"lead negative", KeeperConfig{Lead: -time.Millisecond}, false},
		{"ttl below minimum", KeeperConfig{TTL: 50 * time.Millisecond}, false},
		{"ttl above maximum", KeeperConfig{TTL: 25 * time.Hour}, false},
		{"credential", KeeperConfig{Credential: "deploy-bot"}, true},
		{"credential with a space", KeeperConfig{Credential: "deploy bot"}, false},
		{"credential of 65 bytes", KeeperConfig{Credential: strings.Repeat("c", MaxCredentialLen+1)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := tc.cfg.withDefaults(lease)
			if (err == nil) != tc.ok {
				t.Fatalf("withDefaults(%+v) error = %v, want ok=%v", tc.cfg, err, tc.ok)
			}
			if tc.ok && tc.name == "defaults" && (cfg.RenewEvery != 4*time.Second || cfg.RetryEvery != time.Second || cfg.TTL != 10*time.Second) {
				t.Fatalf("defaults = %+v, want renew 4s, retry 1s, ttl 10s", cfg)
			}
		})
	}
}

// A keeper acts for its configured credential: every renewal and its
// release carry it, so the lost or released event that ends the lease
// names the credential of the stream that held it.
func TestKeeperActsForItsCredential(t *testing.T) {
	t.Parallel()
	k, clk, r := startKeeper(t, KeeperConfig{Credential: "stream-cred"})
	for i := range 2 {
		clk.Advance(clk.nextWait(t))
		call := r.nextRenew(t)
		if call.p.Credential != "stream-cred" {
			t.Fatalf("renewal %d carries credential %q, want the keeper's stream-cred", i, call.p.Credential)
		}
		call.reply <- renewReply{lease: heldLease(10 * time.Second)}
	}
	clk.nextWait(t)
	if ok, err := k.Release(); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.releases) != 1 || r.releases[0].Credential != "stream-cred" {
		t.Fatalf("releases %+v, want one for credential stream-cred", r.releases)
	}
}

// A renewal refused because the store's role may no longer act on the
// task (its scope changed) ends the keeper at once, as a loss does: it is
// no transient failure to retry until the deadline.
func TestKeeperLosesAtOnceWhenForbidden(t *testing.T) {
	t.Parallel()
	k, clk, r := startKeeper(t, KeeperConfig{})
	clk.nextWait(t)
	clk.Advance(4 * time.Second)
	r.nextRenew(t).reply <- renewReply{err: &ForbiddenError{Principal: `database role "a"`, Right: RightHold, Task: "nightly"}}
	select {
	case <-k.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper did not end on a refusal: it retries it as a transient failure")
	}
	if !errors.Is(k.Err(), ErrForbidden) || !errors.Is(context.Cause(k.Context()), ErrForbidden) {
		t.Fatalf("Err %v, cause %v; want the ForbiddenError", k.Err(), context.Cause(k.Context()))
	}
	r.noRenewPending(t)
}
