package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

// The history the lease statements write, on the paths the conformance
// suite cannot force: batches of claims, releases and renewals, races
// across pools, and the upgrade of a database that has leases but no
// history yet.

// event is an Event without the fields the store picks (id, time), for
// comparing histories.
type event struct {
	kind         leasecore.EventKind
	owner        string
	token        int64
	detailsOwner string // a name the detail must contain, or ""
}

func (e event) String() string { return fmt.Sprintf("%s(%s,%d)", e.kind, e.owner, e.token) }

// historyOf returns task's events, oldest first, checking that their ids
// rise and their times never go back.
func historyOf(t *testing.T, st *Store, task string) []leasecore.Event {
	t.Helper()
	evs, err := st.History(t.Context(), task, leasecore.MaxHistoryLimit)
	if err != nil {
		t.Fatalf("history of %s: %v", task, err)
	}
	slices.Reverse(evs)
	for i, e := range evs {
		if e.Task != task {
			t.Errorf("history of %s has an event of %s: %+v", task, e.Task, e)
		}
		if i > 0 && (e.ID <= evs[i-1].ID || e.At.Before(evs[i-1].At)) {
			t.Errorf("history of %s: event %+v after %+v, want a higher id and no earlier time", task, e, evs[i-1])
		}
	}
	return evs
}

// checkHistory fails t unless task's history is want, oldest first.
func checkHistory(t *testing.T, st *Store, task string, want ...event) []leasecore.Event {
	t.Helper()
	evs := historyOf(t, st, task)
	ok := len(evs) == len(want)
	for i := 0; ok && i < len(evs); i++ {
		e, w := evs[i], want[i]
		ok = e.Kind == w.kind && e.Owner == w.owner && e.Token == w.token &&
			(w.detailsOwner == "" || strings.Contains(e.Detail, w.detailsOwner))
	}
	if !ok {
		t.Errorf("history of %s:\n got  %s\n want %v", task, formatEvents(evs), want)
	}
	return evs
}

