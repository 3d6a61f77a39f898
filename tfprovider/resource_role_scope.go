package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/leasehold/leasehold/leasecore"
)

var (
	_ resource.ResourceWithConfigure   = (*roleScopeResource)(nil)
	_ resource.ResourceWithImportState = (*roleScopeResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*roleScopeResource)(nil)
)

// roleScopeResource is leasehold_role_scope: a PostgreSQL role limited to
// task prefixes by row-level security (leasecore.RoleScope).
type roleScopeResource struct{ data *configured }

func newRoleScopeResource() resource.Resource { return &roleScopeResource{} }

type roleScopeModel struct {
	Role      types.String      `tfsdk:"role"`
	Prefixes  types.Set         `tfsdk:"prefixes"`
	CreatedAt timetypes.RFC3339 `tfsdk:"created_at"`
	UpdatedAt timetypes.RFC3339 `tfsdk:"updated_at"`
}

// Validators of the role scope's attributes, from leasecore's rules.
var (
	roleNameRule    = nameRule{what: "role name", validate: leasecore.ValidateRoleName}
	scopePrefixRule = nameRule{what: "scope prefix", validate: leasecore.ValidateScopePrefix}
)

func (r *roleScopeResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_role_scope"
}

func (r *roleScopeResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Version: roleScopeSchemaVersion,
		MarkdownDescription: "Limits a PostgreSQL role to the tasks whose names start with one of `prefixes`, with row-level " +
			"security in the store itself: a sidecar (or any program) connecting as that role can neither claim, renew, " +
			"release nor read another team's leases and history, even with SQL of its own. leasehold's own tasks " +
			"(`leasehold:…`, the prune leases) stay usable by every role. A role without a scope is not limited, so " +
			"scopes are opt-in; deleting one lifts the limit. Sidecars apply a change within a few seconds (the database " +
			"at once). Needs a PostgreSQL store (`postgres://`; SQLite has no roles), and the provider must run as the role " +
			"that owns leasehold's tables, the only one that may write scopes. The role must exist, and must be one that " +
			"row-level security binds: not a superuser, not `BYPASSRLS`, not the owner (nor a member of it). " +
			"See docs/store-roles.md in the leasehold repository.",
		Attributes: map[string]schema.Attribute{
			"role": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("The PostgreSQL role's name as stored (lower case for a role created "+
					"without quotes): 1 to %d characters of `A-Z a-z 0-9 _`, not starting with a digit. "+
					"Changing it replaces the scope.", leasecore.MaxRoleNameLen),
				Required:      true,
				Validators:    []validator.String{roleNameRule},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"prefixes": schema.SetAttribute{
				MarkdownDescription: fmt.Sprintf("The task name prefixes the role may act on: 1 to %d, each 1 to %d "+
					"characters of `A-Z a-z 0-9 . _ : / @ -`, not under `leasehold:` (those are in every scope). A prefix "+
					"matches byte by byte: `team-a` also covers `team-ab/x`, so end a team's prefix with a separator "+
					"(`team-a/`).", leasecore.MaxScopePrefixes, leasecore.MaxTaskLen),
				ElementType: types.StringType,
				Required:    true,
				Validators: []validator.Set{
					setvalidator.SizeBetween(1, leasecore.MaxScopePrefixes),
					setvalidator.ValueStringsAre(scopePrefixRule),
				},
			},
			"created_at": schema.StringAttribute{
				MarkdownDescription: "When the scope was created (RFC 3339, the store's clock).",
				CustomType:          timetypes.RFC3339Type{},
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"updated_at": schema.StringAttribute{
				MarkdownDescription: "When the scope's prefixes last changed (RFC 3339, the store's clock).",
				CustomType:          timetypes.RFC3339Type{},
				Computed:            true,
			},
		},
	}
}

func (r *roleScopeResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = providerData(req.ProviderData, &resp.Diagnostics)
}

// ModifyPlan refuses, at plan time, a scope on a store without roles.
// Destroying one is left alone: there is nothing to refuse.
func (r *roleScopeResource) ModifyPlan(_ context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if r.data == nil || req.Plan.Raw.IsNull() || r.data.storeKind == "postgres" {
		return
	}
	resp.Diagnostics.AddAttributeError(path.Root("role"), "Role scopes need a PostgreSQL store",
		fmt.Sprintf("leasehold_role_scope limits a PostgreSQL role with row-level security; this provider's store is %s, "+
			"which has no database roles. Point the provider at the postgres:// store the sidecars share, or remove this resource.", storeKindName(r.data.storeKind)))
}

