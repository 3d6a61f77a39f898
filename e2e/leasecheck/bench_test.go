package leasecheck

import (
	"fmt"
	"testing"
)

// longTaskHistory is one task's valid history of n grants, as a long chaos
// run leaves it: each lease is claimed, renewed, and released or abandoned,
// and every third round has a claim whose answer was lost and a release
// whose answer was lost.
func longTaskHistory(n int) []*Op {
	var ops []Op
	t := int64(1000)
	for i := 1; i <= n; i++ {
		owner := fmt.Sprintf("c%d", i%8)
		tok := int64(i)
		ops = append(ops, grant(owner, tok, t, t+2, t+1, 500))
		ops = append(ops, renewed(owner, tok, t+100, t+102, t+1, t+101, 500))
		if i%3 == 0 {
			ops = append(ops, unknown(Claim, fmt.Sprintf("c%d", (i+1)%8), 0, t+200, t+1200))
			ops = append(ops, unknown(Release, owner, tok, t+300, t+1300))
		} else {
			ops = append(ops, release(owner, tok, t+300, t+302, true))
		}
		t += 700 // after the renewed lease's expiry at t+601
	}
	out := make([]*Op, len(ops))
	for i := range ops {
		out[i] = &ops[i]
	}
	return out
}

// A task's rules cost about the same per grant however long the history:
// a 10-minute chaos run leaves ~600 grants per task on PostgreSQL.
func BenchmarkCheckTask(b *testing.B) {
	for _, n := range []int{100, 1000, 4000} {
		ops := longTaskHistory(n)
		b.Run(fmt.Sprintf("grants=%d", n), func(b *testing.B) {
			for b.Loop() {
				if vs := checkTask("t", ops); len(vs) != 0 {
					b.Fatalf("a valid history gave %d violations: %v", len(vs), vs[0])
				}
			}
		})
	}
}
