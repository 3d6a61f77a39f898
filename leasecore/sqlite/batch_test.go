package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// The group-commit tests put requests into one batch deterministically: a
// second store over the same file holds the file's write lock, as another
// process would, so the writer's first batch (a lone "blocker" claim) waits
// for it in BEGIN IMMEDIATE; the test queues its requests one by one behind
// it, watching the queue, and then lets the lock go. The writer takes
// everything queued into its second batch.

// reply is what one asynchronous call returned.
type reply struct {
	lease    *leasecore.Lease
	released bool
	err      error
}

// async runs call in a goroutine and delivers its reply on the channel.
func async(call func() reply) <-chan reply {
	ch := make(chan reply, 1)
	go func() { ch <- call() }()
	return ch
}

func asyncClaim(ctx context.Context, s *Store, task, owner string, ttl time.Duration) <-chan reply {
	return async(func() reply {
		l, err := s.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: owner, TTL: ttl})
		return reply{lease: l, err: err}
	})
}

func asyncRenew(ctx context.Context, s *Store, task, owner string, token int64) <-chan reply {
	return async(func() reply {
		l, err := s.Renew(ctx, leasecore.RenewParams{Task: task, Owner: owner, TTL: time.Minute, Token: token})
		return reply{lease: l, err: err}
	})
}

func asyncRelease(ctx context.Context, s *Store, task, owner string, token int64) <-chan reply {
	return async(func() reply {
		ok, err := s.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: owner, Token: token})
		return reply{released: ok, err: err}
	})
}

// await waits for a reply, failing t after a generous deadline.
func await(t *testing.T, what string, ch <-chan reply) reply {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	select {
	case r := <-ch:
		return r
	case <-deadline.C:
		t.Fatalf("no reply to %s", what)
	}
	return reply{}
}

// waitUntil polls cond until it holds, failing t after a generous deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		<-tick.C
	}
}

// queued reports how many requests wait for the writer.
func (s *Store) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// lockHolder holds the write lock of a file from another store's
// connection, as another process would.
type lockHolder struct {
	tx *sql.Tx
}

