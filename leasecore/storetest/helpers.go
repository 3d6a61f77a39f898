package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

const (
	// shortTTL is the minimum TTL: the lease a case lets expire.
	shortTTL = leasecore.MinTTL
	// longTTL outlives any case, so a lease claimed with it stays live.
	longTTL = 10 * time.Minute
	// waitLimit bounds every poll for a condition the store will reach
	// eventually (an expiry, its clock moving on).
	waitLimit = 5 * time.Second
	// precision is how far two readings of one stored instant or duration
	// may differ: the model keeps times to at least the millisecond.
	precision = time.Millisecond
	// racers is how many goroutines contend for one task in a race case.
	racers = 32
)

// suite carries what the cases share: the driver and one long-lived store
// (with its Service) over the suite's data.
type suite struct {
	d     Driver
	store leasecore.Store
	svc   *leasecore.Service
}

// closeOnce makes a store's Close idempotent for the suite, so a case may
// close a store explicitly and its cleanup still closes whatever is left open.
type closeOnce struct {
	leasecore.Store
	once sync.Once
	err  error
}

func (c *closeOnce) Close() error {
	c.once.Do(func() { c.err = c.Store.Close() })
	return c.err
}

// open opens a store with one of the driver's constructors and closes it when
// t ends.
func (s *suite) open(t *testing.T, open func(*testing.T) leasecore.Store) leasecore.Store {
	t.Helper()
	st := open(t)
	if st == nil {
		t.Fatal("driver returned a nil store")
	}
	c := &closeOnce{Store: st}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Logf("closing store: %v", err)
		}
	})
	// Keep the driver's batch renewal and feed visible to the Service and
	// the cases.
	br, batches := st.(leasecore.BatchRenewer)
	f, feeds := st.(leasecore.HistoryFeed)
	switch {
	case batches && feeds:
		return &batchFeedCloseOnce{closeOnce: c, BatchRenewer: br, HistoryFeed: f}
	case batches:
		return &batchCloseOnce{closeOnce: c, BatchRenewer: br}
	case feeds:
		return &feedCloseOnce{closeOnce: c, HistoryFeed: f}
	}
	return c
}

// unwrap is the driver's store under the wrapper, for messages.
func (c *closeOnce) unwrap() leasecore.Store { return c.Store }

// ReleaseHold keeps the driver's minimum holds visible to the Service: the
// driver's own when it is a leasecore.HoldReleaser, else its Release. The
// MinHold cases ask the driver's store itself whether it keeps them.
func (c *closeOnce) ReleaseHold(ctx context.Context, p leasecore.ReleaseParams) (leasecore.ReleaseResult, error) {
	if hr, ok := c.Store.(leasecore.HoldReleaser); ok {
		return hr.ReleaseHold(ctx, p)
	}
	released, err := c.Store.Release(ctx, p)
	return leasecore.ReleaseResult{Released: released}, err
}

// batchCloseOnce is closeOnce for a driver that is a BatchRenewer.
type batchCloseOnce struct {
	*closeOnce
	leasecore.BatchRenewer
}

// feedCloseOnce is closeOnce for a driver that is a HistoryFeed.
type feedCloseOnce struct {
	*closeOnce
	leasecore.HistoryFeed
}

// batchFeedCloseOnce is closeOnce for a driver that is both.
type batchFeedCloseOnce struct {
	*closeOnce
	leasecore.BatchRenewer
	leasecore.HistoryFeed
}

// uniqueTask returns a valid task name that no other case (and no earlier
// run over the same data) uses: the test's name, sanitised to the task
// charset, plus a random suffix.
func uniqueTask(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(t.Name()); i++ {
		if c := t.Name()[i]; isTaskChar(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	base := b.String()
	if len(base) > 120 { // keep the tail: it names the case
		base = base[len(base)-120:]
	}
	// Subtest names may hold empty or dot segments ("a//b", "..") that the
	// name rule refuses: make each such segment "_".
	segs := strings.Split(base, "/")
	for i, seg := range segs {
		if seg == "" || seg == "." || seg == ".." {
			segs[i] = "_"
		}
	}
	base = strings.Join(segs, "/")
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatalf("random suffix: %v", err)
	}
	task := base + "@" + hex.EncodeToString(r[:])
	if err := leasecore.ValidateTask(task); err != nil {
		t.Fatalf("uniqueTask made an invalid name %q: %v", task, err)
	}
	return task
}

func isTaskChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("._:/@-", c) >= 0
}

// near reports whether two durations are equal to the model's precision.
func near(a, b time.Duration) bool {
	d := a - b
	return -precision < d && d < precision
}