// storeKindName is a store kind as a diagnostic names it.
func storeKindName(kind string) string {
	switch kind {
	case "sqlite":
		return "SQLite (sqlite:PATH)"
	case "":
		return "not a leasehold store kind"
	default:
		return kind
	}
}

func (r *roleScopeResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.put(ctx, req.Plan, &resp.State, &resp.Diagnostics, "limit role %q to its prefixes", r.svc().CreateRoleScope)
}

// put writes the planned scope with write (create or update) and keeps
// what the store answers as the state; what names the act in errors, with
// the role's name for its %q.
func (r *roleScopeResource) put(ctx context.Context, plan tfsdk.Plan, state *tfsdk.State, diags *diag.Diagnostics, what string,
	write func(context.Context, leasecore.RoleScope) (*leasecore.RoleScope, error)) {
	var m roleScopeModel
	diags.Append(plan.Get(ctx, &m)...)
	if diags.HasError() || notConfigured(r.svc(), diags) {
		return
	}
	scope := m.scope(ctx, diags)
	if diags.HasError() {
		return
	}
	got, err := write(ctx, scope)
	if err != nil {
		roleScopeError(diags, fmt.Sprintf(what, scope.Role), err)
		return
	}
	diags.Append(state.Set(ctx, roleScopeState(ctx, got, diags))...)
}

func (r *roleScopeResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state roleScopeModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || notConfigured(r.svc(), &resp.Diagnostics) {
		return
	}
	got, err := r.svc().GetRoleScope(ctx, state.Role.ValueString())
	if err != nil {
		roleScopeError(&resp.Diagnostics, fmt.Sprintf("read the scope of role %q", state.Role.ValueString()), err)
		return
	}
	if got == nil {
		// Deleted outside Terraform (the role is unrestricted now):
		// forget it, so the plan creates it again.
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, roleScopeState(ctx, got, &resp.Diagnostics))...)
}

func (r *roleScopeResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.put(ctx, req.Plan, &resp.State, &resp.Diagnostics, "change the prefixes of role %q", r.svc().UpdateRoleScope)
}

// Delete removes the scope, which lifts the role's limit.
func (r *roleScopeResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state roleScopeModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || notConfigured(r.svc(), &resp.Diagnostics) {
		return
	}
	// Already gone is as good as deleted.
	if _, err := r.svc().DeleteRoleScope(ctx, state.Role.ValueString()); err != nil {
		roleScopeError(&resp.Diagnostics, fmt.Sprintf("delete the scope of role %q", state.Role.ValueString()), err)
	}
}

// ImportState imports a scope by its role's name.
func (r *roleScopeResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if err := leasecore.ValidateRoleName(req.ID); err != nil {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("The import ID is a PostgreSQL role's name, %q is not one: %s", req.ID, errorText(err)))
		return
	}
	resource.ImportStatePassthroughID(ctx, path.Root("role"), req, resp)
}

// svc is the Service, or nil before the provider is configured.
func (r *roleScopeResource) svc() *leasecore.Service {
	if r.data == nil {
		return nil
	}
	return r.data.svc
}

// roleScopeError is storeError, with what to do about the refusals only
// a role scope meets.
func roleScopeError(diags *diag.Diagnostics, what string, err error) {
	var nf *leasecore.NotFoundError
	switch {
	case errors.As(err, &nf) && nf.Kind == "database role":
		diags.AddError("Cannot "+what, errorText(err)+". Create the role first (CREATE ROLE …, or a resource of a PostgreSQL "+
			"provider that this one refers to, so that Terraform creates it first); a scope of a misspelt role would leave the intended role unrestricted.")
	case errors.Is(err, leasecore.ErrNoRoles):
		diags.AddError("Cannot "+what, err.Error())
	default:
		storeError(diags, what, err)
	}
}

// scope is the role scope a plan asks for.
func (m roleScopeModel) scope(ctx context.Context, diags *diag.Diagnostics) leasecore.RoleScope {
	var prefixes []string
	diags.Append(m.Prefixes.ElementsAs(ctx, &prefixes, false)...)
	return leasecore.RoleScope{Role: m.Role.ValueString(), Prefixes: prefixes}
}

// roleScopeState is a stored scope as state.
func roleScopeState(ctx context.Context, r *leasecore.RoleScope, diags *diag.Diagnostics) roleScopeModel {
	prefixes := slices.Clone(r.Prefixes)
	slices.Sort(prefixes)
	set, ds := types.SetValueFrom(ctx, types.StringType, prefixes)
	diags.Append(ds...)
	return roleScopeModel{
		Role:      types.StringValue(r.Role),
		Prefixes:  set,
		CreatedAt: timestampValue(r.CreatedAt),
		UpdatedAt: timestampValue(r.UpdatedAt),
	}
}
