package tfprovider

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/leasehold/leasehold/leasecore"
)

const policyAddr = "leasehold_retention_policy.p"

func policyHCL(name, keepFor string, keepLast int) string {
	return fmt.Sprintf(`
resource "leasehold_retention_policy" "p" {
  name      = %q
  keep_for  = %q
  keep_last = %d
}`, name, keepFor, keepLast)
}

// TestPolicyLifecycle creates a policy, changes it in place, renames it (a
// replacement) and imports it.
func TestPolicyLifecycle(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testStore) {
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(nil),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{
				{
					// The store keeps 10080m as 168h; the state keeps the spelling.
					Config: ts.config(policyHCL("audit", "10080m", 100)),
					ConfigStateChecks: []statecheck.StateCheck{
						expectString(policyAddr, "keep_for", "10080m"),
						statecheck.ExpectKnownValue(policyAddr, tfjsonpath.New("keep_last"), knownvalue.Int64Exact(100)),
					},
					Check: ts.checkPolicy(leasecore.RetentionPolicy{Name: "audit", KeepFor: 7 * 24 * time.Hour, KeepLast: 100}),
				},
				{
					Config:           ts.config(policyHCL("audit", "168h", 0)),
					ConfigPlanChecks: expectAction(policyAddr, plancheck.ResourceActionUpdate),
					Check:            ts.checkPolicy(leasecore.RetentionPolicy{Name: "audit", KeepFor: 7 * 24 * time.Hour, KeepLast: 0}),
				},
				{
					Config:           ts.config(policyHCL("audit-2", "168h", 0)),
					ConfigPlanChecks: expectAction(policyAddr, plancheck.ResourceActionDestroyBeforeCreate),
					Check:            ts.checkPolicy(leasecore.RetentionPolicy{Name: "audit-2", KeepFor: 7 * 24 * time.Hour}),
				},
				{
					ResourceName:                         policyAddr,
					ImportState:                          true,
					ImportStateId:                        "audit-2",
					ImportStateVerify:                    true,
					ImportStateVerifyIdentifierAttribute: "name",
				},
			},
		})
	})
}

// TestPolicyKeepForOnly: keep_last is optional. A policy with only keep_for
// has no count limit (keep_last 0); removing keep_last from a policy that
// had one plans an update to 0. Importing the policy keeps keep_for as the
// configuration spelled it (10080m, not 168h), so it plans nothing.
func TestPolicyKeepForOnly(t *testing.T) {
	t.Parallel()
	keepForOnly := `
resource "leasehold_retention_policy" "p" {
  name     = "by-age"
  keep_for = "10080m"
}`
	eachStore(t, func(t *testing.T, ts *testStore) {
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(nil),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{
				{
					Config: ts.config(policyHCL("by-age", "168h", 50)),
					Check:  ts.checkPolicy(leasecore.RetentionPolicy{Name: "by-age", KeepFor: 168 * time.Hour, KeepLast: 50}),
				},
				{
					Config:           ts.config(keepForOnly),
					ConfigPlanChecks: expectAction(policyAddr, plancheck.ResourceActionUpdate),
					ConfigStateChecks: []statecheck.StateCheck{
						statecheck.ExpectKnownValue(policyAddr, tfjsonpath.New("keep_last"), knownvalue.Int64Exact(0)),
					},
					Check: ts.checkPolicy(leasecore.RetentionPolicy{Name: "by-age", KeepFor: 168 * time.Hour, KeepLast: 0}),
				},
				{
					Config:                               ts.config(keepForOnly),
					ResourceName:                         policyAddr,
					ImportState:                          true,
					ImportStateId:                        "by-age",
					ImportStateVerify:                    true,
					ImportStateVerifyIdentifierAttribute: "name",
				},
				forgetStep(ts, policyAddr),
				{
					Config:             ts.config(keepForOnly),
					ResourceName:       policyAddr,
					ImportState:        true,
					ImportStateId:      "by-age",
					ImportStatePersist: true,
				},
				{Config: ts.config(keepForOnly), PlanOnly: true},
			},
		})
	})
}

// forgetStep removes addr from the state and leaves it in the store, so
// that a later step can import it into the state the steps after it use.
func forgetStep(ts *testStore, addr string) resource.TestStep {
	return resource.TestStep{
		Config: ts.config(fmt.Sprintf(`
removed {
  from = %s
  lifecycle {
    destroy = false
  }
}`, addr)),
	}
}

