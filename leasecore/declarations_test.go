package leasecore

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// catalogStub is a Store whose ListTasks answers what the test sends on
// loads, one load at a time, and whose Claim grants what it is asked. The
// other methods are not used (the embedded nil Store would panic).
type catalogStub struct {
	Store
	loads   chan chan []TaskDecl // each ListTasks sends its reply channel here
	listed  atomic.Int32
	claimed chan ClaimParams
}

func newCatalogStub() *catalogStub {
	return &catalogStub{loads: make(chan chan []TaskDecl), claimed: make(chan ClaimParams, 16)}
}

func (c *catalogStub) ListTasks(ctx context.Context, _ ListParams) ([]TaskDecl, error) {
	c.listed.Add(1)
	reply := make(chan []TaskDecl)
	select {
	case c.loads <- reply:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case ds := <-reply:
		return ds, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *catalogStub) Claim(_ context.Context, p ClaimParams) (*Lease, error) {
	c.claimed <- p
	return &Lease{Task: p.Task, Owner: p.Owner, Token: 1, TTL: p.TTL, TTLRemaining: p.TTL}, nil
}

// A claim never joins a load sent longer than the staleness bound ago: on
// a slow store it sends its own, and the newer answer decides.
func TestClaimDoesNotJoinAStaleLoad(t *testing.T) {
	t.Parallel()
	st := newCatalogStub()
	const maxAge = 50 * time.Millisecond
	svc := New(st, WithDeclarations(maxAge, false))
	claim := func(owner string, ttl time.Duration) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := svc.Claim(context.Background(), ClaimParams{Task: "report", Owner: owner, TTL: ttl})
			done <- err
		}()
		return done
	}

	first := claim("a", time.Minute)
	slow := <-st.loads // the first load is sent, and the store is slow
	time.Sleep(2 * maxAge)
	second := claim("b", time.Minute)
	var fresh chan []TaskDecl
	select {
	case fresh = <-st.loads:
	case <-time.After(10 * time.Second):
		t.Fatal("the second claim joined a load older than the staleness bound instead of sending its own")
	}
	// Meanwhile the task was declared with a max_ttl below the claims' ttl:
	// the fresh load sees it, the slow one does not.
	fresh <- []TaskDecl{{Name: "report", TTL: 10 * time.Second, MaxTTL: 30 * time.Second}}
	if err := <-second; !errors.Is(err, ErrInvalid) {
		t.Fatalf("second claim: %v, want refused by the max_ttl its own load saw", err)
	}
	slow <- nil
	if err := <-first; err != nil {
		t.Fatalf("first claim, decided by the load it sent: %v", err)
	}
	if n := st.listed.Load(); n != 2 {
		t.Fatalf("%d loads, want 2", n)
	}
}

// Concurrent claims share one load.
func TestClaimsShareALoad(t *testing.T) {
	t.Parallel()
	st := newCatalogStub()
	svc := New(st, WithDeclarations(time.Minute, false))
	const n = 8
	done := make(chan error, n)
	for i := range n {
		go func() {
			_, err := svc.Claim(context.Background(), ClaimParams{Task: "report", Owner: string(rune('a' + i))})
			done <- err
		}()
	}
	reply := <-st.loads
	// Every claim is waiting for the load (none has reached the store).
	if len(st.claimed) > 0 {
		t.Fatal("a claim reached the store before the declarations were loaded")
	}
	reply <- []TaskDecl{{Name: "report", TTL: 42 * time.Second}}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if p := <-st.claimed; p.TTL != 42*time.Second {
			t.Fatalf("claim sent ttl %s, want the declared 42s", p.TTL)
		}
	}
	if got := st.listed.Load(); got != 1 {
		t.Fatalf("%d loads for %d concurrent claims, want 1", got, n)
	}
}