// holdWriteLock takes the write lock of the file at path until letGo is
// called or t ends.
func holdWriteLock(t *testing.T, path string) *lockHolder {
	t.Helper()
	other := openStore(t, path)
	tx, err := other.writer.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatalf("take the write lock: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return &lockHolder{tx: tx}
}

// letGo commits what the holder did and releases the lock.
func (h *lockHolder) letGo(t *testing.T) {
	t.Helper()
	if err := h.tx.Commit(); err != nil {
		t.Fatalf("release the write lock: %v", err)
	}
}

// blockWriter makes s's writer wait for the lock held by holder in a batch
// of its own (a claim on a task named "blocker"), and returns that claim's
// reply. When it returns, requests queue up behind that batch.
func blockWriter(t *testing.T, s *Store) <-chan reply {
	t.Helper()
	ch := asyncClaim(context.Background(), s, "blocker", "blocker", time.Minute)
	waitUntil(t, "the writer took the blocker", func() bool { return s.taken.Load() == 1 })
	return ch
}

// enqueue starts call and waits until it is queued as request number n.
func enqueue(t *testing.T, s *Store, n int, call func() <-chan reply) <-chan reply {
	t.Helper()
	ch := call()
	waitUntil(t, fmt.Sprintf("request %d is queued", n), func() bool { return s.queued() == n })
	return ch
}

func TestBatchGrantsManyConcurrentClaims(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := openMigrated(t, path)
	holder := holdWriteLock(t, path)
	blocker := blockWriter(t, s)

	// More than one batch can carry, all queued while the first commits.
	const n = maxBatch + 44
	replies := make([]<-chan reply, n)
	for i := range replies {
		task := fmt.Sprintf("task-%d", i)
		replies[i] = asyncClaim(context.Background(), s, task, "owner-"+task, time.Minute)
	}
	waitUntil(t, "every claim is queued", func() bool { return s.queued() == n })
	holder.letGo(t)

	if r := await(t, "blocker", blocker); r.err != nil {
		t.Fatalf("blocker: %v", r.err)
	}
	for i, ch := range replies {
		task := fmt.Sprintf("task-%d", i)
		r := await(t, task, ch)
		if r.err != nil || r.lease == nil || r.lease.Token != 1 || r.lease.Owner != "owner-"+task {
			t.Errorf("claim %s = (%+v, %v), want acquired with token 1", task, r.lease, r.err)
		}
	}
	leases, err := s.List(context.Background(), leasecore.ListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != n+1 {
		t.Errorf("List has %d leases, want %d", len(leases), n+1)
	}
	// The blocker's batch, then two batches of at most maxBatch.
	if b, r := s.batches.Load(), s.taken.Load(); b != 3 || r != n+1 {
		t.Errorf("the writer ran %d batches of %d requests in all, want 3 of %d", b, r, n+1)
	}
}

func TestBatchRunsOperationsInArrivalOrder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := openMigrated(t, path)
	ctx := context.Background()
	holder := holdWriteLock(t, path)
	blocker := blockWriter(t, s)

	// One batch, in this order, all on task t.
	claimA := enqueue(t, s, 1, func() <-chan reply { return asyncClaim(ctx, s, "t", "a", time.Minute) })
	releaseA := enqueue(t, s, 2, func() <-chan reply { return asyncRelease(ctx, s, "t", "a", 0) })
	claimB := enqueue(t, s, 3, func() <-chan reply { return asyncClaim(ctx, s, "t", "b", time.Minute) })
	renewA := enqueue(t, s, 4, func() <-chan reply { return asyncRenew(ctx, s, "t", "a", 0) })
	claimA2 := enqueue(t, s, 5, func() <-chan reply { return asyncClaim(ctx, s, "t", "a", time.Minute) })
	releaseStale := enqueue(t, s, 6, func() <-chan reply { return asyncRelease(ctx, s, "t", "b", 1) })
	renewB := enqueue(t, s, 7, func() <-chan reply { return asyncRenew(ctx, s, "t", "b", 2) })
	holder.letGo(t)

	if r := await(t, "blocker", blocker); r.err != nil {
		t.Fatalf("blocker: %v", r.err)
	}
	if r := await(t, "claim by a", claimA); r.err != nil || r.lease.Token != 1 {
		t.Errorf("claim by a = (%+v, %v), want token 1", r.lease, r.err)
	}
	if r := await(t, "release by a", releaseA); r.err != nil || !r.released {
		t.Errorf("release by a = (%v, %v), want true", r.released, r.err)
	}
	if r := await(t, "claim by b", claimB); r.err != nil || r.lease.Token != 2 || r.lease.Owner != "b" {
		t.Errorf("claim by b after a released = (%+v, %v), want b with token 2", r.lease, r.err)
	}
	var lost *leasecore.LostError
	if r := await(t, "renew by a", renewA); !errors.As(r.err, &lost) || lost.Reason != leasecore.LostHeldByOther {
		t.Errorf("renew by a after b claimed = %v, want lost (held_by_other)", r.err)
	}
	var held *leasecore.HeldError
	if r := await(t, "claim by a again", claimA2); !errors.As(r.err, &held) || held.Holder.Owner != "b" {
		t.Errorf("claim by a while b holds = %v, want held by b", r.err)
	}
	if r := await(t, "release with a stale token", releaseStale); r.err != nil || r.released {
		t.Errorf("release by b with token 1 = (%v, %v), want false", r.released, r.err)
	}
	if r := await(t, "renew by b", renewB); r.err != nil || r.lease.Token != 2 || r.lease.RenewCount != 1 {
		t.Errorf("renew by b = (%+v, %v), want token 2, renew count 1", r.lease, r.err)
	}
	if b, r := s.batches.Load(), s.taken.Load(); b != 2 || r != 8 {
		t.Errorf("the writer ran %d batches of %d requests in all, want the blocker's and one of 7", b, r)
	}
}

func TestBatchDropsCallersWhoLeft(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := openMigrated(t, path)

	// A context that has ended before the call queues nothing.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Claim(done, leasecore.ClaimParams{Task: "gone", Owner: "a", TTL: time.Minute})
	assertUnavailable(t, "claim", err, "cancelled")
	if q, r := s.queued(), s.taken.Load(); q != 0 || r != 0 {
		t.Errorf("after a cancelled claim: %d queued, %d taken; want none", q, r)
	}

	holder := holdWriteLock(t, path)
	blocker := blockWriter(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	left := enqueue(t, s, 1, func() <-chan reply { return asyncClaim(ctx, s, "left", "a", time.Minute) })
	stays := enqueue(t, s, 2, func() <-chan reply { return asyncClaim(context.Background(), s, "stays", "a", time.Minute) })
	// Its caller is answered at once, while the writer is still blocked.
	cancel()
	assertUnavailable(t, "claim", await(t, "claim whose caller left", left).err, "cancelled")
	holder.letGo(t)

	if r := await(t, "blocker", blocker); r.err != nil {
		t.Fatalf("blocker: %v", r.err)
	}
	if r := await(t, "claim of stays", stays); r.err != nil {
		t.Fatalf("claim of stays: %v", r.err)
	}
	if l, err := s.Get(context.Background(), "left"); l != nil || err != nil {
		t.Errorf("get of the dropped claim's task = (%+v, %v), want nothing written", l, err)
	}
	if r := s.taken.Load(); r != 2 {
		t.Errorf("the writer took %d requests, want 2 (the dropped one left out)", r)
	}
}

// TestBatchOfCallersWhoAllLeft: when every caller of a full batch has left,
// the writer still goes on to the requests queued after them. (Two full
// batches, because one wake-up is still waiting for the writer after the
// first.)
func TestBatchOfCallersWhoAllLeft(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := openMigrated(t, path)
	holder := holdWriteLock(t, path)
	blocker := blockWriter(t, s)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var left []<-chan reply
	for i := range 2 * maxBatch {
		left = append(left, asyncClaim(ctx, s, fmt.Sprintf("left-%d", i), "a", time.Minute))
	}
	waitUntil(t, "two full batches are queued", func() bool { return s.queued() == 2*maxBatch })
	stays := enqueue(t, s, 2*maxBatch+1, func() <-chan reply {
		return asyncClaim(context.Background(), s, "stays", "a", time.Minute)
	})
	cancel()
	for i, ch := range left {
		assertUnavailable(t, "claim", await(t, fmt.Sprintf("claim %d", i), ch).err, "cancelled")
	}
	holder.letGo(t)

	if r := await(t, "blocker", blocker); r.err != nil {
		t.Fatalf("blocker: %v", r.err)
	}
	if r := await(t, "claim queued after a full batch of leavers", stays); r.err != nil || r.lease.Token != 1 {
		t.Fatalf("claim of stays = (%+v, %v), want acquired", r.lease, r.err)
	}
	if b, r := s.batches.Load(), s.taken.Load(); b != 4 || r != 2 {
		t.Errorf("the writer took %d batches of %d requests in all, want 4 of 2 (two of them emptied)", b, r)
	}
}

func TestCloseAnswersQueuedCallers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := openMigrated(t, path)
	holdWriteLock(t, path)
	blocker := blockWriter(t, s)

	const n = 10
	var replies []<-chan reply
	for i := range n {
		task := fmt.Sprintf("task-%d", i)
		replies = append(replies, asyncClaim(context.Background(), s, task, "a", time.Minute))
	}
	waitUntil(t, "every claim is queued", func() bool { return s.queued() == n })

	// Close interrupts the batch waiting for the lock, which another
	// process might hold for a long time.
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	assertUnavailable(t, "claim", await(t, "blocker", blocker).err, "store is closed")
	for i, ch := range replies {
		r := await(t, fmt.Sprintf("claim %d", i), ch)
		if r.lease != nil {
			t.Errorf("claim %d after Close returned a lease", i)
		}
		assertUnavailable(t, "claim", r.err, "store is closed")
	}
	_, err := s.Renew(context.Background(), leasecore.RenewParams{Task: "task-0", Owner: "a"})
	assertUnavailable(t, "renew", err, "store is closed")
}

// TestFailedBatchAnswersEveryoneUnavailable: when a batch cannot commit,
// every caller in it is told unavailable, never an outcome, and nothing it
// did is left behind.
func TestFailedBatchAnswersEveryoneUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("LockedPastTheBound", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "leasehold.db")
		s := openMigrated(t, path)
		owner := openMigrated(t, path)
		if _, err := owner.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "other", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		s.batchTimeout = 50 * time.Millisecond // before any request reaches the writer
		holdWriteLock(t, path)

		// These callers wait with no deadline of their own: the batch's
		// bound is what ends the wait.
		var replies []<-chan reply
		for i := range 8 {
			replies = append(replies, asyncClaim(ctx, s, "t", fmt.Sprintf("claimant-%d", i), time.Minute))
		}
		for i, ch := range replies {
			r := await(t, fmt.Sprintf("claim %d", i), ch)
			if errors.Is(r.err, leasecore.ErrHeld) {
				t.Errorf("claim %d on a locked file = %v, want unavailable, not held", i, r.err)
				continue
			}
			assertUnavailable(t, "claim", r.err, "")
		}
	})

	t.Run("SchemaDroppedUnderTheBatch", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "leasehold.db")
		s := openMigrated(t, path)
		holder := holdWriteLock(t, path)
		blocker := blockWriter(t, s)
		queued := []<-chan reply{
			enqueue(t, s, 1, func() <-chan reply { return asyncClaim(ctx, s, "t", "a", time.Minute) }),
			enqueue(t, s, 2, func() <-chan reply { return asyncClaim(ctx, s, "t", "b", time.Minute) }),
			enqueue(t, s, 3, func() <-chan reply { return asyncRenew(ctx, s, "t", "c", 0) }),
			enqueue(t, s, 4, func() <-chan reply { return asyncRelease(ctx, s, "t", "a", 0) }),
		}
		if _, err := holder.tx.Exec(`DROP TABLE leasehold_leases`); err != nil {
			t.Fatal(err)
		}
		holder.letGo(t)

		assertUnavailable(t, "claim", await(t, "blocker", blocker).err, "no such table")
		for i, op := range []string{"claim", "claim", "renew", "release"} {
			r := await(t, op, queued[i])
			if r.lease != nil || r.released {
				t.Errorf("%s %d answered (%+v, %v) along with its error", op, i, r.lease, r.released)
			}
			assertUnavailable(t, op, r.err, "no such table")
		}
		if b := s.batches.Load(); b != 2 {
			t.Errorf("the writer ran %d batches, want 2", b)
		}
	})

	// One operation that fails in SQL (here a zero TTL, which only a caller
	// bypassing leasecore.Service could send) rolls back the whole batch:
	// the claims before and after it are not reported, and not kept.
	t.Run("OneOperationFails", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "leasehold.db")
		s := openMigrated(t, path)
		holder := holdWriteLock(t, path)
		blocker := blockWriter(t, s)
		before := enqueue(t, s, 1, func() <-chan reply { return asyncClaim(ctx, s, "before", "a", time.Minute) })
		bad := enqueue(t, s, 2, func() <-chan reply { return asyncClaim(ctx, s, "bad", "a", 0) })
		after := enqueue(t, s, 3, func() <-chan reply { return asyncClaim(ctx, s, "after", "a", time.Minute) })
		holder.letGo(t)

		if r := await(t, "blocker", blocker); r.err != nil {
			t.Fatalf("blocker: %v", r.err)
		}
		for task, ch := range map[string]<-chan reply{"before": before, "bad": bad, "after": after} {
			r := await(t, task, ch)
			if r.lease != nil {
				t.Errorf("claim of %s returned a lease from a failed batch", task)
			}
			assertUnavailable(t, "claim", r.err, "CHECK constraint failed")
			if l, err := s.Get(ctx, task); l != nil || err != nil {
				t.Errorf("get %s after the failed batch = (%+v, %v), want nothing", task, l, err)
			}
		}
		// The counter did not move either.
		l, err := s.Claim(ctx, leasecore.ClaimParams{Task: "before", Owner: "a", TTL: time.Minute})
		if err != nil || l.Token != 1 {
			t.Errorf("claim after the failed batch = (%+v, %v), want token 1", l, err)
		}
	})
}

