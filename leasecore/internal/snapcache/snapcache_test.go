package snapcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOneLoadForWaiters: callers that find the copy stale while a load is
// in flight wait for it and share its result; the copy is then used until
// it is MaxAge old.
func TestOneLoadForWaiters(t *testing.T) {
	t.Parallel()
	c := &Cache[int]{MaxAge: time.Hour}
	var loads atomic.Int32
	release := make(chan struct{})
	fetch := func(context.Context) (int, error) {
		loads.Add(1)
		<-release
		return 7, nil
	}
	var wg sync.WaitGroup
	results := make(chan int, 8)
	for range 8 {
		wg.Go(func() {
			v, err := c.Get(context.Background(), fetch)
			if err != nil {
				t.Error(err)
			}
			results <- v
		})
	}
	for loads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(results)
	for v := range results {
		if v != 7 {
			t.Errorf("Get = %d, want 7", v)
		}
	}
	if v, _ := c.Get(context.Background(), fetch); v != 7 || loads.Load() != 1 {
		t.Errorf("loads %d, want 1 for all callers and the fresh copy after", loads.Load())
	}
}

// TestInvalidate: after Invalidate the next Get loads again; with keep,
// Latest answers the old copy meanwhile, without it none. A failed load
// keeps nothing and reports its error.
func TestInvalidate(t *testing.T) {
	t.Parallel()
	c := &Cache[string]{MaxAge: time.Hour}
	next := "a"
	fetch := func(context.Context) (string, error) { return next, nil }
	if v, _ := c.Get(context.Background(), fetch); v != "a" {
		t.Fatalf("Get = %q", v)
	}
	next = "b"
	c.Invalidate(true)
	if v, ok := c.Latest(); !ok || v != "a" {
		t.Errorf("Latest after Invalidate(true) = %q, %v; want the old copy", v, ok)
	}
	if v, _ := c.Get(context.Background(), fetch); v != "b" {
		t.Errorf("Get after Invalidate = %q, want a fresh load", v)
	}
	c.Invalidate(false)
	if _, ok := c.Latest(); ok {
		t.Error("Latest after Invalidate(false) still has a copy")
	}
	boom := errors.New("boom")
	if _, err := c.Get(context.Background(), func(context.Context) (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Errorf("Get of a failing load: %v, want its error", err)
	}
	if _, ok := c.Latest(); ok {
		t.Error("a failed load left a copy")
	}
}
