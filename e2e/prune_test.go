package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// openService opens the store at url in this process, migrated, for a test
// to declare tasks and read history the way Terraform and a Go program do.
func openService(t *testing.T, url string) *leasecore.Service {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := storeurl.Open(ctx, storeurl.MustParse(url))
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate %s: %v", url, err)
	}
	return leasecore.New(st)
}

// fourEvents declares task under a policy that keeps only the newest event,
// and gives it four (two leases, each acquired and released).
func fourEvents(t *testing.T, svc *leasecore.Service, task string) {
	t.Helper()
	ctx := t.Context()
	if _, err := svc.CreatePolicy(ctx, leasecore.RetentionPolicy{Name: "newest", KeepLast: 1}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateTask(ctx, leasecore.TaskDecl{Name: task, TTL: time.Minute, RetentionPolicy: "newest"}, leasecore.Writer{}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		l, err := svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "w", Token: l.Token}); err != nil {
			t.Fatal(err)
		}
	}
	if evs := history(t, svc, task); len(evs) != 4 {
		t.Fatalf("%s has %d events, want 4", task, len(evs))
	}
}

func history(t *testing.T, svc *leasecore.Service, task string) []leasecore.Event {
	t.Helper()
	evs, err := svc.History(t.Context(), task, leasecore.MaxHistoryLimit)
	if err != nil {
		t.Fatalf("history of %s: %v", task, err)
	}
	return evs
}

// `leasehold prune --store URL` runs one pass: history beyond the task's
// policy is gone, the rest stays, and the prune lease is released.
func TestPruneCommand(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			url := kind.url(t)
			svc := openService(t, url)
			fourEvents(t, svc, "nightly")
			out, err := runLeasehold("prune", "--store", url)
			if err != nil {
				t.Fatalf("prune: %v\n%s", err, out)
			}
			if !strings.Contains(out, "deleted=3") {
				t.Errorf("prune does not say it deleted 3 events:\n%s", out)
			}
			if evs := history(t, svc, "nightly"); len(evs) != 1 || evs[0].Kind != leasecore.EventReleased {
				t.Fatalf("after prune: %+v, want only the newest event", evs)
			}
			if l, err := svc.Get(t.Context(), leasecore.PruneTask); err != nil || l != nil {
				t.Fatalf("prune lease after the command: %+v, %v; want released", l, err)
			}
		})
	}
}

// A sidecar prunes on its own, every --prune-interval, from the start.
func TestSidecarPrunes(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			url := kind.url(t)
			svc := openService(t, url)
			fourEvents(t, svc, "nightly")
			s := startSidecar(t, url, "--prune-interval", "1s")
			s.waitReady()
			deadline := time.Now().Add(30 * time.Second)
			for len(history(t, svc, "nightly")) != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("the sidecar did not prune within 30s:\n%s", s.logs.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// With --require-declared a sidecar refuses an undeclared task, and honours
// a declaration made while it runs (another process: here this test, in
// production Terraform) within the documented staleness bound, with no
// restart: the declared ttl becomes the claim's default, max_ttl its bound.
func TestRequireDeclared(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			url := kind.url(t)
			svc := openService(t, url)
			s := startSidecar(t, url, "--require-declared")
			s.waitReady()
			if r := s.call("POST", "/v1/leases/report/claim", map[string]any{"owner": "w"}); r.Status != 404 || !strings.Contains(r.Raw, "declared") {
				t.Fatalf("undeclared claim: %d %s, want 404 saying the task is not declared", r.Status, r.Raw)
			}
			if _, err := svc.CreateTask(t.Context(), leasecore.TaskDecl{Name: "report", TTL: 42 * time.Second, MaxTTL: time.Minute}, leasecore.Writer{}); err != nil {
				t.Fatal(err)
			}
			r := claimUntil(t, s, "report", func(r response) bool { return r.Status != 404 })
			if r.Status != 200 || r.lease(t)["ttl_ms"] != float64(42000) {
				t.Fatalf("claim after the declaration: %d %s, want 200 with the declared ttl 42000", r.Status, r.Raw)
			}
			if r := s.call("POST", "/v1/leases/report/claim", map[string]any{"owner": "w", "ttl_ms": 120000}); r.Status != 422 || !strings.Contains(r.Raw, "ttl_ms") {
				t.Fatalf("claim above max_ttl: %d %s, want 422 naming ttl_ms", r.Status, r.Raw)
			}
		})
	}
}
