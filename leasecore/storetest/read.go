package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// Get of a task never claimed is nil, not an error.
func (s *suite) testGetUnknown(t *testing.T) {
	mustGone(t, s.svc, uniqueTask(t))
	l, err := s.store.Get(opCtx(t), uniqueTask(t))
	if l != nil || err != nil {
		t.Errorf("raw Get of an unknown task = (%s, %v), want (nil, nil)", show(l), err)
	}
}

// Get of an expired lease is nil: the row outlives the lease, but only a
// live lease is reported.
func (s *suite) testGetExpired(t *testing.T) {
	task := uniqueTask(t)
	claim(t, s.svc, task, "a", shortTTL)
	waitExpired(t, s.svc, task)
	l, err := s.store.Get(opCtx(t), task)
	if l != nil || err != nil {
		t.Errorf("raw Get of an expired lease = (%s, %v), want (nil, nil)", show(l), err)
	}
}

// Get reports the lease as the claim recorded it, with an owner and note of
// any printable characters byte for byte.
func (s *suite) testGetMatchesClaim(t *testing.T) {
	task := uniqueTask(t)
	l := claimOK(t, s.svc, leasecore.ClaimParams{
		Task: task, Owner: "hôte-ä #7 «worker»", TTL: 42 * time.Second,
		Note: "multi-line\nnote with 'quotes', \"dq\", \\ and ✓",
	})
	checkSame(t, "get", get(t, s.svc, task), l)
}

// List reports exactly the live leases, ordered by task name byte by byte
// (the order of Go's string comparison, independent of the database's
// collation), and omits released and expired ones.
func (s *suite) testListLiveOrdered(t *testing.T) {
	prefix := uniqueTask(t) + "/"
	// Orders that differ between bytewise and linguistic collations: "B"
	// sorts before "a", and "b-2" before "b.1".
	live := map[string]*leasecore.Lease{}
	for _, name := range []string{"b.1", "a", "b-2", "B"} {
		live[prefix+name] = claim(t, s.svc, prefix+name, "owner-"+name, time.Minute)
	}
	released := claim(t, s.svc, prefix+"0-released", "r", time.Minute)
	releaseOK(t, s.svc, released.Task, "r", released.Token)
	expired := claim(t, s.svc, prefix+"1-expired", "e", shortTTL)
	waitExpired(t, s.svc, expired.Task)

	got := listed(t, s.svc, prefix)
	var gotTasks []string
	for i := range got {
		gotTasks = append(gotTasks, got[i].Task)
		if want, ok := live[got[i].Task]; ok {
			checkSame(t, "list entry", &got[i], want)
		}
	}
	wantTasks := []string{prefix + "B", prefix + "a", prefix + "b-2", prefix + "b.1"}
	if !slices.Equal(gotTasks, wantTasks) {
		t.Errorf("list of this case's tasks:\n got %q\nwant %q (live only, bytewise order)", gotTasks, wantTasks)
	}
}

// List with a Prefix holds only the live leases whose task starts with it,
// pages within it, and its next never names a task outside it: what a
// credential scoped to prefixes lists through (no page names another
// team's task). A name equal to the prefix is in it; one that only shares
// its start ("a/" against "ab") is not.
func (s *suite) testListPrefix(t *testing.T) {
	base := uniqueTask(t)
	for _, name := range []string{"a", "a/1", "a/2", "a/3", "ab", "b/1", "Z/1"} {
		claim(t, s.svc, base+"/"+name, "o", time.Minute)
	}
	tasks := func(leases []leasecore.Lease) []string {
		var out []string
		for _, l := range leases {
			out = append(out, strings.TrimPrefix(l.Task, base+"/"))
		}
		return out
	}
	list := func(p leasecore.ListParams) ([]string, string) {
		t.Helper()
		leases, next, err := s.svc.List(t.Context(), p)
		if err != nil {
			t.Fatalf("list %+v: %v", p, err)
		}
		return tasks(leases), strings.TrimPrefix(next, base+"/")
	}
	got, next := list(leasecore.ListParams{Prefix: base + "/a/", Limit: 2})
	if !slices.Equal(got, []string{"a/1", "a/2"}) || next != "a/2" {
		t.Errorf("prefix a/ limit 2: %q next %q, want [a/1 a/2] next a/2", got, next)
	}
	got, next = list(leasecore.ListParams{Prefix: base + "/a/", After: base + "/a/2", Limit: 2})
	if !slices.Equal(got, []string{"a/3"}) || next != "" {
		t.Errorf("prefix a/ after a/2: %q next %q, want [a/3] and no next (ab, b/1 are outside)", got, next)
	}
	got, _ = list(leasecore.ListParams{Prefix: base + "/a"})
	if !slices.Equal(got, []string{"a", "a/1", "a/2", "a/3", "ab"}) {
		t.Errorf("prefix a: %q, want [a a/1 a/2 a/3 ab]", got)
	}
	got, next = list(leasecore.ListParams{Prefix: base + "/b/", After: base + "/a/9", Limit: 1})
	if !slices.Equal(got, []string{"b/1"}) || next != "" {
		t.Errorf("prefix b/ after a/9: %q next %q, want [b/1]", got, next)
	}
	_, _, err := s.svc.List(t.Context(), leasecore.ListParams{Prefix: "a b"})
	mustInvalid(t, err, "Prefix")
}

