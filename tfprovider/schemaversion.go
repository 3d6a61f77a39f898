package tfprovider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/resource"
)

// Each resource's schema version, which Terraform stores with its state.
//
// A change to a resource's schema that existing state does not fit (an
// attribute added without a default, removed, renamed, or of another type)
// bumps its version and comes with a state upgrader from the version before
// it, in the resource's UpgradeState: its PriorSchema is the old schema,
// and its StateUpgrader reads the old state and writes the new. State
// written by every released provider then plans no change with the next
// (docs/compatibility.md). TestSchemaVersions holds each version's schema
// to testdata/schema_versions.json, so a schema changed without a bump
// fails; TestProviderUpgrade (e2e) applies with the latest release's
// provider and plans with this one.
const (
	taskSchemaVersion      = 0
	policySchemaVersion    = 0
	roleScopeSchemaVersion = 0
)

// noPriorVersions is the UpgradeState of a resource still at version 0:
// there is no earlier state to upgrade.
func noPriorVersions(context.Context) map[int64]resource.StateUpgrader {
	return map[int64]resource.StateUpgrader{}
}

func (r *taskResource) UpgradeState(ctx context.Context) map[int64]resource.StateUpgrader {
	return noPriorVersions(ctx)
}

func (r *policyResource) UpgradeState(ctx context.Context) map[int64]resource.StateUpgrader {
	return noPriorVersions(ctx)
}

func (r *roleScopeResource) UpgradeState(ctx context.Context) map[int64]resource.StateUpgrader {
	return noPriorVersions(ctx)
}

var (
	_ resource.ResourceWithUpgradeState = (*taskResource)(nil)
	_ resource.ResourceWithUpgradeState = (*policyResource)(nil)
	_ resource.ResourceWithUpgradeState = (*roleScopeResource)(nil)
)
