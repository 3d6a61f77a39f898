package tfprovider

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/leasehold/leasehold/leasecore"
)

const taskAddr = "leasehold_task.t"

func expectAction(addr string, action plancheck.ResourceActionType) resource.ConfigPlanChecks {
	return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, action)}}
}

func expectString(addr, attr, want string) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New(attr), knownvalue.StringExact(want))
}

// TestTaskLifecycle creates a task, changes it in place, renames it (a
// replacement) and imports it, checking the store after each step.
func TestTaskLifecycle(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testStore) {
		createdAt := statecheck.CompareValue(compare.ValuesSame())
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(nil),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{
				{
					// The store prints 90s as 1m30s; the state keeps "90s".
					Config: ts.config(`
resource "leasehold_task" "t" {
  name = "nightly"
  ttl  = "90s"
}`),
					ConfigStateChecks: []statecheck.StateCheck{
						expectString(taskAddr, "ttl", "90s"),
						statecheck.ExpectKnownValue(taskAddr, tfjsonpath.New("max_ttl"), knownvalue.Null()),
						expectString(taskAddr, "description", ""),
						expectString(taskAddr, "retention_policy", leasecore.DefaultPolicy),
						statecheck.ExpectKnownValue(taskAddr, tfjsonpath.New("created_at"), knownvalue.NotNull()),
						createdAt.AddStateValue(taskAddr, tfjsonpath.New("created_at")),
					},
					Check: ts.checkTask(leasecore.TaskDecl{Name: "nightly", TTL: 90 * time.Second, RetentionPolicy: leasecore.DefaultPolicy}),
				},
				{
					Config: ts.config(`
resource "leasehold_retention_policy" "audit" {
  name      = "audit"
  keep_for  = "720h"
  keep_last = 100
}

resource "leasehold_task" "t" {
  name             = "nightly"
  ttl              = "2m"
  max_ttl          = "10m"
  description      = "nightly report"
  retention_policy = leasehold_retention_policy.audit.name
}`),
					ConfigPlanChecks: expectAction(taskAddr, plancheck.ResourceActionUpdate),
					ConfigStateChecks: []statecheck.StateCheck{
						expectString(taskAddr, "ttl", "2m"),
						expectString(taskAddr, "max_ttl", "10m"),
						expectString(taskAddr, "retention_policy", "audit"),
						createdAt.AddStateValue(taskAddr, tfjsonpath.New("created_at")),
					},
					Check: ts.checkTask(leasecore.TaskDecl{Name: "nightly", TTL: 2 * time.Minute, MaxTTL: 10 * time.Minute, Description: "nightly report", RetentionPolicy: "audit"}),
				},
				{
					Config: ts.config(`
resource "leasehold_retention_policy" "audit" {
  name      = "audit"
  keep_for  = "720h"
  keep_last = 100
}

resource "leasehold_task" "t" {
  name             = "reports/nightly"
  ttl              = "2m"
  max_ttl          = "10m"
  description      = "nightly report"
  retention_policy = leasehold_retention_policy.audit.name
}`),
					ConfigPlanChecks: expectAction(taskAddr, plancheck.ResourceActionDestroyBeforeCreate),
					Check: resource.ComposeAggregateTestCheckFunc(
						ts.checkNoTask("nightly"),
						ts.checkTask(leasecore.TaskDecl{Name: "reports/nightly", TTL: 2 * time.Minute, MaxTTL: 10 * time.Minute, Description: "nightly report", RetentionPolicy: "audit"}),
					),
				},
				{
					ResourceName:                         taskAddr,
					ImportState:                          true,
					ImportStateId:                        "reports/nightly",
					ImportStateVerify:                    true,
					ImportStateVerifyIdentifierAttribute: "name",
				},
				{
					ResourceName:                         "leasehold_retention_policy.audit",
					ImportState:                          true,
					ImportStateId:                        "audit",
					ImportStateVerify:                    true,
					ImportStateVerifyIdentifierAttribute: "name",
				},
			},
		})
	})
}