// sameInstant reports whether two readings of one stored time agree to the
// model's precision.
func sameInstant(a, b time.Time) bool { return near(a.Sub(b), 0) }

// checkLease fails t unless l satisfies what every lease the store hands out
// satisfies: a positive token, a TTL within bounds in whole milliseconds,
// expires_at = renewed_at + ttl, acquired_at ≤ renewed_at, and
// 0 < ttl_remaining ≤ ttl.
func checkLease(t *testing.T, what string, l *leasecore.Lease) {
	t.Helper()
	if l == nil {
		t.Fatalf("%s: nil lease", what)
	}
	if l.Token < 1 {
		t.Errorf("%s: token %d, want ≥ 1", what, l.Token)
	}
	if l.TTL < leasecore.MinTTL || l.TTL > leasecore.MaxTTL || l.TTL%time.Millisecond != 0 {
		t.Errorf("%s: ttl %v, want whole milliseconds within [%v, %v]", what, l.TTL, leasecore.MinTTL, leasecore.MaxTTL)
	}
	if l.AcquiredAt.IsZero() || l.RenewedAt.IsZero() || l.ExpiresAt.IsZero() {
		t.Errorf("%s: zero time in %+v", what, l)
	}
	if got := l.ExpiresAt.Sub(l.RenewedAt); !near(got, l.TTL) {
		t.Errorf("%s: expires_at − renewed_at = %v, want ttl %v", what, got, l.TTL)
	}
	if l.RenewedAt.Before(l.AcquiredAt) {
		t.Errorf("%s: renewed_at %v before acquired_at %v", what, l.RenewedAt, l.AcquiredAt)
	}
	if l.TTLRemaining <= 0 || l.TTLRemaining > l.TTL {
		t.Errorf("%s: ttl_remaining %v, want in (0, %v]", what, l.TTLRemaining, l.TTL)
	}
	if l.RenewCount < 0 {
		t.Errorf("%s: renew_count %d < 0", what, l.RenewCount)
	}
}

// checkSame fails t unless got records the same grant as want: every stored
// field equal (TTLRemaining is a reading, not a field, and is not compared).
func checkSame(t *testing.T, what string, got, want *leasecore.Lease) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: no live lease, want %s held by %q (token %d)", what, want.Task, want.Owner, want.Token)
	}
	if got.Task != want.Task || got.Owner != want.Owner || got.Token != want.Token ||
		got.TTL != want.TTL || got.RenewCount != want.RenewCount || got.Note != want.Note ||
		!sameInstant(got.AcquiredAt, want.AcquiredAt) || !sameInstant(got.RenewedAt, want.RenewedAt) ||
		!sameInstant(got.ExpiresAt, want.ExpiresAt) {
		t.Errorf("%s: lease changed\n got %s\nwant %s", what, show(got), show(want))
	}
}

func show(l *leasecore.Lease) string {
	if l == nil {
		return "<none>"
	}
	return fmt.Sprintf("{task %s owner %q token %d acquired %s renewed %s expires %s ttl %v remaining %v renews %d note %q}",
		l.Task, l.Owner, l.Token, l.AcquiredAt.UTC().Format(time.RFC3339Nano), l.RenewedAt.UTC().Format(time.RFC3339Nano),
		l.ExpiresAt.UTC().Format(time.RFC3339Nano), l.TTL, l.TTLRemaining, l.RenewCount, l.Note)
}

// claimOK claims through svc, fails t unless the claim is acquired, and
// checks that the lease echoes the request.
func claimOK(t *testing.T, svc *leasecore.Service, p leasecore.ClaimParams) *leasecore.Lease {
	t.Helper()
	l, err := svc.Claim(t.Context(), p)
	if err != nil {
		t.Fatalf("claim %s by %q: %v", p.Task, p.Owner, err)
	}
	what := fmt.Sprintf("claim %s by %q", p.Task, p.Owner)
	checkLease(t, what, l)
	wantTTL := p.TTL.Truncate(time.Millisecond)
	if wantTTL == 0 {
		wantTTL = leasecore.DefaultTTL
	}
	if l.Task != p.Task || l.Owner != p.Owner || l.Note != p.Note || l.TTL != wantTTL {
		t.Errorf("%s: lease %s does not echo task, owner, note, ttl %v", what, show(l), wantTTL)
	}
	return l
}

// claim is claimOK with the common parameters.
func claim(t *testing.T, svc *leasecore.Service, task, owner string, ttl time.Duration) *leasecore.Lease {
	t.Helper()
	return claimOK(t, svc, leasecore.ClaimParams{Task: task, Owner: owner, TTL: ttl})
}

