package leasecore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

func TestValidateRoleName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"team_a", "A", "_x", "Team_B9", strings.Repeat("r", leasecore.MaxRoleNameLen)} {
		if err := leasecore.ValidateRoleName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "9lives", "team-a", "team a", `te"am`, "é", strings.Repeat("r", leasecore.MaxRoleNameLen+1)} {
		var ve *leasecore.ValidationError
		if err := leasecore.ValidateRoleName(bad); !errors.As(err, &ve) || ve.Field != "Role" {
			t.Errorf("%q: %v, want refused naming Role", bad, err)
		}
	}
}

func TestRoleScopeValidate(t *testing.T) {
	t.Parallel()
	r := leasecore.RoleScope{Role: "team_a", Prefixes: []string{"team-a/", "shared/", "a"}}
	given := slices.Clone(r.Prefixes)
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Prefixes, []string{"a", "shared/", "team-a/"}) {
		t.Errorf("prefixes %q, want them sorted", r.Prefixes)
	}
	many := make([]string, leasecore.MaxScopePrefixes+1)
	for i := range many {
		many[i] = "p" + strings.Repeat("x", i)
	}
	for name, prefixes := range map[string][]string{
		"none":          nil,
		"too many":      many,
		"empty":         {""},
		"reserved":      {"leasehold:prune"},
		"reserved root": {"leasehold:"},
		"covers own":    {"lease"},
		"charset":       {"team a/"},
		"too long":      {strings.Repeat("p", leasecore.MaxTaskLen+1)},
		"twice":         {"a/", "b/", "a/"},
	} {
		r := leasecore.RoleScope{Role: "team_a", Prefixes: prefixes}
		var ve *leasecore.ValidationError
		if err := r.Validate(); !errors.As(err, &ve) || ve.Field != "Prefixes" {
			t.Errorf("%s %q: %v, want refused naming Prefixes", name, prefixes, err)
		}
	}
	if !slices.Equal(given, []string{"team-a/", "shared/", "a"}) {
		t.Errorf("Validate changed the caller's slice: %q", given)
	}
}

// A scope covers its prefixes and leasehold's own tasks; no scope covers
// everything; a refusal names the role, the right, the task and the scope.
func TestScopeCheck(t *testing.T) {
	t.Parallel()
	open := leasecore.Scope{Role: "ops"}
	none := leasecore.Scope{Role: "nobody", Prefixes: []string{}}
	a := leasecore.Scope{Role: "team_a", Prefixes: []string{"a/", "shared/"}}
	for _, c := range []struct {
		scope leasecore.Scope
		task  string
		ok    bool
	}{
		{open, "anything", true},
		{a, "a/x", true},
		{a, "shared/y", true},
		{a, "leasehold:prune", true},
		{a, "b/x", false},
		{a, "a", false},
		{none, "a/x", false},
		{none, "leasehold:prune/nobody", true},
		{a, "leasehold:prune/team_a", true},
		{a, "leasehold:prune/team_b", false},
		{open, "leasehold:prune/team_b", true},
	} {
		err := c.scope.Check(leasecore.RightHold, c.task)
		if c.ok != (err == nil) || c.ok != c.scope.Allows(c.task) {
			t.Errorf("scope %+v, task %q: %v, want allowed %v", c.scope, c.task, err, c.ok)
		}
	}
	err := a.Check(leasecore.RightRead, "b/x")
	var fe *leasecore.ForbiddenError
	if !errors.As(err, &fe) || !errors.Is(err, leasecore.ErrForbidden) || fe.Principal != `database role "team_a"` || fe.Right != "read" || fe.Task != "b/x" {
		t.Fatalf("refusal %#v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"a/", "shared/"`) || !strings.Contains(msg, `"leasehold:"`) {
		t.Errorf("refusal %q does not state the scope", msg)
	}
	if open.Restricted() || !a.Restricted() || !none.Restricted() {
		t.Error("Restricted")
	}
	if got := leasecore.PruneTaskFor(open); got != leasecore.PruneTask {
		t.Errorf("unrestricted prune lease %q", got)
	}
	if got := leasecore.PruneTaskFor(a); got != "leasehold:prune/team_a" || leasecore.ValidateTask(got) != nil {
		t.Errorf("team_a's prune lease %q", got)
	}
}

// forbiddingStore refuses every lease operation as a scoped store does.
type forbiddingStore struct{ recordingStore }

func (f *forbiddingStore) refuse(task string) error {
	return &leasecore.ForbiddenError{Principal: `database role "r"`, Right: leasecore.RightHold, Task: task}
}

func (f *forbiddingStore) Claim(_ context.Context, p leasecore.ClaimParams) (*leasecore.Lease, error) {
	return nil, f.refuse(p.Task)
}

func (f *forbiddingStore) Renew(_ context.Context, p leasecore.RenewParams) (*leasecore.Lease, error) {
	return nil, f.refuse(p.Task)
}

func (f *forbiddingStore) Release(_ context.Context, p leasecore.ReleaseParams) (bool, error) {
	return false, f.refuse(p.Task)
}

func (f *forbiddingStore) Get(_ context.Context, task string) (*leasecore.Lease, error) {
	return nil, f.refuse(task)
}

func (f *forbiddingStore) History(_ context.Context, task string, _ int) ([]leasecore.Event, error) {
	return nil, f.refuse(task)
}

// A store's refusal reaches the Service's caller as the refusal it is,
// not turned into "unavailable" (a 503 that a client would retry).
func TestServicePassesRefusals(t *testing.T) {
	t.Parallel()
	svc := leasecore.New(&forbiddingStore{})
	ctx := t.Context()
	_, claimErr := svc.Claim(ctx, leasecore.ClaimParams{Task: "t", Owner: "o", TTL: time.Second})
	_, renewErr := svc.Renew(ctx, leasecore.RenewParams{Task: "t", Owner: "o"})
	_, releaseErr := svc.Release(ctx, leasecore.ReleaseParams{Task: "t", Owner: "o"})
	_, getErr := svc.Get(ctx, "t")
	_, historyErr := svc.History(ctx, "t", 1)
	batch := svc.RenewBatch(ctx, []leasecore.RenewParams{{Task: "t", Owner: "o"}})
	for name, err := range map[string]error{"claim": claimErr, "renew": renewErr, "release": releaseErr, "get": getErr, "history": historyErr, "renew batch": batch[0].Err} {
		if !errors.Is(err, leasecore.ErrForbidden) || errors.Is(err, leasecore.ErrUnavailable) {
			t.Errorf("%s: %v, want the store's refusal", name, err)
		}
	}
}

// A store without roles answers role scope operations with NoRolesError,
// and is unrestricted.
func TestNoRoles(t *testing.T) {
	t.Parallel()
	svc := leasecore.New(&recordingStore{})
	if _, err := svc.CreateRoleScope(t.Context(), leasecore.RoleScope{Role: "r", Prefixes: []string{"p/"}}); !errors.Is(err, leasecore.ErrNoRoles) || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Errorf("create on a store without roles: %v", err)
	}
	if _, err := svc.CreateRoleScope(t.Context(), leasecore.RoleScope{Role: "r"}); !errors.Is(err, leasecore.ErrInvalid) {
		t.Errorf("an invalid scope is refused first, naming the field: %v", err)
	}
	if s, err := svc.Scope(t.Context()); err != nil || s.Restricted() {
		t.Errorf("scope of a store without roles: %+v, %v", s, err)
	}
}