func formatEvents(evs []leasecore.Event) string {
	parts := make([]string, len(evs))
	for i, e := range evs {
		parts[i] = fmt.Sprintf("%s(%s,%d,%q)", e.Kind, e.Owner, e.Token, e.Detail)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// waitExpired waits until none of tasks has a live lease.
func waitExpired(t *testing.T, st *Store, tasks ...string) {
	t.Helper()
	poll(t, fmt.Sprintf("%d leases to expire", len(tasks)), func() bool {
		leases, err := st.List(t.Context(), leasecore.ListParams{})
		if err != nil {
			return false
		}
		for _, l := range leases {
			if slices.Contains(tasks, l.Task) {
				return false
			}
		}
		return true
	})
}

func mustClaim(t *testing.T, st *Store, task, owner string, ttl time.Duration) *leasecore.Lease {
	t.Helper()
	l, err := st.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatalf("claim %s by %s: %v", task, owner, err)
	}
	return l
}

// One task's life, one statement at a time (the single-row statements):
// every event once, at the instant of the change it records (an "expired"
// at the lease's expiry, whoever noticed it), nothing for a refresh or a
// renewal, one "lost" however often the lost lease is renewed.
func TestHistoryOfOneTask(t *testing.T) {
	t.Parallel()
	st := mustMigrated(t, pgtest.NewDatabase(t))
	ctx := t.Context()
	const task = "life"

	a := mustClaim(t, st, task, "a", time.Minute)
	mustClaim(t, st, task, "a", time.Minute) // refresh
	if _, err := st.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "a", Token: a.Token}); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "a"}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	if ok, err := st.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "a"}); ok || err != nil {
		t.Fatalf("second release: %v %v, want false", ok, err)
	}
	b := mustClaim(t, st, task, "b", leasecore.MinTTL)
	waitExpired(t, st, task)
	c := mustClaim(t, st, task, "c", leasecore.MinTTL)
	waitExpired(t, st, task)
	for range 3 {
		_, err := st.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "c"})
		if lost := (*leasecore.LostError)(nil); !errors.As(err, &lost) || lost.Reason != leasecore.LostExpired {
			t.Fatalf("renew of an expired lease: %v, want lost: expired", err)
		}
	}
	// Refused renewals of other owners record nothing.
	if _, err := st.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "b"}); !errors.Is(err, leasecore.ErrLost) {
		t.Fatalf("renew by b: %v", err)
	}
	c2 := mustClaim(t, st, task, "c", time.Minute)

	evs := checkHistory(t, st, task,
		event{leasecore.EventAcquired, "a", 1, ""},
		event{leasecore.EventReleased, "a", 1, ""},
		event{leasecore.EventAcquired, "b", 2, ""},
		event{leasecore.EventExpired, "b", 2, ""}, // recorded by c's claim
		event{leasecore.EventAcquired, "c", 3, ""},
		event{leasecore.EventExpired, "c", 3, ""}, // recorded by c's first late renewal
		event{leasecore.EventLost, "c", 3, ""},
		event{leasecore.EventAcquired, "c", 4, ""}, // the end of lease 3 is recorded already
	)
	if len(evs) != 8 {
		return
	}
	for _, c := range []struct {
		i    int
		want time.Time
	}{{0, a.AcquiredAt}, {2, b.AcquiredAt}, {3, b.ExpiresAt}, {4, c.AcquiredAt}, {5, c.ExpiresAt}, {7, c2.AcquiredAt}} {
		if !evs[c.i].At.Equal(c.want) {
			t.Errorf("event %s at %v, want %v (the grant's instant, or the expiry)", formatEvents(evs[c.i:c.i+1]), evs[c.i].At, c.want)
		}
	}
	if evs[6].At.Before(c.ExpiresAt) {
		t.Errorf("lost at %v, before the lease expired at %v", evs[6].At, c.ExpiresAt)
	}
	for _, e := range evs {
		if e.Kind == leasecore.EventExpired && (e.Credential != "" || e.Detail != "") {
			t.Errorf("%s by credential %q with detail %q, want neither", formatEvents([]leasecore.Event{e}), e.Credential, e.Detail)
		}
	}

	newest, err := st.History(ctx, task, 2)
	if err != nil || len(newest) != 2 || newest[0].ID != evs[7].ID || newest[1].ID != evs[6].ID {
		t.Errorf("History(limit 2): %+v %v, want the two newest, newest first", newest, err)
	}
}