// renewOK renews through svc and fails t unless it succeeds.
func renewOK(t *testing.T, svc *leasecore.Service, p leasecore.RenewParams) *leasecore.Lease {
	t.Helper()
	l, err := svc.Renew(t.Context(), p)
	if err != nil {
		t.Fatalf("renew %s by %q (token %d): %v", p.Task, p.Owner, p.Token, err)
	}
	what := fmt.Sprintf("renew %s by %q", p.Task, p.Owner)
	checkLease(t, what, l)
	if l.Task != p.Task || l.Owner != p.Owner {
		t.Errorf("%s: lease %s does not echo task and owner", what, show(l))
	}
	return l
}

// release releases through svc and returns what the store answered; any
// error fails t.
func release(t *testing.T, svc *leasecore.Service, task, owner string, token int64) bool {
	t.Helper()
	ok, err := svc.Release(t.Context(), leasecore.ReleaseParams{Task: task, Owner: owner, Token: token})
	if err != nil {
		t.Fatalf("release %s by %q (token %d): %v (releasing what is not held is never an error)", task, owner, token, err)
	}
	return ok
}

// releaseOK fails t unless the release ended a lease.
func releaseOK(t *testing.T, svc *leasecore.Service, task, owner string, token int64) {
	t.Helper()
	if !release(t, svc, task, owner, token) {
		t.Fatalf("release %s by %q (token %d) = false, want true: the owner held it live", task, owner, token)
	}
}

// heldProblem describes how err fails to be a claim refused because owner
// holds task live, or returns "" when it is one.
func heldProblem(err error, task, owner string) string {
	if !errors.Is(err, leasecore.ErrHeld) {
		return fmt.Sprintf("got %v, want ErrHeld naming %q", err, owner)
	}
	if errors.Is(err, leasecore.ErrUnavailable) || errors.Is(err, leasecore.ErrLost) || errors.Is(err, leasecore.ErrInvalid) {
		return fmt.Sprintf("%v matches another sentinel besides ErrHeld", err)
	}
	var he *leasecore.HeldError
	if !errors.As(err, &he) {
		return fmt.Sprintf("%v (%T) is ErrHeld but no *HeldError", err, err)
	}
	switch {
	case he.Task != task:
		return fmt.Sprintf("HeldError.Task %q, want %q", he.Task, task)
	case he.Holder.Owner != owner:
		return fmt.Sprintf("HeldError names holder %q, want %q", he.Holder.Owner, owner)
	case he.Holder.TTLRemaining <= 0:
		return fmt.Sprintf("HeldError.Holder.TTLRemaining %v, want > 0 (the holder's lease is live)", he.Holder.TTLRemaining)
	case he.Holder.ExpiresAt.IsZero():
		return "HeldError.Holder.ExpiresAt is zero"
	}
	return ""
}

// mustHeld fails t unless err refuses a claim of task because owner holds it.
func mustHeld(t *testing.T, err error, task, owner string) *leasecore.HeldError {
	t.Helper()
	if p := heldProblem(err, task, owner); p != "" {
		t.Fatalf("claim of %s: %s", task, p)
	}
	var he *leasecore.HeldError
	errors.As(err, &he)
	return he
}

// mustLost fails t unless err is a renewal refused with reason.
func mustLost(t *testing.T, err error, reason leasecore.LostReason) {
	t.Helper()
	if !errors.Is(err, leasecore.ErrLost) {
		t.Fatalf("renew: got %v, want ErrLost (%s)", err, reason)
	}
	if errors.Is(err, leasecore.ErrUnavailable) || errors.Is(err, leasecore.ErrHeld) || errors.Is(err, leasecore.ErrInvalid) {
		t.Errorf("renew: %v matches another sentinel besides ErrLost", err)
	}
	var le *leasecore.LostError
	if !errors.As(err, &le) {
		t.Fatalf("renew: %v (%T) is ErrLost but no *LostError", err, err)
	}
	if le.Reason != reason {
		t.Fatalf("renew: lost with reason %q, want %q (%v)", le.Reason, reason, err)
	}
}

// renewLost renews through svc and fails t unless it is lost with reason.
func renewLost(t *testing.T, svc *leasecore.Service, p leasecore.RenewParams, reason leasecore.LostReason) {
	t.Helper()
	l, err := svc.Renew(t.Context(), p)
	if err == nil {
		t.Fatalf("renew %s by %q (token %d) succeeded with %s, want lost (%s)", p.Task, p.Owner, p.Token, show(l), reason)
	}
	mustLost(t, err, reason)
}

