package tfprovider

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/leasehold/leasehold/client/opcli"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/harness/testsidecar"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar"
)

// TestOperatorAndTerraform: a task and a policy Terraform declared are
// Terraform's in the store; the operator's CLI, over a sidecar on the same
// store, is refused (77) when it changes or removes them, and nothing
// changes; an operator who takes the task over (as after terraform state
// rm) makes it the operator's, and the next plan shows Terraform taking it
// back, which the apply does.
func TestOperatorAndTerraform(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testStore) {
		hs := testsidecar.Serve(t, sidecar.Options{Store: testsidecar.OpenStore(t, ts.url)})
		cli := func(args ...string) (int, string) {
			var stdout, stderr bytes.Buffer
			code := opcli.Main(context.Background(), args[0], append(args[1:], "--addr", hs.URL), func(string) string { return "" }, &stdout, &stderr)
			return code, stdout.String() + stderr.String()
		}
		config := ts.config(`
resource "leasehold_retention_policy" "audit" {
  name      = "audit"
  keep_for  = "720h"
  keep_last = 100
}

resource "leasehold_task" "t" {
  name             = "nightly"
  ttl              = "10m"
  retention_policy = leasehold_retention_policy.audit.name
}`)
		want := leasecore.TaskDecl{Name: "nightly", TTL: 10 * time.Minute, RetentionPolicy: "audit"}
		refused := func(*terraform.State) error {
			before, err := ts.svc.GetTask(context.Background(), "nightly")
			if err != nil || before == nil {
				return fmt.Errorf("get nightly: %v, %v", before, err)
			}
			for _, args := range [][]string{
				{"tasks", "remove", "nightly"},
				{"tasks", "declare", "nightly", "--ttl", "1m"},
				{"policies", "remove", "audit"},
				{"policies", "declare", "audit", "--keep-last", "1"},
			} {
				code, out := cli(args...)
				if code != exitcode.NoPerm || !strings.Contains(out, "is managed by Terraform: change it in the configuration, or remove it from the Terraform state first (terraform state rm)") {
					return fmt.Errorf("leasehold %v: exit %d, want %d saying Terraform manages it:\n%s", args, code, exitcode.NoPerm, out)
				}
			}
			after, err := ts.svc.GetTask(context.Background(), "nightly")
			if err != nil || after == nil || after.TTL != before.TTL || !after.UpdatedAt.Equal(before.UpdatedAt) || after.ManagedBy != leasecore.ManagedByTerraform {
				return fmt.Errorf("after the refused writes: %+v (%v), want %+v", after, err, before)
			}
			p, err := ts.svc.GetPolicy(context.Background(), "audit")
			if err != nil || p == nil || p.KeepLast != 100 || p.ManagedBy != leasecore.ManagedByTerraform {
				return fmt.Errorf("policy after the refused writes: %+v (%v)", p, err)
			}
			return nil
		}
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(nil),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{
				{
					Config: config,
					Check: resource.ComposeTestCheckFunc(ts.checkTask(want), refused,
						resource.TestCheckResourceAttr(taskAddr, "managed_by", "terraform"),
						resource.TestCheckResourceAttr("leasehold_retention_policy.audit", "managed_by", "terraform")),
				},
				{
					PreConfig: func() {
						if code, out := cli("tasks", "declare", "nightly", "--ttl", "1m", "--policy", "audit", "--take-over"); code != 0 {
							t.Fatalf("take over: exit %d\n%s", code, out)
						}
					},
					Config: config,
					ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(taskAddr, plancheck.ResourceActionUpdate),
						plancheck.ExpectResourceAction("leasehold_retention_policy.audit", plancheck.ResourceActionNoop),
					}},
					Check: resource.ComposeTestCheckFunc(ts.checkTask(want), resource.TestCheckResourceAttr(taskAddr, "managed_by", "terraform")),
				},
			},
		})
	})
}