// List pages by task: a page holds the first Limit live leases whose task
// sorts after After (bytewise; released and expired leases neither appear
// nor count against the limit), next names its last task when more follow,
// and paging from next continues exactly where the page ended. After need
// not name a lease. A limit out of bounds is refused, naming limit.
func (s *suite) testListPages(t *testing.T) {
	base := uniqueTask(t)
	prefix := base + "/"
	var want []string
	for i := range 7 {
		task := fmt.Sprintf("%s%d", prefix, i)
		l := claim(t, s.svc, task, "o", time.Minute)
		if i == 2 { // released: not listed, not counted
			releaseOK(t, s.svc, task, "o", l.Token)
			continue
		}
		want = append(want, task)
	}
	expired := claim(t, s.svc, prefix+"3a", "e", shortTTL) // between 3 and 4
	waitExpired(t, s.svc, expired.Task)

	page := func(after string, limit int) ([]string, string) {
		t.Helper()
		leases, next, err := s.svc.List(t.Context(), leasecore.ListParams{After: after, Limit: limit})
		if err != nil {
			t.Fatalf("list after %q limit %d: %v", after, limit, err)
		}
		if len(leases) > limit {
			t.Fatalf("list after %q limit %d: %d leases", after, limit, len(leases))
		}
		var tasks []string
		for i, l := range leases {
			if l.Task <= after || (i > 0 && l.Task <= leases[i-1].Task) {
				t.Errorf("list after %q: %q out of order or not after", after, l.Task)
			}
			tasks = append(tasks, l.Task)
		}
		return tasks, next
	}
	// Pages of 2 from base (which sorts before every task of this case,
	// and no other case's task sorts between them).
	var got []string
	after := base
	for i := range 3 {
		tasks, next := page(after, 2)
		got = append(got, tasks...)
		if len(tasks) != 2 {
			t.Fatalf("page after %q: %q, want 2 leases", after, tasks)
		}
		// The last page's next depends on other cases' leases after ours.
		if i < 2 && next != tasks[1] {
			t.Fatalf("page after %q: %q next %q, want next naming the last", after, tasks, next)
		}
		after = tasks[1]
	}
	if !slices.Equal(got, want[:6]) {
		t.Errorf("three pages of 2: %q, want %q (live only, in order)", got, want[:6])
	}
	tasks, _ := page(prefix+"1", 3) // after a released task's neighbour
	if !slices.Equal(tasks, want[2:5]) {
		t.Errorf("page after %s1 of 3: %q, want %q", prefix, tasks, want[2:5])
	}
	tasks, _ = page(prefix+"3", 1) // past the expired 3a, which does not count
	if !slices.Equal(tasks, want[3:4]) {
		t.Errorf("page after %s3 of 1: %q, want %q", prefix, tasks, want[3:4])
	}
	if tasks, _ = page(prefix+"5", 1); !slices.Equal(tasks, want[5:6]) {
		t.Errorf("page after %s5 of 1: %q, want %q", prefix, tasks, want[5:6])
	}
	// Every lease when no limit is given; the bounds of a page.
	all, next, err := s.svc.List(t.Context(), leasecore.ListParams{After: base})
	if err != nil || next != "" || len(all) < len(want) {
		t.Errorf("list without limit: %d leases, next %q, %v; want at least %d and no next", len(all), next, err, len(want))
	}
	for _, bad := range []leasecore.ListParams{{Limit: -1}, {Limit: leasecore.MaxListLimit + 1}} {
		_, _, err := s.svc.List(t.Context(), bad)
		mustInvalid(t, err, "Limit")
	}
	_, _, err = s.svc.List(t.Context(), leasecore.ListParams{After: "a b", Limit: 1})
	mustInvalid(t, err, "After")
}

