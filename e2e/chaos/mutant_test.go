package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/e2e/leasecheck"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/sqlite"
	"github.com/leasehold/leasehold/sidecar"
)

// ignoresHolder is a broken store: a claim that the real store refuses as
// held is answered as a fresh grant (the holder's token + 1, from now for
// the ttl), and nothing is written. The holder keeps its lease.
type ignoresHolder struct{ leasecore.Store }

func (m ignoresHolder) Claim(ctx context.Context, p leasecore.ClaimParams) (*leasecore.Lease, error) {
	l, err := m.Store.Claim(ctx, p)
	var held *leasecore.HeldError
	if !errors.As(err, &held) {
		return l, err
	}
	cur, gerr := m.Store.Get(ctx, p.Task)
	if gerr != nil || cur == nil {
		return l, err
	}
	now := time.Now()
	return &leasecore.Lease{Task: p.Task, Owner: p.Owner, Token: cur.Token + 1, AcquiredAt: now, RenewedAt: now,
		ExpiresAt: now.Add(p.TTL), TTL: p.TTL, TTLRemaining: p.TTL, Note: p.Note}, nil
}

// reusesToken is a broken store: every grant of an even token is reported
// with the token before it, which the previous holder had.
type reusesToken struct{ leasecore.Store }

func (m reusesToken) Claim(ctx context.Context, p leasecore.ClaimParams) (*leasecore.Lease, error) {
	l, err := m.Store.Claim(ctx, p)
	if err == nil && l.RenewCount == 0 && l.Token%2 == 0 {
		c := *l
		c.Token--
		return &c, nil
	}
	return l, err
}

// losesAnswers is a store whose answers are lost now and then: about one
// claim, renewal and release in ten is performed and then answered as a
// store failure, which the sidecar answers 503 unavailable, so the client
// cannot tell it from one that never happened.
type losesAnswers struct{ leasecore.Store }

func lose(op string) error {
	if rand.IntN(10) == 0 {
		return leasecore.Unavailable(op, errors.New("the answer was lost (test)"))
	}
	return nil
}

func (m losesAnswers) Claim(ctx context.Context, p leasecore.ClaimParams) (*leasecore.Lease, error) {
	l, err := m.Store.Claim(ctx, p)
	if lerr := lose("claim"); lerr != nil {
		return nil, lerr
	}
	return l, err
}

func (m losesAnswers) Renew(ctx context.Context, p leasecore.RenewParams) (*leasecore.Lease, error) {
	l, err := m.Store.Renew(ctx, p)
	if lerr := lose("renew"); lerr != nil {
		return nil, lerr
	}
	return l, err
}

func (m losesAnswers) Release(ctx context.Context, p leasecore.ReleaseParams) (bool, error) {
	ok, err := m.Store.Release(ctx, p)
	if lerr := lose("release"); lerr != nil {
		return false, lerr
	}
	return ok, err
}

// panics is a broken store whose claims panic: the sidecar answers 500, a
// bug, which no fault excuses.
type panics struct{ leasecore.Store }

func (m panics) Claim(context.Context, leasecore.ClaimParams) (*leasecore.Lease, error) {
	panic("a bug (test)")
}