// Batched claims, grants over expired leases and releases write each task's
// history once, in the batch statements: 300 tasks claimed in batches each
// get one "acquired"; once they expire, claimed by another owner in
// batches, each gets "expired" (at its expiry, for nobody) then "acquired";
// released in batches, one "released".
func TestHistoryBatched(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	claimBatches, releaseBatches := recordBatches(st.claims), recordBatches(st.releases)
	const n = 300
	tasks := make([]string, n)
	for i := range tasks {
		tasks[i] = fmt.Sprintf("hist/%03d", i)
	}
	// Every call acts for a credential of its own: a batch statement
	// records each one's with its events.
	claimAll := func(owner func(i int) string, ttl time.Duration, credential string) []*leasecore.Lease {
		unblock := blockClaims(t, url, st)
		done := make([]chan result, n)
		for i, task := range tasks {
			done[i] = make(chan result, 1)
			go func() {
				l, err := st.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: owner(i), TTL: ttl, Credential: fmt.Sprintf("%s-%d", credential, i)})
				done[i] <- result{owner(i), l, err}
			}()
		}
		waitQueued(t, st.claims, n)
		unblock()
		leases := make([]*leasecore.Lease, n)
		for i := range done {
			r := <-done[i]
			if r.err != nil {
				t.Fatalf("claim of %s by %s: %v", tasks[i], r.owner, r.err)
			}
			leases[i] = r.lease
		}
		return leases
	}

	first := claimAll(func(i int) string { return fmt.Sprintf("owner-%d", i) }, leasecore.MinTTL, "first")
	waitExpired(t, st, tasks...)
	second := claimAll(func(int) string { return "successor" }, time.Minute, "second")

	mustClaim(t, st, "gate", "gatekeeper", time.Minute)
	unblock := blockFlushers(t, url, `SELECT FROM leasehold_leases WHERE task = 'gate' FOR UPDATE`, func(int) {
		_, _ = st.Release(context.Background(), leasecore.ReleaseParams{Task: "gate", Owner: "gatekeeper"})
	})
	released := make([]chan error, n)
	for i, task := range tasks {
		released[i] = make(chan error, 1)
		go func() {
			ok, err := st.Release(t.Context(), leasecore.ReleaseParams{Task: task, Owner: "successor", Token: second[i].Token, Credential: fmt.Sprintf("release-%d", i)})
			if err == nil && !ok {
				err = errors.New("not released")
			}
			released[i] <- err
		}()
	}
	waitQueued(t, st.releases, n)
	unblock()
	for i := range released {
		if err := <-released[i]; err != nil {
			t.Fatalf("release of %s: %v", tasks[i], err)
		}
	}

	for _, kind := range []struct {
		name    string
		batches [][]string
	}{{"claim", claimBatches()}, {"release", releaseBatches()}} {
		var largest int
		for _, b := range kind.batches {
			largest = max(largest, len(b))
		}
		if largest < 2 {
			t.Errorf("%s batches %v: the test did not batch", kind.name, kind.batches)
		}
	}
	for i, task := range tasks {
		owner := fmt.Sprintf("owner-%d", i)
		evs := checkHistory(t, st, task,
			event{leasecore.EventAcquired, owner, 1, ""},
			event{leasecore.EventExpired, owner, 1, ""},
			event{leasecore.EventAcquired, "successor", 2, ""},
			event{leasecore.EventReleased, "successor", 2, ""},
		)
		if len(evs) == 4 && (!evs[0].At.Equal(first[i].AcquiredAt) || !evs[1].At.Equal(first[i].ExpiresAt) || !evs[2].At.Equal(second[i].AcquiredAt)) {
			t.Errorf("%s: acquired at %v, expired at %v, acquired at %v; want the first grant's instant %v, its expiry %v, the second grant's instant %v",
				task, evs[0].At, evs[1].At, evs[2].At, first[i].AcquiredAt, first[i].ExpiresAt, second[i].AcquiredAt)
		}
		if len(evs) == 4 {
			want := []string{fmt.Sprintf("first-%d", i), "", fmt.Sprintf("second-%d", i), fmt.Sprintf("release-%d", i)}
			for k, e := range evs {
				if e.Credential != want[k] {
					t.Errorf("%s: %s event by credential %q, want its operation's %q", task, e.Kind, e.Credential, want[k])
				}
			}
		}
	}
}