// TestTaskImportKeepsSpelling imports a task declared by this provider with
// durations the store would print otherwise (90s is 1m30s, 600s is 10m):
// the import gives the configuration's spelling back, so it verifies and
// the plan after it is empty.
func TestTaskImportKeepsSpelling(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testStore) {
		config := ts.config(`
resource "leasehold_task" "t" {
  name     = "spelled"
  ttl      = "90s"
  max_ttl  = "600s"
  min_hold = "90m"
}`)
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(nil),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{
				{
					Config: config,
					Check: ts.checkTask(leasecore.TaskDecl{Name: "spelled", TTL: 90 * time.Second, MaxTTL: 10 * time.Minute, MinHold: 90 * time.Minute,
						RetentionPolicy: leasecore.DefaultPolicy}),
				},
				{
					Config:                               config,
					ResourceName:                         taskAddr,
					ImportState:                          true,
					ImportStateId:                        "spelled",
					ImportStateVerify:                    true,
					ImportStateVerifyIdentifierAttribute: "name",
				},
				forgetStep(ts, taskAddr),
				{
					Config:             config,
					ResourceName:       taskAddr,
					ImportState:        true,
					ImportStateId:      "spelled",
					ImportStatePersist: true,
				},
				{
					Config:   config,
					PlanOnly: true,
					ConfigStateChecks: []statecheck.StateCheck{
						expectString(taskAddr, "ttl", "90s"),
						expectString(taskAddr, "max_ttl", "600s"),
						expectString(taskAddr, "min_hold", "90m"),
					},
				},
			},
		})
	})
}

// TestTaskChangedOutsideTerraform deletes and changes a declaration behind
// Terraform's back: the plan creates it again, then puts it back.
func TestTaskChangedOutsideTerraform(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testStore) {
		config := ts.config(`
resource "leasehold_task" "t" {
  name    = "sync"
  ttl     = "30s"
  max_ttl = "5m"
}`)
		want := leasecore.TaskDecl{Name: "sync", TTL: 30 * time.Second, MaxTTL: 5 * time.Minute, RetentionPolicy: leasecore.DefaultPolicy}
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(nil),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{
				{Config: config, Check: ts.checkTask(want)},
				{
					PreConfig: func() {
						if ok, err := ts.svc.DeleteTask(context.Background(), "sync", takeOver); err != nil || !ok {
							t.Fatalf("delete task outside Terraform: %v, %v", ok, err)
						}
					},
					Config:           config,
					ConfigPlanChecks: expectAction(taskAddr, plancheck.ResourceActionCreate),
					Check:            ts.checkTask(want),
				},
				{
					PreConfig: func() {
						changed := want
						changed.TTL = 4 * time.Minute
						changed.Description = "changed by hand"
						if _, err := ts.svc.UpdateTask(context.Background(), changed, takeOver); err != nil {
							t.Fatalf("update task outside Terraform: %v", err)
						}
					},
					Config:           config,
					ConfigPlanChecks: expectAction(taskAddr, plancheck.ResourceActionUpdate),
					Check:            ts.checkTask(want),
				},
			},
		})
	})
}

// TestTaskValidation refuses bad configurations at plan time, naming the
// attribute.
func TestTaskValidation(t *testing.T) {
	t.Parallel()
	task := func(attrs string) string {
		return fmt.Sprintf("resource \"leasehold_task\" \"t\" {\n%s\n}\n", attrs)
	}
	cases := []struct {
		name   string
		hcl    string
		expect *regexp.Regexp
	}{
		{"not a duration", task(`name = "a"
ttl = "ninety"`), diagnostic("Invalid ttl", `ttl must be a Go duration: numbers, each with a unit (ns, us, ms, s, m, h), such as 90s, 10m or 1h30m; "ninety" is not.`)},
		{"ttl above max_ttl", task(`name = "a"
ttl = "10m"
max_ttl = "1m"`), diagnostic("Invalid ttl", "ttl must be at most max_ttl (1m); 10m is not.")},
		{"ttl too long", task(`name = "a"
ttl = "48h"`), diagnostic("Invalid ttl", "ttl must be between 100ms and 24h; 48h is not.")},
		{"ttl finer than a millisecond", task(`name = "a"
ttl = "1500us"`), diagnostic("Invalid ttl", "ttl must be a whole number of milliseconds")},
		{"max_ttl too short", task(`name = "a"
ttl = "1s"
max_ttl = "10ms"`), diagnostic("Invalid max_ttl", "max_ttl must be between 100ms and 24h")},
		{"min_hold too long", task(`name = "a"
ttl = "1s"
min_hold = "745h"`), diagnostic("Invalid min_hold", "min_hold must be between 1ms and 744h; 745h is not.")},
		{"bad name", task(`name = "nightly report"
ttl = "1m"`), diagnostic("Invalid name", `name is not a valid task name: it must be 1 to 200 characters of A-Z a-z 0-9 . _ : / @ -, with no empty, "." or ".." segment between slashes; ' ' at position 8 is not.`)},
		{"name with a dot dot segment", task(`name = "billing/../nightly"
ttl = "1m"`), diagnostic("Invalid name", `name is not a valid task name: it must be 1 to 200 characters of A-Z a-z 0-9 . _ : / @ -, with no empty, "." or ".." segment between slashes; segment 2 is "..".`)},
		{"bad policy name", task(`name = "a"
ttl = "1m"
retention_policy = "x!"`), diagnostic("Invalid retention_policy", "retention_policy is not a valid retention policy name")},
		// Caught at plan, by ModifyPlan's look at the store, not at apply.
		{"policy that does not exist", task(`name = "a"
ttl = "1m"
retention_policy = "nope"`), diagnostic("Invalid retention_policy", `retention policy "nope" does not exist: the store has none of that name`)},
		{"description too long", task(`name = "a"
ttl = "1m"
description = "` + strings.Repeat("é", 513) + `"`), diagnostic("Invalid description", "description must be valid UTF-8 without NUL, at most 1024 bytes; it has 1026 bytes.")},
	}
	eachStore(t, func(t *testing.T, ts *testStore) {
		steps := make([]resource.TestStep, 0, len(cases))
		for _, c := range cases {
			steps = append(steps, resource.TestStep{Config: ts.config(c.hcl), PlanOnly: true, ExpectError: c.expect})
		}
		resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: ts.factories(nil), Steps: steps})
	})
}

