package backoff

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		min, max time.Duration
		want     []time.Duration
	}{
		{ms, 100 * ms, []time.Duration{ms, 2 * ms, 4 * ms, 8 * ms, 16 * ms, 32 * ms, 64 * ms, 100 * ms, 100 * ms}},
		{250 * ms, 10 * time.Second, []time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}},
		{50 * ms, 50 * ms, []time.Duration{50 * ms, 50 * ms, 50 * ms}},
		{50 * ms, 10 * ms, []time.Duration{50 * ms, 50 * ms}}, // max below min: min
	} {
		b := New(tc.min, tc.max)
		got := make([]time.Duration, len(tc.want))
		for i := range got {
			got[i] = b.Next()
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("New(%s, %s): pauses %v, want %v", tc.min, tc.max, got, tc.want)
		}
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	if err := Sleep(t.Context(), time.Millisecond); err != nil {
		t.Errorf("Sleep of 1ms: %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Sleep after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep did not end with its context")
	}
}
