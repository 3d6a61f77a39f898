package tfprovider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/leasehold/leasehold/leasecore"
)

// TestDataSources reads a lease claimed outside Terraform, through
// leasecore on the same store, and the list of declarations.
func TestDataSources(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testStore) {
		config := ts.config(`
resource "leasehold_task" "a" {
  name    = "telescope:prune"
  ttl     = "10m"
  max_ttl = "1h"
}

resource "leasehold_task" "b" {
  name        = "backup"
  ttl         = "90s"
  description = "nightly backup"
}

data "leasehold_lease" "prune" {
  task = leasehold_task.a.name
}

data "leasehold_tasks" "all" {
  depends_on = [leasehold_task.a, leasehold_task.b]
}`)
		const lease, tasks = "data.leasehold_lease.prune", "data.leasehold_tasks.all"
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(nil),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{
				{
					Config: config,
					ConfigStateChecks: []statecheck.StateCheck{
						statecheck.ExpectKnownValue(lease, tfjsonpath.New("held"), knownvalue.Bool(false)),
						statecheck.ExpectKnownValue(lease, tfjsonpath.New("owner"), knownvalue.Null()),
						statecheck.ExpectKnownValue(lease, tfjsonpath.New("token"), knownvalue.Null()),
						statecheck.ExpectKnownValue(lease, tfjsonpath.New("expires_at"), knownvalue.Null()),
						statecheck.ExpectKnownValue(tasks, tfjsonpath.New("tasks"), knownvalue.ListExact([]knownvalue.Check{
							knownvalue.ObjectPartial(map[string]knownvalue.Check{
								"name":             knownvalue.StringExact("backup"),
								"ttl":              knownvalue.StringExact("1m30s"),
								"max_ttl":          knownvalue.Null(),
								"description":      knownvalue.StringExact("nightly backup"),
								"retention_policy": knownvalue.StringExact(leasecore.DefaultPolicy),
								"managed_by":       knownvalue.StringExact("terraform"),
								"created_at":       knownvalue.NotNull(),
							}),
							knownvalue.ObjectPartial(map[string]knownvalue.Check{
								"name":    knownvalue.StringExact("telescope:prune"),
								"ttl":     knownvalue.StringExact("10m"),
								"max_ttl": knownvalue.StringExact("1h"),
							}),
						})),
					},
				},
				{
					PreConfig: func() {
						// No ttl: the claim gets the declared one.
						_, err := ts.svc.Claim(context.Background(), leasecore.ClaimParams{Task: "telescope:prune", Owner: "worker-1"})
						if err != nil {
							t.Fatalf("claim outside Terraform: %v", err)
						}
					},
					Config: config,
					ConfigStateChecks: []statecheck.StateCheck{
						statecheck.ExpectKnownValue(lease, tfjsonpath.New("held"), knownvalue.Bool(true)),
						statecheck.ExpectKnownValue(lease, tfjsonpath.New("owner"), knownvalue.StringExact("worker-1")),
						statecheck.ExpectKnownValue(lease, tfjsonpath.New("token"), knownvalue.Int64Exact(1)),
						statecheck.ExpectKnownValue(lease, tfjsonpath.New("expires_at"), knownvalue.NotNull()),
					},
				},
			},
		})
	})
}