// TestPolicyInUse refuses to delete a policy that a task names, naming the
// task, and keeps the policy in state.
func TestPolicyInUse(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testStore) {
		withPolicy := ts.config(policyHCL("audit", "720h", 10) + `
resource "leasehold_task" "t" {
  name             = "billing/nightly"
  ttl              = "1m"
  retention_policy = leasehold_retention_policy.p.name
}`)
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(nil),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{
				{Config: withPolicy},
				{
					Config: ts.config(`
resource "leasehold_task" "t" {
  name             = "billing/nightly"
  ttl              = "1m"
  retention_policy = "audit"
}`),
					ExpectError: words(`retention policy "audit" is used by tasks billing/nightly`),
				},
				{
					// The policy stayed in state: nothing to do.
					Config:           withPolicy,
					ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
					Check:            ts.checkPolicy(leasecore.RetentionPolicy{Name: "audit", KeepFor: 720 * time.Hour, KeepLast: 10}),
				},
			},
		})
	})
}

// TestPolicyRenameMovesTasks renames a policy that a task refers to: with
// create_before_destroy (as the examples and docs/provider.md advise) the new
// policy is created and the task moved to it before the old one, no longer
// in use, is deleted.
func TestPolicyRenameMovesTasks(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testStore) {
		withPolicy := func(name string) string {
			return ts.config(fmt.Sprintf(`
resource "leasehold_retention_policy" "p" {
  name      = %q
  keep_for  = "720h"
  keep_last = 10
  lifecycle {
    create_before_destroy = true
  }
}

resource "leasehold_task" "t" {
  name             = "billing/nightly"
  ttl              = "1m"
  retention_policy = leasehold_retention_policy.p.name
}`, name))
		}
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(nil),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{
				{Config: withPolicy("audit")},
				{
					Config: withPolicy("audit-2"),
					ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(policyAddr, plancheck.ResourceActionCreateBeforeDestroy),
					}},
					Check: resource.ComposeTestCheckFunc(
						ts.checkTask(leasecore.TaskDecl{Name: "billing/nightly", TTL: time.Minute, RetentionPolicy: "audit-2"}),
						ts.checkPolicy(leasecore.RetentionPolicy{Name: "audit-2", KeepFor: 720 * time.Hour, KeepLast: 10}),
						func(*terraform.State) error {
							if p, err := ts.svc.GetPolicy(t.Context(), "audit"); err != nil || p != nil {
								return fmt.Errorf("old policy after the rename: %+v, %v; want it deleted", p, err)
							}
							return nil
						},
					),
				},
			},
		})
	})
}

// TestDefaultPolicy imports the default policy, changes it, and cannot
// delete it; a removed block lets Terraform forget it.
func TestDefaultPolicy(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testStore) {
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(nil),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{
				{
					Config: ts.config(`
import {
  to = leasehold_retention_policy.p
  id = "default"
}
` + policyHCL("default", "720h", 500)),
					Check: ts.checkPolicy(leasecore.RetentionPolicy{Name: "default", KeepFor: 720 * time.Hour, KeepLast: 500}),
				},
				{
					Config:      ts.config(""),
					ExpectError: words(`retention policy "default" cannot be deleted`),
				},
				{
					Config: ts.config(`
removed {
  from = leasehold_retention_policy.p
  lifecycle {
    destroy = false
  }
}`),
					Check: ts.checkPolicy(leasecore.RetentionPolicy{Name: "default", KeepFor: 720 * time.Hour, KeepLast: 500}),
				},
			},
		})
	})
}

// TestPolicyValidation refuses bad policies at plan time, naming the
// attribute.
func TestPolicyValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		hcl    string
		expect *regexp.Regexp
	}{
		{policyHCL("audit", "1500ms", 1), diagnostic("Invalid keep_for", "keep_for must be a whole number of seconds")},
		{policyHCL("audit", "-1h", 1), diagnostic("Invalid keep_for", "keep_for must be between 0s and 876000h; -1h is not.")},
		{policyHCL("audit", "a week", 1), diagnostic("Invalid keep_for", `keep_for must be a Go duration: numbers, each with a unit (ns, us, ms, s, m, h), such as 90s, 10m or 1h30m; "a week" is not.`)},
		{policyHCL("audit", "1h", -1), words("keep_last value must be between 0 and 1000000000, got: -1")},
		{policyHCL("au dit", "1h", 1), diagnostic("Invalid name", "name is not a valid retention policy name")},
	}
	eachStore(t, func(t *testing.T, ts *testStore) {
		steps := make([]resource.TestStep, 0, len(cases))
		for _, c := range cases {
			steps = append(steps, resource.TestStep{Config: ts.config(c.hcl), PlanOnly: true, ExpectError: c.expect})
		}
		resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: ts.factories(nil), Steps: steps})
	})
}