// serve runs an in-process sidecar over store on 127.0.0.1.
func serve(t *testing.T, store leasecore.Store) string {
	t.Helper()
	srv, err := sidecar.New(sidecar.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

// The checker finds what a broken store does under the harness's load, and
// nothing in what the real store does; also when answers are lost, which
// makes ops indeterminate and so relaxes the rules: a real violation must
// stay visible through them.
func TestCheckerCatchesMutantStores(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(leasecore.Store) leasecore.Store
		want   []leasecheck.Rule // none for the real store
	}{
		{"real store", func(s leasecore.Store) leasecore.Store { return s }, nil},
		// A grant that is not written: it overlaps the holder's lease,
		// the holder's renewals go on after it, and the next real grant
		// reuses its token.
		{"ignores the holder", func(s leasecore.Store) leasecore.Store { return ignoresHolder{s} },
			[]leasecheck.Rule{leasecheck.RuleExclusion, leasecheck.RuleLateRenewal, leasecheck.RuleTokens}},
		{"reuses tokens", func(s leasecore.Store) leasecore.Store { return reusesToken{s} }, []leasecheck.Rule{leasecheck.RuleTokens}},
	}
	for _, tc := range cases {
		for _, lossy := range []bool{false, true} {
			name := tc.name
			if lossy {
				name += ", answers lost"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "leasehold.db"))
				if err != nil {
					t.Fatalf("sqlite.Open: %v", err)
				}
				t.Cleanup(func() { store.Close() })
				s := tc.mutate(store)
				if lossy {
					s = losesAnswers{s}
				}
				base := serve(t, s)

				res, err := Run(t.Context(), Config{
					URLs: []string{base}, GoClients: 8, Tasks: 4, TaskPrefix: "mutant-",
					// At least 3 s and 20 grants: on a loaded machine the
					// run goes on until it has exercised the store (about
					// 25 to 160 grants in 3 s on an idle one).
					Duration: 3 * time.Second, MinGrants: 20, MaxDuration: 30 * time.Second,
					RequestTimeout: 5 * time.Second,
				})
				if err != nil {
					t.Fatal(err)
				}
				if res.Unfinished != "" {
					t.Errorf("the load stopped at its limit before it exercised the store: %s", res.Unfinished)
				}
				for _, e := range res.Errors {
					t.Errorf("harness: %s", e)
				}
				rep := leasecheck.Check(res.Ops, 30*time.Second)
				t.Log(rep.Summary())
				if lossy && rep.Indeterminate == 0 {
					t.Errorf("no indeterminate op although answers were lost: %s", rep.Summary())
				}
				if tc.want == nil {
					for _, v := range rep.Violations {
						t.Errorf("violation with the real store: %s", v)
					}
					if rep.Linearizable != porcupine.Ok {
						t.Errorf("porcupine: %s with the real store, want Ok", rep.Linearizable)
					}
					if rep.Grants == 0 || rep.Held == 0 || rep.Renewals == 0 || rep.Releases == 0 {
						t.Errorf("the load did not exercise grants, refusals, renewals and releases: %s", rep.Summary())
					}
					return
				}
				by := rep.ViolationsByRule()
				for _, rule := range tc.want {
					if by[rule] == 0 {
						t.Errorf("no %s violation found in the history of a store that %s", rule, tc.name)
					} else {
						t.Logf("first: %s", firstOf(rep.Violations, rule))
					}
				}
				if rep.Linearizable == porcupine.Ok {
					t.Errorf("porcupine found the broken store's history linearizable")
				}
			})
		}
	}
}

// A 500 is not a lost answer: the run reports it as a harness error.
func TestHarnessReportsInternalErrors(t *testing.T) {
	t.Parallel()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "leasehold.db"))
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	base := serve(t, panics{store})
	res, err := Run(t.Context(), Config{
		URLs: []string{base}, GoClients: 2, Tasks: 4, TaskPrefix: "panics-",
		Duration: time.Second, RequestTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range res.Errors {
		if strings.Contains(e, ": 500 ") {
			n++
		}
	}
	if len(res.Ops) == 0 {
		t.Fatal("no op in a second")
	}
	if n != len(res.Ops) {
		t.Fatalf("%d harness errors for the 500s of a panicking store, want one per op; errors %q, indeterminate ops by cause %v; %d ops", n, res.Errors, res.IndeterminateCauses(), len(res.Ops))
	}
	t.Logf("%d harness errors, the first: %s", n, res.Errors[0])
}

func firstOf(vs []leasecheck.Violation, rule leasecheck.Rule) leasecheck.Violation {
	for _, v := range vs {
		if v.Rule == rule {
			return v
		}
	}
	return leasecheck.Violation{}
}
