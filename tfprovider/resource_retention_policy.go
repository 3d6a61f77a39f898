package tfprovider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/leasehold/leasehold/leasecore"
)

var (
	_ resource.ResourceWithConfigure   = (*policyResource)(nil)
	_ resource.ResourceWithImportState = (*policyResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*policyResource)(nil)
)

type policyResource struct {
	svc  *leasecore.Service
	data *configured // nil until the provider is configured
}

func newPolicyResource() resource.Resource { return &policyResource{} }

type policyModel struct {
	Name      types.String      `tfsdk:"name"`
	KeepFor   duration          `tfsdk:"keep_for"`
	KeepLast  types.Int64       `tfsdk:"keep_last"`
	CreatedAt timetypes.RFC3339 `tfsdk:"created_at"`
	UpdatedAt timetypes.RFC3339 `tfsdk:"updated_at"`
	ManagedBy types.String      `tfsdk:"managed_by"`
}

func (r *policyResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_retention_policy"
}

func (r *policyResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Version: policySchemaVersion,
		MarkdownDescription: "A retention policy: how much lease history the pruner keeps for each task that names it. " +
			"An event is deleted when it is older than `keep_for` or not among the task's newest `keep_last` events. " +
			"Every store has a policy named `" + leasecore.DefaultPolicy + "` (keep_for `720h`, keep_last `1000`) for tasks that name none " +
			"and for undeclared tasks; import it to change it. It cannot be deleted, and neither can a policy that tasks name.",
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("The policy's name: 1 to %d characters of `A-Z a-z 0-9 . _ : / @ -`. "+
					"Changing it replaces the policy.", leasecore.MaxPolicyNameLen),
				Required:      true,
				Validators:    []validator.String{policyNameRule},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"keep_for": schema.StringAttribute{
				MarkdownDescription: "How long an event is kept, as a Go duration (`720h`, `168h`): whole seconds, " +
					"at most 100 years. `0s` sets no age limit.",
				CustomType: durationType{},
				Required:   true,
				Validators: []validator.String{keepForRule},
			},
			"keep_last": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("How many of a task's newest events are kept, 0 to %d. `0` sets no count limit; "+
					"unset, it defaults to `0`, so that a policy with only `keep_for` bounds history by age alone.", leasecore.MaxKeepLast),
				Optional: true,
				// Computed so that the default is in the plan and an
				// imported policy with no count limit plans nothing.
				Computed:   true,
				Default:    int64default.StaticInt64(0),
				Validators: []validator.Int64{int64validator.Between(0, leasecore.MaxKeepLast)},
			},
			"created_at": schema.StringAttribute{
				MarkdownDescription: "When the policy was created (RFC 3339, the store's clock).",
				CustomType:          timetypes.RFC3339Type{},
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"managed_by": schema.StringAttribute{
				MarkdownDescription: "Who manages the policy in the store: `terraform` once this resource has written it. An operator may declare policies " +
					"outside Terraform (`leasehold policies declare`, `PUT /v1/policies/{policy}`), and the store refuses operators' changes of what Terraform manages. " +
					"An imported policy that an operator declared reads `operator`, and the next apply takes it over (plans `operator` -> `terraform`).",
				Computed: true,
				// The plan always says terraform: a state that reads
				// operator (an import of an operator's policy) plans an
				// update, and the update's write makes it Terraform's.
				Default: stringdefault.StaticString(string(leasecore.ManagedByTerraform)),
			},
			"updated_at": schema.StringAttribute{
				MarkdownDescription: "When the policy last changed (RFC 3339, the store's clock).",
				CustomType:          timetypes.RFC3339Type{},
				Computed:            true,
			},
		},
	}
}

func (r *policyResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = providerData(req.ProviderData, &resp.Diagnostics)
	if r.data != nil {
		r.svc = r.data.svc
	}
}

// ModifyPlan changes nothing: it notes the name of a policy the plan
// creates or keeps, so that a leasehold_task planned after it (one that
// refers to it) may name it although the store does not hold it yet.
func (r *policyResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, _ *resource.ModifyPlanResponse) {
	if r.data == nil || req.Plan.Raw.IsNull() {
		return
	}
	var name types.String
	if diags := req.Plan.GetAttribute(ctx, path.Root("name"), &name); diags.HasError() || name.IsNull() || name.IsUnknown() {
		return
	}
	r.data.planPolicy(name.ValueString())
}

func (r *policyResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan policyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || notConfigured(r.svc, &resp.Diagnostics) {
		return
	}
	p, diags := plan.policy()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	got, err := r.svc.CreatePolicy(ctx, p, asTerraform)
	if err != nil {
		storeError(&resp.Diagnostics, fmt.Sprintf("create retention policy %q", p.Name), err)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, policyState(got))...)
}

func (r *policyResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state policyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || notConfigured(r.svc, &resp.Diagnostics) {
		return
	}
	got, err := r.svc.GetPolicy(ctx, state.Name.ValueString())
	if err != nil {
		storeError(&resp.Diagnostics, fmt.Sprintf("read retention policy %q", state.Name.ValueString()), err)
		return
	}
	if got == nil {
		// Deleted outside Terraform: forget it, so the plan creates it again.
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, policyState(got))...)
}

func (r *policyResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan policyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || notConfigured(r.svc, &resp.Diagnostics) {
		return
	}
	// A change of keep_for's spelling alone is written too: the store
	// keeps the spelling.
	p, diags := plan.policy()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	got, err := r.svc.UpdatePolicy(ctx, p, asTerraform)
	if err != nil {
		storeError(&resp.Diagnostics, fmt.Sprintf("update retention policy %q", p.Name), err)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, policyState(got))...)
}

// Delete deletes the policy. The store refuses to delete the default policy
// or one that tasks name; its error, naming those tasks, is the diagnostic,
// and the policy stays in state.
func (r *policyResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state policyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || notConfigured(r.svc, &resp.Diagnostics) {
		return
	}
	if _, err := r.svc.DeletePolicy(ctx, state.Name.ValueString(), asTerraform); err != nil {
		storeError(&resp.Diagnostics, fmt.Sprintf("delete retention policy %q", state.Name.ValueString()), err)
	}
}

// ImportState imports a policy by its name.
func (r *policyResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if err := leasecore.ValidatePolicyName("Name", req.ID); err != nil {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("The import ID is a retention policy's name, %q is not one: %s", req.ID, errorText(err)))
		return
	}
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
}

// policy is the policy a plan asks for.
func (m policyModel) policy() (leasecore.RetentionPolicy, diag.Diagnostics) {
	keepFor, diags := m.KeepFor.ValueGoDuration()
	return leasecore.RetentionPolicy{
		Name: m.Name.ValueString(), KeepFor: keepFor, KeepLast: m.KeepLast.ValueInt64(), KeepForSpelling: spelling(m.KeepFor),
	}, diags
}

// policyState is a stored policy as state, keep_for spelled as taskState
// spells a ttl.
func policyState(p *leasecore.RetentionPolicy) policyModel {
	return policyModel{
		Name:      types.StringValue(p.Name),
		KeepFor:   spelledDuration(p.KeepFor, p.KeepForSpelling),
		KeepLast:  types.Int64Value(p.KeepLast),
		CreatedAt: timestampValue(p.CreatedAt),
		UpdatedAt: timestampValue(p.UpdatedAt),
		ManagedBy: types.StringValue(string(p.ManagedBy)),
	}
}