// Contenders racing over several pools for a new task, then for an expired
// one, leave exactly the winners' events: one "acquired" per grant, and one
// "expired" for the first lease, whoever won the second race. Refused
// claims and same-owner refreshes racing a grant write nothing.
func TestHistoryUnderRace(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	pools := []*Store{mustMigrated(t, url), mustMigrated(t, url), mustMigrated(t, url), mustMigrated(t, url)}
	const task = "race/history"

	first := raceClaim(t, pools, 16, task)
	// The winner refreshes from every pool at once while others are refused.
	// Its ttl outlasts the race even on a loaded machine (with MinTTL, a
	// latecomer could find the lease already expired and win it), and is
	// short enough to wait out below.
	const refreshTTL = 2 * time.Second
	var wg sync.WaitGroup
	for i, st := range pools {
		wg.Go(func() {
			_, err := st.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: first.Owner, TTL: refreshTTL})
			if err != nil {
				t.Errorf("refresh from pool %d: %v", i, err)
			}
		})
		wg.Go(func() {
			_, err := st.Claim(t.Context(), leasecore.ClaimParams{Task: task, Owner: "latecomer", TTL: time.Minute})
			if err != nil && !errors.Is(err, leasecore.ErrHeld) {
				t.Errorf("latecomer from pool %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	waitExpired(t, pools[0], task)
	second := raceClaim(t, pools, 16, task)

	// The first winner races again (the contenders' names repeat): its
	// lease ended as expired whoever won.
	checkHistory(t, pools[0], task,
		event{leasecore.EventAcquired, first.Owner, 1, ""},
		event{leasecore.EventExpired, first.Owner, 1, ""},
		event{leasecore.EventAcquired, second.Owner, 2, ""},
	)
}

// A RenewBatch whose renewals find their own leases expired records one
// "expired" and one "lost" per lease, however often it is retried; refusals
// for any other reason record nothing.
func TestHistoryLostInRenewBatch(t *testing.T) {
	t.Parallel()
	st := mustMigrated(t, pgtest.NewDatabase(t))
	ctx := t.Context()
	expired := []string{"lost/a", "lost/b", "lost/c"}
	for _, task := range expired {
		mustClaim(t, st, task, "o", leasecore.MinTTL)
	}
	held := mustClaim(t, st, "lost/held", "o", time.Minute)
	mustClaim(t, st, "lost/released", "o", time.Minute)
	if ok, err := st.Release(ctx, leasecore.ReleaseParams{Task: "lost/released", Owner: "o"}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	waitExpired(t, st, expired...)

	// Each lease's loss names its owner's renewal's credential, not that
	// of another owner's refused renewal of the task in the same batch.
	var ps []leasecore.RenewParams
	for _, task := range expired {
		ps = append(ps, leasecore.RenewParams{Task: task, Owner: "other", Credential: "stranger"}, leasecore.RenewParams{Task: task, Owner: "o", Credential: "renewer-" + task})
	}
	ps = append(ps,
		leasecore.RenewParams{Task: "lost/held", Owner: "o", Token: held.Token + 1}, // token_mismatch
		leasecore.RenewParams{Task: "lost/released", Owner: "o"},                    // not_held
		leasecore.RenewParams{Task: "lost/never", Owner: "o"},                       // not_held
	)
	for range 2 {
		results, err := st.RenewBatch(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range results {
			if !errors.Is(r.Err, leasecore.ErrLost) {
				t.Errorf("renewal %+v: %+v, want lost", ps[i], r)
			}
		}
	}
	for _, task := range expired {
		evs := checkHistory(t, st, task,
			event{leasecore.EventAcquired, "o", 1, ""},
			event{leasecore.EventExpired, "o", 1, ""},
			event{leasecore.EventLost, "o", 1, ""},
		)
		if len(evs) == 3 && (evs[0].Credential != "" || evs[1].Credential != "" || evs[2].Credential != "renewer-"+task) {
			t.Errorf("%s: events by credentials %q, %q and %q, want none (the claim named none), none (nobody ended it) and the renewal's %q",
				task, evs[0].Credential, evs[1].Credential, evs[2].Credential, "renewer-"+task)
		}
	}
	checkHistory(t, st, "lost/held", event{leasecore.EventAcquired, "o", 1, ""})
	checkHistory(t, st, "lost/released",
		event{leasecore.EventAcquired, "o", 1, ""},
		event{leasecore.EventReleased, "o", 1, ""},
	)
	checkHistory(t, st, "lost/never")
}

// A renewal refused by its own expired lease while another owner's claim of
// the task is deciding records no loss once the claim has recorded the
// lease's end: the interleaving is forced by holding the claim's
// transaction open until the renewal's follow-up statement waits on the
// row.
func TestHistoryLostRacingTakeover(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	ctx := t.Context()
	const task = "race/lost"
	old := mustClaim(t, st, task, "a", leasecore.MinTTL)
	waitExpired(t, st, task)

	tx, err := mustConn(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, claimSQL, task, "b", int64(60000), "", "", int64(0)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "a", Token: old.Token})
		done <- err
	}()
	observer := mustConn(t, url)
	poll(t, "the renewal's read to wait on the claim", func() bool {
		var waiting int
		err := observer.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			 WHERE datname = current_database() AND wait_event_type = 'Lock'
			   AND query LIKE '%SET lost_at =%'`).Scan(&waiting)
		return err == nil && waiting == 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, leasecore.ErrLost) {
		t.Fatalf("renewal of the expired lease: %v, want lost", err)
	}
	checkHistory(t, st, task,
		event{leasecore.EventAcquired, "a", old.Token, ""},
		event{leasecore.EventExpired, "a", old.Token, ""},
		event{leasecore.EventAcquired, "b", old.Token + 1, ""},
	)
}

// A database migrated before history existed keeps its leases, and the
// first claims after the upgrade record the ends of the leases they
// replace, at their expiry.
func TestHistoryAfterUpgrade(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	conn := mustConn(t, url)
	ctx := t.Context()
	all, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{createMigrationsTableSQL, all[0].SQL,
		`INSERT INTO leasehold_schema_migrations (version, name) VALUES (1, 'leases')`,
		`INSERT INTO leasehold_leases VALUES
		   ('up/expired', 'old', 7, now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 minute', 60000, 3, '', NULL),
		   ('up/live',    'old', 4, now(), now(), now() + interval '1 hour', 3600000, 0, '', NULL)`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("schema version 1: %v", err)
		}
	}
	var expires time.Time
	if err := conn.QueryRow(ctx, `SELECT expires_at FROM leasehold_leases WHERE task = 'up/expired'`).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	st := mustMigrated(t, url)
	if l := mustClaim(t, st, "up/expired", "new", time.Minute); l.Token != 8 {
		t.Errorf("claim after upgrade: token %d, want 8", l.Token)
	}
	mustClaim(t, st, "up/live", "old", time.Minute) // a refresh: nothing to record
	evs := checkHistory(t, st, "up/expired",
		event{leasecore.EventExpired, "old", 7, ""},
		event{leasecore.EventAcquired, "new", 8, ""},
	)
	if len(evs) == 2 && !evs[0].At.Equal(expires) {
		t.Errorf("expired at %v, want the old lease's expiry %v", evs[0].At, expires)
	}
	checkHistory(t, st, "up/live")
}

// A policy deleted while a declaration naming it commits is refused, naming
// the task: the interleaving is forced by holding the declaration's
// transaction open until the delete waits on it.
func TestDeletePolicyRacingDeclaration(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	ctx := t.Context()
	if _, err := st.CreatePolicy(ctx, leasecore.RetentionPolicy{Name: "contested", KeepLast: 5}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	tx, err := mustConn(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, createTaskSQL, "racer", int64(60000), int64(0), "", "contested", "", "", "operator", int64(0), ""); err != nil {
		t.Fatal(err)
	}
	type deleted struct {
		ok  bool
		err error
	}
	done := make(chan deleted, 1)
	go func() {
		ok, err := st.DeletePolicy(ctx, "contested", leasecore.Writer{})
		done <- deleted{ok, err}
	}()
	observer := mustConn(t, url)
	poll(t, "the delete to wait on the declaration", func() bool {
		var waiting int
		err := observer.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			 WHERE datname = current_database() AND wait_event_type = 'Lock'
			   AND query LIKE '%DELETE FROM leasehold_retention_policies%'`).Scan(&waiting)
		return err == nil && waiting == 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	d := <-done
	var inUse *leasecore.InUseError
	if d.ok || !errors.As(d.err, &inUse) || !slices.Equal(inUse.Tasks, []string{"racer"}) {
		t.Fatalf("delete racing a declaration: (%v, %v), want *InUseError naming racer", d.ok, d.err)
	}
	if p, err := st.GetPolicy(ctx, "contested"); p == nil || err != nil {
		t.Errorf("the policy after the refused delete: %+v %v", p, err)
	}
}

// PruneHistory keeps, per task, what its policy says: the newest keep_last
// events, the events younger than keep_for, both, or everything; an
// undeclared task follows the default policy. Events are aged by rewriting
// their times, which only this driver's test can do.
func TestPruneHistoryByPolicy(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st := mustMigrated(t, url)
	conn := mustConn(t, url)
	ctx := t.Context()
	for _, p := range []leasecore.RetentionPolicy{
		{Name: "last-3", KeepLast: 3},
		{Name: "hour", KeepFor: time.Hour},
		{Name: "hour-or-last-2", KeepFor: time.Hour, KeepLast: 2},
		{Name: "forever"},
	} {
		if _, err := st.CreatePolicy(ctx, p, leasecore.Writer{}); err != nil {
			t.Fatal(err)
		}
	}
	for task, policy := range map[string]string{"p/last": "last-3", "p/hour": "hour", "p/both": "hour-or-last-2", "p/forever": "forever"} {
		if _, err := st.CreateTask(ctx, leasecore.TaskDecl{Name: task, TTL: time.Minute, RetentionPolicy: policy}, leasecore.Writer{}); err != nil {
			t.Fatal(err)
		}
	}
	tasks := []string{"p/last", "p/hour", "p/both", "p/forever", "p/undeclared"}
	for _, task := range tasks {
		for range 4 { // 8 events: acquired, released, …
			l := mustClaim(t, st, task, "o", time.Minute)
			if ok, err := st.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "o", Token: l.Token}); !ok || err != nil {
				t.Fatalf("release %s: %v %v", task, ok, err)
			}
		}
	}
	// Age the 5 oldest events of each task by two hours, and the oldest by
	// 31 days.
	if _, err := conn.Exec(ctx, `
		UPDATE leasehold_history AS h
		   SET at = h.at - CASE WHEN o.n = 1 THEN interval '31 days' ELSE interval '2 hours' END
		  FROM (SELECT id, row_number() OVER (PARTITION BY task ORDER BY id) AS n FROM leasehold_history) AS o
		 WHERE o.id = h.id AND o.n <= 5`); err != nil {
		t.Fatal(err)
	}
	before := map[string][]int64{}
	for _, task := range tasks {
		for _, e := range historyOf(t, st, task) {
			before[task] = append(before[task], e.ID)
		}
		if len(before[task]) != 8 {
			t.Fatalf("%s has %d events, want 8", task, len(before[task]))
		}
	}
	kept := map[string][]int64{
		"p/last":       before["p/last"][5:],
		"p/hour":       before["p/hour"][5:],
		"p/both":       before["p/both"][6:], // the newest 2 (all 3 young ones would stay by age)
		"p/forever":    before["p/forever"],
		"p/undeclared": before["p/undeclared"][1:], // the default policy: 30 days
	}
	var want int64
	for _, task := range tasks {
		want += int64(len(before[task]) - len(kept[task]))
	}

	n, err := st.PruneHistory(ctx)
	if err != nil || n != want {
		t.Fatalf("PruneHistory: %d %v, want %d deleted", n, err, want)
	}
	for _, task := range tasks {
		var ids []int64
		for _, e := range historyOf(t, st, task) {
			ids = append(ids, e.ID)
		}
		if !slices.Equal(ids, kept[task]) {
			t.Errorf("%s after pruning: ids %v, want %v", task, ids, kept[task])
		}
	}
	if n, err := st.PruneHistory(ctx); n != 0 || err != nil {
		t.Errorf("second PruneHistory: %d %v, want nothing left to delete", n, err)
	}

	// A policy change applies to the next pass.
	if _, err := st.UpdatePolicy(ctx, leasecore.RetentionPolicy{Name: "forever", KeepLast: 1}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	if n, err := st.PruneHistory(ctx); n != 7 || err != nil {
		t.Errorf("PruneHistory after keep_last 1: %d %v, want 7", n, err)
	}
}

// Two PruneHistory passes racing over the same events both succeed, and
// together delete (and count) each event once. They are made to overlap by
// holding the newest doomed event locked until both wait for it.
func TestPruneHistoryConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st1, st2 := mustMigrated(t, url), mustMigrated(t, url)
	ctx := t.Context()
	if _, err := st1.CreatePolicy(ctx, leasecore.RetentionPolicy{Name: "one", KeepLast: 1}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	const tasks = 20
	for i := range tasks {
		task := fmt.Sprintf("prune/%02d", i)
		if _, err := st1.CreateTask(ctx, leasecore.TaskDecl{Name: task, TTL: time.Minute, RetentionPolicy: "one"}, leasecore.Writer{}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			l := mustClaim(t, st1, task, "o", time.Minute)
			if ok, err := st1.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "o", Token: l.Token}); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
	}
	tx, err := mustConn(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	// The last task's second-newest event: doomed, and the last in id order.
	if _, err := tx.Exec(ctx, `
		SELECT FROM leasehold_history WHERE id = (
		  SELECT id FROM leasehold_history WHERE task = 'prune/19' ORDER BY id DESC OFFSET 1 LIMIT 1)
		FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	counts := make([]int64, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, st := range []*Store{st1, st2} {
		wg.Go(func() { counts[i], errs[i] = st.PruneHistory(ctx) })
	}
	observer := mustConn(t, url)
	poll(t, "both passes to wait on the locked event", func() bool {
		var waiting int
		err := observer.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			 WHERE datname = current_database() AND wait_event_type = 'Lock'
			   AND query LIKE '%WITH bounds AS MATERIALIZED%'`).Scan(&waiting)
		return err == nil && waiting == 2
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || counts[0]+counts[1] != tasks*5 {
		t.Errorf("racing passes: deleted %v, errors %v; want %d deleted in all, no error", counts, errs, tasks*5)
	}
	for i := range tasks {
		if n := len(historyOf(t, st1, fmt.Sprintf("prune/%02d", i))); n != 1 {
			t.Errorf("prune/%02d keeps %d events, want 1", i, n)
		}
	}
}

// A pass covers every task however many statements it takes: with more
// tasks than pruneTasksPerStatement (and a name that sorts between chunks
// by bytes, not by letters), each task is pruned once.
func TestPruneHistoryManyTasks(t *testing.T) {
	t.Parallel()
	st := mustMigrated(t, pgtest.NewDatabase(t))
	ctx := t.Context()
	if _, err := st.UpdatePolicy(ctx, leasecore.RetentionPolicy{Name: leasecore.DefaultPolicy, KeepLast: 1}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	n := 2*pruneTasksPerStatement + 3
	tasks := make([]string, n)
	for i := range tasks {
		tasks[i] = fmt.Sprintf("many/%c%04d", "Za"[i%2], i)
	}
	var wg sync.WaitGroup
	for _, task := range tasks {
		wg.Go(func() {
			l, err := st.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "o", TTL: time.Minute})
			if err != nil {
				t.Errorf("claim %s: %v", task, err)
				return
			}
			if ok, err := st.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "o", Token: l.Token}); !ok || err != nil {
				t.Errorf("release %s: %v %v", task, ok, err)
			}
		})
	}
	wg.Wait()
	if deleted, err := st.PruneHistory(ctx); deleted != int64(n) || err != nil {
		t.Fatalf("PruneHistory: %d %v, want %d (one event of each task)", deleted, err, n)
	}
	for _, task := range tasks {
		checkHistory(t, st, task, event{leasecore.EventReleased, "o", 1, ""})
	}
}
