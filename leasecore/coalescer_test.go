package leasecore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// batchStore is a Store seam for the Coalescer's tests: it records the
// batches RenewBatch gets and renews the leases of owner "a" only. The other
// Store methods are not used.
type batchStore struct {
	Store
	mu      sync.Mutex
	batches [][]RenewParams
	fail    error // when set, every batch fails with it
}

func (s *batchStore) RenewBatch(_ context.Context, ps []RenewParams) ([]RenewResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, ps)
	if s.fail != nil {
		return nil, s.fail
	}
	out := make([]RenewResult, len(ps))
	for i, p := range ps {
		if p.Owner == "a" {
			out[i].Lease = &Lease{Task: p.Task, Owner: p.Owner, Token: p.Token, TTL: 10 * time.Second, TTLRemaining: 10 * time.Second}
		} else {
			out[i].Err = &LostError{Task: p.Task, Reason: LostHeldByOther}
		}
	}
	return out, nil
}

func (s *batchStore) sizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n []int
	for _, b := range s.batches {
		n = append(n, len(b))
	}
	return n
}

func (c *Coalescer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Renewals handed over within one window go to the store in one batch, no
// earlier than the window's end, and each caller gets its own answer.
func TestCoalescerGathersOneWindow(t *testing.T) {
	t.Parallel()
	store := &batchStore{}
	clk := newFakeClock()
	co := NewCoalescer(New(store), time.Second, clk)
	t.Cleanup(co.Close)

	const n = 100
	type result struct {
		i     int
		lease *Lease
		err   error
	}
	results := make(chan result, n)
	for i := range n {
		owner := "a"
		if i%10 == 9 {
			owner = "b"
		}
		go func() {
			l, err := co.Renew(context.Background(), RenewParams{Task: fmt.Sprintf("t%d", i), Owner: owner, Token: int64(i + 1), Credential: fmt.Sprintf("cred-%d", i)})
			results <- result{i, l, err}
		}()
	}
	if d := clk.nextWait(t); d != time.Second {
		t.Fatalf("the first renewal armed a flush in %s, want the window, 1s", d)
	}
	waitFor(t, "every renewal is queued", func() bool { return co.queued() == n })
	if got := store.sizes(); len(got) != 0 {
		t.Fatalf("batches %v were sent before the window ended", got)
	}
	select {
	case d := <-clk.added:
		t.Fatalf("a second flush was armed (%s) for renewals of the same window", d)
	default:
	}
	clk.Advance(time.Second)
	for range n {
		r := <-results
		switch {
		case r.i%10 == 9:
			if !errors.Is(r.err, ErrLost) || r.lease != nil {
				t.Errorf("renewal %d of another owner's lease: %v, %v; want lost", r.i, r.lease, r.err)
			}
		case r.err != nil || r.lease == nil || r.lease.Token != int64(r.i+1) || r.lease.Task != fmt.Sprintf("t%d", r.i):
			t.Errorf("renewal %d: %+v, %v; want its own lease", r.i, r.lease, r.err)
		}
	}
	if got := store.sizes(); len(got) != 1 || got[0] != n {
		t.Fatalf("batches %v, want one of %d", got, n)
	}
	// Each renewal in the batch acts for its own caller's credential.
	store.mu.Lock()
	defer store.mu.Unlock()
	for _, p := range store.batches[0] {
		if want := "cred-" + p.Task[1:]; p.Credential != want {
			t.Errorf("renewal of %s went in the batch for credential %q, want its caller's %q", p.Task, p.Credential, want)
		}
	}
}

// A renewal whose caller gave up before the window ended is not sent; one
// that arrives after a flush waits for the next window.
func TestCoalescerDropsAbandonedAndStartsANewWindow(t *testing.T) {
	t.Parallel()
	store := &batchStore{}
	clk := newFakeClock()
	co := NewCoalescer(New(store), time.Second, clk)
	t.Cleanup(co.Close)

	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := co.Renew(ctx, RenewParams{Task: "gone", Owner: "a"})
		gone <- err
	}()
	clk.nextWait(t)
	kept := make(chan error, 1)
	go func() {
		_, err := co.Renew(context.Background(), RenewParams{Task: "kept", Owner: "a"})
		kept <- err
	}()
	waitFor(t, "both renewals are queued", func() bool { return co.queued() == 2 })
	cancel()
	if err := <-gone; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("abandoned renewal: %v, want unavailable", err)
	}
	clk.Advance(time.Second)
	if err := <-kept; err != nil {
		t.Fatalf("kept renewal: %v", err)
	}
	if b := store.batches; len(b) != 1 || len(b[0]) != 1 || b[0][0].Task != "kept" {
		t.Fatalf("batches %v, want one with only the kept renewal", b)
	}

	late := make(chan error, 1)
	go func() {
		_, err := co.Renew(context.Background(), RenewParams{Task: "late", Owner: "a"})
		late <- err
	}()
	if d := clk.nextWait(t); d != time.Second {
		t.Fatalf("a renewal after the flush armed %s, want a new window of 1s", d)
	}
	clk.Advance(time.Second)
	if err := <-late; err != nil {
		t.Fatalf("late renewal: %v", err)
	}
	if got := store.sizes(); len(got) != 2 {
		t.Fatalf("batches %v, want two", got)
	}
}

// A batch that fails as a whole makes every renewal in it unavailable, not
// lost; invalid input is refused before it is queued.
func TestCoalescerFailedBatchIsUnavailable(t *testing.T) {
	t.Parallel()
	store := &batchStore{fail: Unavailable("renew", errors.New("connection refused"))}
	clk := newFakeClock()
	co := NewCoalescer(New(store), time.Second, clk)
	t.Cleanup(co.Close)

	if _, err := co.Renew(context.Background(), RenewParams{Task: "x", Owner: ""}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("renewal without an owner: %v, want invalid", err)
	}
	errs := make(chan error, 2)
	for _, task := range []string{"x", "y"} {
		go func() {
			_, err := co.Renew(context.Background(), RenewParams{Task: task, Owner: "a"})
			errs <- err
		}()
	}
	clk.nextWait(t)
	waitFor(t, "both renewals are queued", func() bool { return co.queued() == 2 })
	clk.Advance(time.Second)
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrLost) {
			t.Errorf("renewal in a failed batch: %v, want unavailable only", err)
		}
	}
}

// A keeper with a lead hands each renewal over that much before it is due,
// so the renewer's wait does not make it late.
func TestKeeperHandsOverRenewalsLeadEarly(t *testing.T) {
	t.Parallel()
	_, clk, r := startKeeper(t, KeeperConfig{Lead: 500 * time.Millisecond})
	for i := range 3 {
		if d := clk.nextWait(t); d != 3500*time.Millisecond {
			t.Fatalf("wait before renewal %d = %s, want ttl × 0.4 − lead = 3.5s", i, d)
		}
		clk.Advance(3500 * time.Millisecond)
		call := r.nextRenew(t)
		call.reply <- renewReply{lease: &Lease{Task: "nightly", Owner: "w1", Token: 7, TTL: 10 * time.Second, TTLRemaining: 10 * time.Second}}
	}
}