// TTLRemaining is measured by the store: positive, at most the TTL, and
// shrinking between two reads while the expiry stays put.
func (s *suite) testTTLRemaining(t *testing.T) {
	task := uniqueTask(t)
	l := claim(t, s.svc, task, "a", time.Minute)
	first := get(t, s.svc, task)
	if first.TTLRemaining > l.TTLRemaining {
		t.Errorf("ttl_remaining grew from %v at the claim to %v at the next read", l.TTLRemaining, first.TTLRemaining)
	}
	var later *leasecore.Lease
	poll(t, time.Millisecond, "ttl_remaining to shrink", func() bool {
		later = get(t, s.svc, task)
		return later != nil && later.TTLRemaining < first.TTLRemaining
	})
	if later.TTLRemaining <= 0 || later.TTLRemaining > later.TTL {
		t.Errorf("ttl_remaining %v, want in (0, %v]", later.TTLRemaining, later.TTL)
	}
	checkSame(t, "lease after reads (a read must not extend it)", later, l)
}

// A read that races with renewals sees a consistent lease: the store's now
// in a read is never earlier than the renewal the read returns, so
// 0 < ttl_remaining ≤ ttl holds for every read, and a reader never sees the
// lease go backwards (renew_count, renewed_at, expires_at) from one read to
// the next. A client's deadline (its clock + ttl_remaining) must never lie
// beyond what the store granted. Several readers race one renewer, so that a
// store whose reads take "now" before their snapshot is caught in the act.
func (s *suite) testReadsDuringRenewals(t *testing.T) {
	const renewals, readers = 300, 4
	task := uniqueTask(t)
	l := claim(t, s.svc, task, "a", time.Minute)
	ctx := t.Context()

	var (
		done     atomic.Bool
		mu       sync.Mutex
		problems []string
		reads    int
		failure  error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if failure == nil {
			failure = err
		}
	}
	// Renewals start once every reader has read once, so that on a busy
	// machine the readers cannot all miss the renewals.
	var reading, started sync.WaitGroup
	started.Add(readers)
	for range readers {
		reading.Go(func() {
			first := true
			defer func() {
				if first {
					started.Done()
				}
			}()
			prev := l
			var mine []string
			check := func(how string, g *leasecore.Lease) {
				switch {
				case g == nil:
					mine = append(mine, how+": no live lease")
				case g.TTLRemaining <= 0 || g.TTLRemaining > g.TTL:
					mine = append(mine, fmt.Sprintf("%s: ttl_remaining %v, want in (0, %v]: the read's now is before renewed_at %s",
						how, g.TTLRemaining, g.TTL, g.RenewedAt.UTC().Format(time.RFC3339Nano)))
				case g.Token != l.Token || g.RenewCount < prev.RenewCount || g.RenewedAt.Before(prev.RenewedAt) || g.ExpiresAt.Before(prev.ExpiresAt):
					mine = append(mine, fmt.Sprintf("%s: %s went backwards from %s", how, show(g), show(prev)))
				default:
					prev = g
				}
			}
			n := 0
			for !done.Load() {
				g, err := s.svc.Get(ctx, task)
				if err != nil {
					fail(fmt.Errorf("get: %w", err))
					return
				}
				check("get", g)
				all, _, err := s.svc.List(ctx, leasecore.ListParams{})
				if err != nil {
					fail(fmt.Errorf("list: %w", err))
					return
				}
				for i := range all {
					if all[i].Task == task {
						check("list", &all[i])
					}
				}
				n += 2
				if first {
					first = false
					started.Done()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			problems = append(problems, mine...)
			reads += n
		})
	}
	started.Wait()
	for range renewals {
		if _, err := s.svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "a", Token: l.Token}); err != nil {
			fail(fmt.Errorf("renew: %w", err))
			break
		}
	}
	done.Store(true)
	reading.Wait()
	if failure != nil {
		t.Fatalf("during renewals and concurrent reads: %v", failure)
	}
	if len(problems) > 0 {
		total := len(problems)
		if total > 5 {
			problems = append(problems[:5], fmt.Sprintf("… and %d more", total-5))
		}
		t.Errorf("%d of %d reads during %d renewals were inconsistent:\n  %s", total, reads, renewals,
			strings.Join(problems, "\n  "))
	}
}