// get reads the task's live lease through svc; an error fails t.
func get(t *testing.T, svc *leasecore.Service, task string) *leasecore.Lease {
	t.Helper()
	l, err := svc.Get(t.Context(), task)
	if err != nil {
		t.Fatalf("get %s: %v", task, err)
	}
	if l != nil {
		checkLease(t, "get "+task, l)
		if l.Task != task {
			t.Errorf("get %s returned the lease of %s", task, l.Task)
		}
	}
	return l
}

// mustGone fails t unless the task has no live lease.
func mustGone(t *testing.T, svc *leasecore.Service, task string) {
	t.Helper()
	if l := get(t, svc, task); l != nil {
		t.Fatalf("get %s = %s, want no live lease", task, show(l))
	}
}

// listed returns the live leases whose task starts with prefix, in the order
// the store listed them, after checking that the whole list is strictly
// ordered by task and that the returned leases are well formed. (Other
// cases' leases are checked by their own cases, so that a failure names the
// case that provoked it.)
func listed(t *testing.T, svc *leasecore.Service, prefix string) []leasecore.Lease {
	t.Helper()
	all, _, err := svc.List(t.Context(), leasecore.ListParams{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var mine []leasecore.Lease
	for i := range all {
		if i > 0 && all[i-1].Task >= all[i].Task {
			t.Errorf("list not strictly ordered by task (bytewise): %q before %q", all[i-1].Task, all[i].Task)
		}
		if strings.HasPrefix(all[i].Task, prefix) {
			checkLease(t, "list entry "+all[i].Task, &all[i])
			mine = append(mine, all[i])
		}
	}
	return mine
}

// poll calls cond every interval until it reports true, failing t if it has
// not by waitLimit. It is how the suite waits for the store: never a bare
// sleep, never an assertion on how long it took.
func poll(t *testing.T, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", waitLimit, what)
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatalf("test ended while waiting for %s", what)
		}
	}
}

// waitExpired waits until the store no longer reports a live lease on task.
func waitExpired(t *testing.T, svc *leasecore.Service, task string) {
	t.Helper()
	poll(t, 10*time.Millisecond, "the lease on "+task+" to expire", func() bool {
		return get(t, svc, task) == nil
	})
}

// waitClockPast waits until the store's clock is at least d past the moment
// l was granted or renewed, read through the lease's shrinking TTLRemaining.
// A case uses it before a refresh or renewal so that a timestamp that must
// (or must not) move is seen to move or not beyond the model's precision.
func waitClockPast(t *testing.T, svc *leasecore.Service, l *leasecore.Lease, d time.Duration) {
	t.Helper()
	poll(t, time.Millisecond, fmt.Sprintf("the store's clock to pass %v after the lease on %s", d, l.Task), func() bool {
		g := get(t, svc, l.Task)
		if g == nil {
			t.Fatalf("lease on %s ended while waiting for the clock; it was claimed for %v", l.Task, l.TTL)
		}
		return g.TTLRemaining <= l.TTLRemaining-d
	})
}

// raceResult is one contender's outcome in a claim race.
type raceResult struct {
	owner string
	lease *leasecore.Lease
	err   error
}

// race has racers goroutines, spread over svcs, claim task at once with
// distinct owners. It fails t unless exactly one acquires and every other is
// refused as held by the winner, and returns the winning lease.
func race(t *testing.T, svcs []*leasecore.Service, task string, ttl time.Duration) *leasecore.Lease {
	t.Helper()
	results := make([]raceResult, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		owner := fmt.Sprintf("racer-%02d", i)
		svc := svcs[i%len(svcs)]
		wg.Go(func() {
			<-start
			l, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: ttl})
			results[i] = raceResult{owner: owner, lease: l, err: err}
		})
	}
	close(start)
	wg.Wait()

	var winners []raceResult
	for _, r := range results {
		if r.err == nil {
			winners = append(winners, r)
		}
	}
	if len(winners) != 1 {
		var b strings.Builder
		for _, w := range winners {
			fmt.Fprintf(&b, "\n  %s", show(w.lease))
		}
		t.Fatalf("%d of %d concurrent claims acquired %s, want exactly 1:%s", len(winners), racers, task, b.String())
	}
	win := winners[0]
	checkLease(t, "winning claim", win.lease)
	if win.lease.Owner != win.owner || win.lease.RenewCount != 0 {
		t.Errorf("winning claim by %q returned %s, want its own fresh lease", win.owner, show(win.lease))
	}
	for _, r := range results {
		if r.err == nil {
			continue
		}
		if p := heldProblem(r.err, task, win.owner); p != "" {
			t.Errorf("loser %q: %s", r.owner, p)
		}
	}
	checkSame(t, "lease after the race", get(t, svcs[0], task), win.lease)
	return win.lease
}

// opCtx bounds a direct call to a store that may hang, so a broken driver
// fails its case instead of the whole test binary's timeout.
func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
