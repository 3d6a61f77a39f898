package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// TestMigrateFromTheFirstSchema upgrades a file that has only the first
// migration and a lease that ran out unreleased: the lease row is kept, the
// default policy appears, and the next grant records the old lease's end
// (its row starts with end_recorded 0), at its expiry, and the new grant.
func TestMigrateFromTheFirstSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	ctx := context.Background()
	old := openStore(t, path)
	old.migrations = old.migrations[:1]
	if err := old.Migrate(ctx); err != nil {
		t.Fatalf("migrate to version 1: %v", err)
	}
	_, err := old.writer.ExecContext(ctx, `
INSERT INTO leasehold_leases (task, owner, token, acquired_at, renewed_at, expires_at, ttl_ms, renew_count, note)
VALUES ('nightly', 'old-holder', 7, 1000, 1000, 2000, 1000, 0, '')`)
	if err != nil {
		t.Fatalf("insert a version-1 lease: %v", err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s := openMigrated(t, path)
	svc := leasecore.New(s)
	def, err := svc.GetPolicy(ctx, leasecore.DefaultPolicy)
	if err != nil || def == nil || def.KeepFor != leasecore.DefaultKeepFor || def.KeepLast != leasecore.DefaultKeepLast {
		t.Fatalf("default policy after the upgrade: %+v, %v", def, err)
	}
	l, err := svc.Claim(ctx, leasecore.ClaimParams{Task: "nightly", Owner: "new-holder", TTL: time.Minute})
	if err != nil {
		t.Fatalf("claim after the upgrade: %v", err)
	}
	if l.Token != 8 {
		t.Errorf("token after the upgrade %d, want 8: the counter survives migrations", l.Token)
	}
	events, err := svc.History(ctx, "nightly", 10)
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	if len(events) != 2 || events[0].Kind != leasecore.EventAcquired || events[0].Token != 8 ||
		events[1].Kind != leasecore.EventExpired || events[1].Owner != "old-holder" || events[1].Token != 7 || !events[1].At.Equal(fromMS(2000)) {
		t.Errorf("history after the upgrade: %+v, want acquired 8, expired 7 of old-holder at its expiry %s", events, fromMS(2000))
	}
}

// TestPruneVisitsTasksInRounds prunes more tasks than one round visits:
// every task is pruned, and the count is the sum of the rounds.
func TestPruneVisitsTasksInRounds(t *testing.T) {
	t.Parallel()
	const round = 4
	const tasks = 2*round + 3
	s := openMigrated(t, filepath.Join(t.TempDir(), "leasehold.db"))
	s.pruneRound = round
	svc := leasecore.New(s)
	ctx := context.Background()
	if _, err := svc.UpdatePolicy(ctx, leasecore.RetentionPolicy{Name: leasecore.DefaultPolicy, KeepLast: 1}, leasecore.Writer{}); err != nil {
		t.Fatalf("update the default policy: %v", err)
	}
	errs := make(chan error, tasks)
	var wg sync.WaitGroup
	for i := range tasks {
		wg.Go(func() {
			task := fmt.Sprintf("task-%03d", i)
			l, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute})
			if err == nil {
				_, err = svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "a", Token: l.Token})
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("claim and release: %v", err)
	}
	before := s.batches.Load()
	n, err := svc.PruneHistory(ctx)
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if n != tasks {
		t.Errorf("prune deleted %d events, want %d (one per task)", n, tasks)
	}
	if rounds := s.batches.Load() - before; rounds < 3 {
		t.Errorf("prune of %d tasks ran in %d transactions, want at least 3 rounds of %d", tasks, rounds, round)
	}
	for i := range tasks {
		task := fmt.Sprintf("task-%03d", i)
		events, err := svc.History(ctx, task, 10)
		if err != nil || len(events) != 1 || events[0].Kind != leasecore.EventReleased {
			t.Errorf("history of %s after pruning: %+v, %v; want only its release", task, events, err)
		}
	}
}

// TestPruneDeletesABacklogInRounds prunes a task whose doomed events do not
// fit in one round: each round deletes at most its budget and links what is
// left to what is kept, so the next round goes on where it stopped; the
// kept events and their chain are intact, and so is the chain a task that
// lost all its events grows afterwards.
func TestPruneDeletesABacklogInRounds(t *testing.T) {
	t.Parallel()
	s := openMigrated(t, filepath.Join(t.TempDir(), "leasehold.db"))
	s.pruneEvents = 3
	svc := leasecore.New(s)
	ctx := context.Background()
	cycle := func(task string, times int) (last int64) {
		t.Helper()
		for range times {
			l, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "a", Token: l.Token}); err != nil {
				t.Fatal(err)
			}
			last = l.Token
		}
		return last
	}
	prune := func(want int64) {
		t.Helper()
		before := s.batches.Load()
		n, err := svc.PruneHistory(ctx)
		if err != nil || n != want {
			t.Fatalf("prune: %d, %v; want %d deleted", n, err, want)
		}
		if rounds, least := s.batches.Load()-before, (want+2)/3; rounds < least {
			t.Errorf("%d events deleted in %d transactions, want at least %d of at most 3", want, rounds, least)
		}
	}
	history := func(task string) []leasecore.Event {
		t.Helper()
		evs, err := svc.History(ctx, task, leasecore.MaxHistoryLimit)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}

	// keep_last: the newest two of ten events stay.
	if _, err := svc.CreatePolicy(ctx, leasecore.RetentionPolicy{Name: "two", KeepLast: 2}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateTask(ctx, leasecore.TaskDecl{Name: "kept", TTL: time.Minute, RetentionPolicy: "two"}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	token := cycle("kept", 5)
	prune(8)
	if evs := history("kept"); len(evs) != 2 || evs[0].Kind != leasecore.EventReleased || evs[1].Kind != leasecore.EventAcquired || evs[1].Token != token {
		t.Fatalf("history after pruning: %+v, want the last lease's acquired and released (token %d)", evs, token)
	}
	cycle("kept", 1)
	prune(2)
	if evs := history("kept"); len(evs) != 2 || evs[1].Token != token+1 {
		t.Fatalf("history after one more lease and pruning: %+v, want that lease's two events", evs)
	}

	// keep_for: every one of ten events is too old; the rounds take them
	// all, and new events start a whole chain again.
	if _, err := svc.CreatePolicy(ctx, leasecore.RetentionPolicy{Name: "second", KeepFor: time.Second}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateTask(ctx, leasecore.TaskDecl{Name: "gone", TTL: time.Minute, RetentionPolicy: "second"}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	token = cycle("gone", 5)
	time.Sleep(1100 * time.Millisecond) // the events are older than keep_for now
	prune(10)
	if evs := history("gone"); len(evs) != 0 {
		t.Fatalf("history after pruning everything: %+v, want none", evs)
	}
	cycle("gone", 2)
	if evs := history("gone"); len(evs) != 4 || evs[3].Token != token+1 || evs[0].Token != token+2 {
		t.Fatalf("history of two new leases: %+v, want their four events", evs)
	}
}