// RenewBatch puts up to maxRenewBatch renewals in one transaction, and
// WriteCounts says so: 2,100 renewals alone take two transactions.
func TestRenewBatchTransactions(t *testing.T) {
	t.Parallel()
	s := openMigrated(t, filepath.Join(t.TempDir(), "leasehold.db"))
	// The case counts transactions; a 2,048-renewal transaction under the
	// race detector on a busy machine may outlast the default op timeout.
	svc := leasecore.New(s, leasecore.WithOpTimeout(time.Minute))
	const n = maxRenewBatch + 52
	ps := make([]leasecore.RenewParams, n)
	for i := range ps {
		l, err := svc.Claim(t.Context(), leasecore.ClaimParams{Task: fmt.Sprintf("t%04d", i), Owner: "a", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = leasecore.RenewParams{Task: l.Task, Owner: "a", Token: l.Token}
	}
	count := func() leasecore.WriteCount { return s.WriteCounts()[1] }
	if count().Op != "renew" {
		t.Fatalf("WriteCounts()[1] is %q, want renew", count().Op)
	}
	before := count()
	for i, r := range svc.RenewBatch(t.Context(), ps) {
		if r.Err != nil || r.Lease.RenewCount != 1 {
			t.Fatalf("renewal %d: %v %+v", i, r.Err, r.Lease)
		}
	}
	after := count()
	if got := after.Statements - before.Statements; got != 2 {
		t.Errorf("%d renewals took %d transactions, want 2", n, got)
	}
	if got := after.Operations - before.Operations; got != n {
		t.Errorf("the transactions carried %d renewals, want %d", got, n)
	}
}

// One batch of operations of several credentials records each event under
// its own operation's: a claim's acquired, a release's released, a refused
// renewal's lost; and the expired events a claim and a late renewal record
// under none.
func TestBatchRecordsEachOperationsCredential(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := openMigrated(t, path)
	ctx := context.Background()
	for _, task := range []string{"taken", "lost"} {
		if _, err := s.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "old", TTL: leasecore.MinTTL, Credential: "old-cred"}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the leases expired", func() bool {
		leases, err := s.List(ctx, leasecore.ListParams{})
		return err == nil && len(leases) == 0
	})
	holder := holdWriteLock(t, path)
	batches, taken := s.batches.Load(), s.taken.Load()
	blocker := asyncClaim(ctx, s, "blocker", "blocker", time.Minute)
	waitUntil(t, "the writer took the blocker", func() bool { return s.taken.Load() == taken+1 })

	call := func(f func() (*leasecore.Lease, bool, error)) func() <-chan reply {
		return func() <-chan reply {
			return async(func() reply { l, ok, err := f(); return reply{lease: l, released: ok, err: err} })
		}
	}
	claimAs := func(task, owner, credential string) func() <-chan reply {
		return call(func() (*leasecore.Lease, bool, error) {
			l, err := s.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: owner, TTL: time.Minute, Credential: credential})
			return l, false, err
		})
	}
	replies := []<-chan reply{
		enqueue(t, s, 1, claimAs("fresh", "a", "claimer-a")),
		enqueue(t, s, 2, call(func() (*leasecore.Lease, bool, error) {
			ok, err := s.Release(ctx, leasecore.ReleaseParams{Task: "fresh", Owner: "a", Credential: "releaser"})
			if err == nil && !ok {
				err = errors.New("not released")
			}
			return nil, ok, err
		})),
		enqueue(t, s, 3, claimAs("taken", "b", "claimer-b")),
		enqueue(t, s, 4, call(func() (*leasecore.Lease, bool, error) {
			_, err := s.Renew(ctx, leasecore.RenewParams{Task: "lost", Owner: "old", Credential: "late-renewer"})
			if errors.Is(err, leasecore.ErrLost) {
				err = nil
			}
			return nil, false, err
		})),
	}
	holder.letGo(t)
	if r := await(t, "blocker", blocker); r.err != nil {
		t.Fatalf("blocker: %v", r.err)
	}
	for i, ch := range replies {
		if r := await(t, fmt.Sprintf("operation %d", i), ch); r.err != nil {
			t.Fatalf("operation %d: %v", i, r.err)
		}
	}
	if b := s.batches.Load() - batches; b != 2 {
		t.Errorf("the writer ran %d batches, want the blocker's and one of the 4 operations", b)
	}
	for task, want := range map[string][]string{
		"fresh": {"released releaser", "acquired claimer-a"},
		"taken": {"acquired claimer-b", "expired ", "acquired old-cred"},
		"lost":  {"lost late-renewer", "expired ", "acquired old-cred"},
	} {
		evs, err := s.History(ctx, task, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			got = append(got, string(e.Kind)+" "+e.Credential)
		}
		if !slices.Equal(got, want) {
			t.Errorf("history of %s (newest first): %q, want %q", task, got, want)
		}
	}
}
