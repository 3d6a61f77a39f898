package tfprovider

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
	"github.com/leasehold/leasehold/leasecore"
)

const scopeAddr = "leasehold_role_scope.s"

func scopeHCL(role string, prefixes ...string) string {
	quoted := make([]string, len(prefixes))
	for i, p := range prefixes {
		quoted[i] = fmt.Sprintf("%q", p)
	}
	return fmt.Sprintf(`
resource "leasehold_role_scope" "s" {
  role     = %q
  prefixes = [%s]
}`, role, strings.Join(quoted, ", "))
}

// postgresStore is a PostgreSQL test store, for the resources only
// PostgreSQL has.
func postgresStore(t *testing.T) *testStore {
	t.Helper()
	requireTerraform(t)
	return newTestStore(t, "postgres")
}

// checkScope verifies the scope the store has for role.
func (ts *testStore) checkScope(role string, prefixes ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		got, err := ts.svc.GetRoleScope(context.Background(), role)
		if err != nil {
			return err
		}
		want := slices.Sorted(slices.Values(prefixes))
		if got == nil || !slices.Equal(got.Prefixes, want) {
			return fmt.Errorf("store has scope %+v for %s, want prefixes %q", got, role, want)
		}
		return nil
	}
}

// TestRoleScopeLifecycle creates a scope, changes its prefixes in place,
// imports it, finds it changed and deleted behind Terraform's back (and
// puts it back), and gives another role a scope (a replacement).
func TestRoleScopeLifecycle(t *testing.T) {
	t.Parallel()
	ts := postgresStore(t)
	teamA, _ := pgtest.NewRole(t, ts.url, "lh_team_a")
	teamB, _ := pgtest.NewRole(t, ts.url, "lh_team_b")
	final := ts.config(scopeHCL(teamA, "team-a/", "shared/"))
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: ts.factories(nil),
		CheckDestroy:             ts.checkDestroyed,
		Steps: []resource.TestStep{
			{
				Config: ts.config(scopeHCL(teamA, "team-a/")),
				ConfigStateChecks: []statecheck.StateCheck{
					expectString(scopeAddr, "role", teamA),
					statecheck.ExpectKnownValue(scopeAddr, tfjsonpath.New("prefixes"), knownvalue.SetExact([]knownvalue.Check{knownvalue.StringExact("team-a/")})),
				},
				Check: ts.checkScope(teamA, "team-a/"),
			},
			{
				Config:           final,
				ConfigPlanChecks: expectAction(scopeAddr, plancheck.ResourceActionUpdate),
				Check:            ts.checkScope(teamA, "team-a/", "shared/"),
			},
			{
				ResourceName:                         scopeAddr,
				ImportState:                          true,
				ImportStateId:                        teamA,
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "role",
			},
			{
				PreConfig: func() {
					if _, err := ts.svc.UpdateRoleScope(context.Background(), leasecore.RoleScope{Role: teamA, Prefixes: []string{"everything-else/"}}); err != nil {
						t.Fatalf("change the scope outside Terraform: %v", err)
					}
				},
				Config:           final,
				ConfigPlanChecks: expectAction(scopeAddr, plancheck.ResourceActionUpdate),
				Check:            ts.checkScope(teamA, "team-a/", "shared/"),
			},
			{
				PreConfig: func() {
					if ok, err := ts.svc.DeleteRoleScope(context.Background(), teamA); err != nil || !ok {
						t.Fatalf("delete the scope outside Terraform: %v, %v", ok, err)
					}
				},
				Config:           final,
				ConfigPlanChecks: expectAction(scopeAddr, plancheck.ResourceActionCreate),
				Check:            ts.checkScope(teamA, "team-a/", "shared/"),
			},
			{
				Config:           ts.config(scopeHCL(teamB, "team-b/")),
				ConfigPlanChecks: expectAction(scopeAddr, plancheck.ResourceActionDestroyBeforeCreate),
				Check: resource.ComposeTestCheckFunc(ts.checkScope(teamB, "team-b/"), func(*terraform.State) error {
					if got, err := ts.svc.GetRoleScope(context.Background(), teamA); err != nil || got != nil {
						return fmt.Errorf("the replaced scope of %s is still there: %+v, %v", teamA, got, err)
					}
					return nil
				}),
			},
		},
	})
}

// TestRoleScopeRefused: rules broken at plan time name the attribute; a
// role that does not exist or that row-level security does not bind is
// refused at apply, saying why; an import ID that is no role name is
// refused.
func TestRoleScopeRefused(t *testing.T) {
	t.Parallel()
	ts := postgresStore(t)
	plan := func(hcl string, want *regexp.Regexp) resource.TestStep {
		return resource.TestStep{Config: ts.config(hcl), PlanOnly: true, ExpectError: want}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: ts.factories(nil),
		CheckDestroy:             ts.checkDestroyed,
		Steps: []resource.TestStep{
			plan(scopeHCL("team-a", "a/"), diagnostic("Invalid role", "role is not a valid role name")),
			plan(scopeHCL("team_a"), diagnostic("Invalid Attribute Value", "set must contain at least 1 elements")),
			plan(scopeHCL("team_a", "team a/"), words("is not a valid scope prefix")),
			plan(scopeHCL("team_a", "leasehold:prune"), words(`not starting "leasehold:"`)),
			{
				Config:      ts.config(scopeHCL("lh_no_such_role", "a/")),
				ExpectError: diagnostic(`Cannot limit role "lh_no_such_role" to its prefixes`, `database role "lh_no_such_role" does not exist. Create the role first`),
			},
			{
				Config:      ts.config(scopeHCL("postgres", "a/")),
				ExpectError: words(`"postgres" is a superuser, has BYPASSRLS, or has the privileges of the owner of leasehold's tables`),
			},
			{
				Config:        ts.config(scopeHCL("team_a", "a/")),
				ResourceName:  scopeAddr,
				ImportState:   true,
				ImportStateId: "team-a",
				ExpectError:   diagnostic("Invalid import ID", `"team-a" is not one`),
			},
		},
	})
}

// TestRoleScopeOnSQLite: SQLite has no roles; the plan says so, naming the
// store's kind, before anything is applied.
func TestRoleScopeOnSQLite(t *testing.T) {
	t.Parallel()
	requireTerraform(t)
	ts := newTestStore(t, "sqlite")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: ts.factories(nil),
		Steps: []resource.TestStep{{
			Config:      ts.config(scopeHCL("team_a", "team-a/")),
			PlanOnly:    true,
			ExpectError: diagnostic("Role scopes need a PostgreSQL store", "this provider's store is SQLite (sqlite:PATH), which has no database roles"),
		}},
	})
}