// TestTaskImportSpelling imports a task declared outside Terraform, which
// keeps no spelling, whose configuration spells its durations differently
// from Go: the plan has an update, which writes the spellings alone (the
// durations stay), so that the next import of it plans nothing.
func TestTaskImportSpelling(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testStore) {
		var before *leasecore.TaskDecl
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(nil),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{{
				PreConfig: func() {
					var err error
					before, err = ts.svc.CreateTask(context.Background(), leasecore.TaskDecl{Name: "legacy", TTL: 90 * time.Second, MaxTTL: time.Hour}, leasecore.Writer{})
					if err != nil {
						t.Fatalf("declare task outside Terraform: %v", err)
					}
				},
				Config: ts.config(`
import {
  to = leasehold_task.t
  id = "legacy"
}

resource "leasehold_task" "t" {
  name    = "legacy"
  ttl     = "90s"
  max_ttl = "60m"
}`),
				ConfigPlanChecks: expectAction(taskAddr, plancheck.ResourceActionUpdate),
				ConfigStateChecks: []statecheck.StateCheck{
					expectString(taskAddr, "ttl", "90s"),
					expectString(taskAddr, "max_ttl", "60m"),
				},
				Check: func(*terraform.State) error {
					after, err := ts.svc.GetTask(context.Background(), "legacy")
					if err != nil {
						return err
					}
					if after == nil || after.TTL != before.TTL || after.MaxTTL != before.MaxTTL ||
						after.TTLSpelling != "90s" || after.MaxTTLSpelling != "60m" || !after.CreatedAt.Equal(before.CreatedAt) {
						return fmt.Errorf("after the update %+v, want %+v with the spellings 90s and 60m", after, before)
					}
					// The operator's declaration, imported, is Terraform's
					// after the apply.
					if before.ManagedBy != leasecore.ManagedByOperator || after.ManagedBy != leasecore.ManagedByTerraform {
						return fmt.Errorf("managed by %q before the import and %q after the apply, want %q then %q",
							before.ManagedBy, after.ManagedBy, leasecore.ManagedByOperator, leasecore.ManagedByTerraform)
					}
					return nil
				},
			}},
		})
	})
}

// TestReservedTaskDeclared: one of leasehold's own tasks may be declared,
// to choose the retention policy of its history; the plan warns (see
// reservedTaskNote) but applies.
func TestReservedTaskDeclared(t *testing.T) {
	t.Parallel()
	ts := newTestStore(t, "sqlite")
	requireTerraform(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: ts.factories(nil),
		CheckDestroy:             ts.checkDestroyed,
		Steps: []resource.TestStep{{
			Config: ts.config(`
resource "leasehold_retention_policy" "short" {
  name      = "short"
  keep_for  = "24h"
  keep_last = 10
}

resource "leasehold_task" "t" {
  name             = "leasehold:prune"
  ttl              = "1m"
  retention_policy = leasehold_retention_policy.short.name
}`),
			Check: ts.checkTask(leasecore.TaskDecl{Name: leasecore.PruneTask, TTL: time.Minute, RetentionPolicy: "short"}),
		}},
	})
}
