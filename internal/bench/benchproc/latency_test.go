package benchproc

import (
	"testing"
	"time"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

// The fleet's p99 comes from every claim's latency, not from the clients'
// percentiles: here neither the largest nor the median of the clients' p99s
// is the fleet's.
func TestMergeLatenciesQuantile(t *testing.T) {
	t.Parallel()
	// Client a: 98 claims at 1 ms, 2 at 50 ms (its p99: 50 ms). Clients b
	// and c: 100 claims at 2 ms each (p99: 2 ms). Of the 300 claims, the
	// 297th smallest (the p99) is 2 ms.
	a := append(ms(make([]int, 98)...), ms(50, 50)...)
	for i := range 98 {
		a[i] = time.Millisecond
	}
	b := ms(make([]int, 100)...)
	for i := range b {
		b[i] = 2 * time.Millisecond
	}
	c := append([]time.Duration(nil), b...)
	all := MergeLatencies([][]time.Duration{a, b, c})
	if len(all) != 300 {
		t.Fatalf("merged %d latencies, want 300", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i] < all[i-1] {
			t.Fatalf("merged latencies not sorted at %d: %v", i, all[i-1:i+1])
		}
	}
	if got := Quantile(all, 0.99); got != 2*time.Millisecond {
		t.Errorf("fleet p99 = %v, want 2ms", got)
	}
	if got := Quantile(all, 0.50); got != 2*time.Millisecond {
		t.Errorf("fleet p50 = %v, want 2ms", got)
	}
	if got := Quantile(all, 1); got != 50*time.Millisecond {
		t.Errorf("fleet max = %v, want 50ms", got)
	}
	if got := Quantile(a, 0.99); got != 50*time.Millisecond {
		t.Errorf("client a's p99 = %v, want 50ms", got)
	}

	// Nearest rank: the p99 of 1..100 ms is 99 ms, the p50 50 ms.
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, time.Duration(i)*time.Millisecond)
	}
	if got := Quantile(hundred, 0.99); got != 99*time.Millisecond {
		t.Errorf("p99 of 1..100 ms = %v, want 99ms", got)
	}
	if got := Quantile(hundred, 0.50); got != 50*time.Millisecond {
		t.Errorf("p50 of 1..100 ms = %v, want 50ms", got)
	}
	if got := Quantile(nil, 0.99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
	if got := Quantile(ms(7), 0.01); got != 7*time.Millisecond {
		t.Errorf("p1 of one value = %v, want it", got)
	}
}
