package tfprovider

import (
	"context"
	"maps"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
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
	// 1: min_hold (v0.2.0).
	taskSchemaVersion      = 1
	policySchemaVersion    = 0
	roleScopeSchemaVersion = 0
)

// noPriorVersions is the UpgradeState of a resource still at version 0:
// there is no earlier state to upgrade.
func noPriorVersions(context.Context) map[int64]resource.StateUpgrader {
	return map[int64]resource.StateUpgrader{}
}

// UpgradeState upgrades a task's state from version 0, which had no
// min_hold: the declaration it describes has none, so the attribute is null.
func (r *taskResource) UpgradeState(ctx context.Context) map[int64]resource.StateUpgrader {
	var current resource.SchemaResponse
	r.Schema(ctx, resource.SchemaRequest{}, &current)
	v0 := current.Schema
	v0.Version = 0
	v0.Attributes = maps.Clone(v0.Attributes)
	delete(v0.Attributes, "min_hold") // version 1's only change
	return map[int64]resource.StateUpgrader{
		0: {
			PriorSchema: &v0,
			StateUpgrader: func(ctx context.Context, req resource.UpgradeStateRequest, resp *resource.UpgradeStateResponse) {
				var old taskModelV0
				resp.Diagnostics.Append(req.State.Get(ctx, &old)...)
				if resp.Diagnostics.HasError() {
					return
				}
				resp.Diagnostics.Append(resp.State.Set(ctx, old.upgrade())...)
			},
		},
	}
}

// taskModelV0 is a task's state at version 0.
type taskModelV0 struct {
	Name            types.String      `tfsdk:"name"`
	TTL             duration          `tfsdk:"ttl"`
	MaxTTL          duration          `tfsdk:"max_ttl"`
	Description     types.String      `tfsdk:"description"`
	RetentionPolicy types.String      `tfsdk:"retention_policy"`
	CreatedAt       timetypes.RFC3339 `tfsdk:"created_at"`
	UpdatedAt       timetypes.RFC3339 `tfsdk:"updated_at"`
	ManagedBy       types.String      `tfsdk:"managed_by"`
}

// upgrade is the version 1 state of a version 0 one: no min_hold.
func (m taskModelV0) upgrade() taskModel {
	return taskModel{
		Name: m.Name, TTL: m.TTL, MaxTTL: m.MaxTTL, MinHold: nullDuration(),
		Description: m.Description, RetentionPolicy: m.RetentionPolicy,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, ManagedBy: m.ManagedBy,
	}
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
