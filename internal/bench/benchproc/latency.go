package benchproc

import (
	"math"
	"slices"
	"time"
)

// MergeLatencies is every client's claim latencies in one sorted list: the
// fleet's distribution, from which its percentiles are read (a percentile
// of the fleet is not any combination of the clients' percentiles).
func MergeLatencies(perClient [][]time.Duration) []time.Duration {
	n := 0
	for _, l := range perClient {
		n += len(l)
	}
	all := make([]time.Duration, 0, n)
	for _, l := range perClient {
		all = append(all, l...)
	}
	slices.Sort(all)
	return all
}

// Quantile is the nearest-rank q-quantile (0 < q ≤ 1) of sorted: the
// smallest value with at least q of the values at or below it; 0 for no
// values.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// Ceil, tolerant of q*n's rounding (0.99 * 100 is 99.00000000000001).
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}
