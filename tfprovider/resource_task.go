package tfprovider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/leasehold/leasehold/leasecore"
)

var (
	_ resource.ResourceWithConfigure      = (*taskResource)(nil)
	_ resource.ResourceWithImportState    = (*taskResource)(nil)
	_ resource.ResourceWithValidateConfig = (*taskResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*taskResource)(nil)
)

type taskResource struct {
	svc  *leasecore.Service
	data *configured // nil until the provider is configured
}

func newTaskResource() resource.Resource { return &taskResource{} }

type taskModel struct {
	Name            types.String      `tfsdk:"name"`
	TTL             duration          `tfsdk:"ttl"`
	MaxTTL          duration          `tfsdk:"max_ttl"`
	MinHold         duration          `tfsdk:"min_hold"`
	Description     types.String      `tfsdk:"description"`
	RetentionPolicy types.String      `tfsdk:"retention_policy"`
	CreatedAt       timetypes.RFC3339 `tfsdk:"created_at"`
	UpdatedAt       timetypes.RFC3339 `tfsdk:"updated_at"`
	ManagedBy       types.String      `tfsdk:"managed_by"`
}

func (r *taskResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_task"
}

func (r *taskResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Version: taskSchemaVersion,
		MarkdownDescription: "Declares a task: the ttl a claim of it gets when it asks for none, the longest ttl " +
			"a claim or renewal may ask for, and the retention policy of its lease history. Sidecars apply " +
			"declarations to claims within a few seconds of a change; with `--require-declared` they refuse " +
			"claims of tasks that are not declared. Deleting the declaration leaves the task's lease and history alone.",
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("The task's name, as claims give it: 1 to %d characters of "+
					"`A-Z a-z 0-9 . _ : / @ -`, with no empty, `.` or `..` segment between slashes. Changing it replaces the declaration. "+
					"A name starting `leasehold:` is one of leasehold's own tasks (such as the pruner's lease `leasehold:prune`): "+
					"it may be declared to choose its history's retention policy, but its `ttl` and `max_ttl` have no effect (the plan warns).", leasecore.MaxTaskLen),
				Required:      true,
				Validators:    []validator.String{taskNameRule, reservedTaskNote{}},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"ttl": schema.StringAttribute{
				MarkdownDescription: "The ttl of a claim that gives none, as a Go duration (`90s`, `10m`, `1h30m`): " +
					"whole milliseconds, from `100ms` to `24h`. At most `max_ttl` when that is set. The store keeps the spelling, " +
					"so that an import gives it back (`90s`, not `1m30s`).",
				CustomType: durationType{},
				Required:   true,
				Validators: []validator.String{ttlRule},
			},
			"max_ttl": schema.StringAttribute{
				MarkdownDescription: "The longest ttl a claim or renewal of the task may ask for, as a Go duration: " +
					"whole milliseconds, from `100ms` to `24h`. Unset, the only bound is leasehold's own (`24h`).",
				CustomType: durationType{},
				Optional:   true,
				Validators: []validator.String{ttlRule},
			},
			"min_hold": schema.StringAttribute{
				MarkdownDescription: "The minimum hold of a claim of the task that asks for none, as a Go duration: whole milliseconds, " +
					"from `1ms` to `744h`. A claim with a minimum hold keeps the task from every claimant until that long after " +
					"its acquisition, even once released: a job run once per period (an hourly report fired by every replica's " +
					"scheduler) declares one, so that the replicas firing after the one that ran are refused. Unset, none.",
				CustomType: durationType{},
				Optional:   true,
				Validators: []validator.String{minHoldRule},
			},
			"description": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("Free text for people, at most %d bytes. Defaults to empty.", leasecore.MaxDescriptionLen),
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(""),
				Validators:          []validator.String{descriptionRule{}},
			},
			"retention_policy": schema.StringAttribute{
				MarkdownDescription: "The name of the retention policy that says how much of the task's lease history " +
					"the pruner keeps. Defaults to `" + leasecore.DefaultPolicy + "`, the policy every store has. " +
					"The policy must exist: refer to a `leasehold_retention_policy` resource's `name` so that it is created first " +
					"(and give that resource `lifecycle { create_before_destroy = true }`, so that renaming the policy moves the task before the old policy is deleted).",
				Optional:   true,
				Computed:   true,
				Default:    stringdefault.StaticString(leasecore.DefaultPolicy),
				Validators: []validator.String{policyNameRule},
			},
			"created_at": schema.StringAttribute{
				MarkdownDescription: "When the task was declared (RFC 3339, the store's clock).",
				CustomType:          timetypes.RFC3339Type{},
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"managed_by": schema.StringAttribute{
				MarkdownDescription: "Who manages the declaration in the store: `terraform` once this resource has written it. An operator may declare tasks " +
					"outside Terraform (`leasehold tasks declare`, `PUT /v1/tasks/{task}`), and the store refuses operators' changes of what Terraform manages. " +
					"An imported declaration that an operator declared reads `operator`, and the next apply takes it over (plans `operator` -> `terraform`).",
				Computed: true,
				// The plan always says terraform: a state that reads
				// operator (an import of an operator's declaration) plans an
				// update, and the update's write makes it Terraform's.
				Default: stringdefault.StaticString(string(leasecore.ManagedByTerraform)),
			},
			"updated_at": schema.StringAttribute{
				MarkdownDescription: "When the declaration last changed (RFC 3339, the store's clock).",
				CustomType:          timetypes.RFC3339Type{},
				Computed:            true,
			},
		},
	}
}

// asTerraform is who the provider writes as: the declarations and policies it
// writes are Terraform's to change and remove (leasecore.Writer.May).
var asTerraform = leasecore.Writer{By: leasecore.ManagedByTerraform}

func (r *taskResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = providerData(req.ProviderData, &resp.Diagnostics)
	if r.data != nil {
		r.svc = r.data.svc
	}
}

// ModifyPlan refuses, at plan time, a retention_policy that names no
// policy: one the store does not hold and this plan does not create. It
// needs the store, which ValidateConfig cannot read (the provider is not
// configured yet when a configuration is validated), so it runs once the
// provider is configured; before that, or when the name is not known yet,
// the apply checks it.
//
// A policy created in the same apply passes when the task refers to it
// (retention_policy = leasehold_retention_policy.audit.name): Terraform
// plans and creates the policy first, and the policy's ModifyPlan has
// noted its name. A task that names such a policy by a literal has no
// order with it, and is refused: the error says to refer to the policy.
func (r *taskResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if r.data == nil || req.Plan.Raw.IsNull() {
		return // not configured yet, or a destroy
	}
	var policy types.String
	if diags := req.Plan.GetAttribute(ctx, path.Root("retention_policy"), &policy); diags.HasError() || policy.IsNull() || policy.IsUnknown() {
		return
	}
	name := policy.ValueString()
	if leasecore.ValidatePolicyName("Name", name) != nil || r.data.policyPlanned(name) {
		return // a bad name is the validator's to report
	}
	got, err := r.svc.GetPolicy(ctx, name)
	if err != nil {
		resp.Diagnostics.AddAttributeWarning(path.Root("retention_policy"), "Cannot check retention_policy",
			fmt.Sprintf("Could not read retention policy %q from the store to check that it exists; the apply will: %s", name, errorText(err)))
		return
	}
	if got == nil {
		resp.Diagnostics.AddAttributeError(path.Root("retention_policy"), "Invalid retention_policy",
			fmt.Sprintf("retention policy %q does not exist: the store has none of that name, and this configuration creates none "+
				"that this task refers to. Declare it with a leasehold_retention_policy resource and set "+
				"retention_policy = leasehold_retention_policy.NAME.name, so that Terraform creates the policy before the task.", name))
	}
}

// ValidateConfig checks ttl ≤ max_ttl when both are known. Values that are
// no duration at all are reported by the attributes' own validation, so the
// errors of reading them here are dropped.
func (r *taskResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var ttl, maxTTL duration
	if diags := req.Config.GetAttribute(ctx, path.Root("ttl"), &ttl); diags.HasError() {
		return
	}
	if diags := req.Config.GetAttribute(ctx, path.Root("max_ttl"), &maxTTL); diags.HasError() {
		return
	}
	if ttl.IsNull() || ttl.IsUnknown() || maxTTL.IsNull() || maxTTL.IsUnknown() {
		return
	}
	t, err1 := time.ParseDuration(ttl.ValueString())
	m, err2 := time.ParseDuration(maxTTL.ValueString())
	if err1 != nil || err2 != nil {
		return
	}
	if t > m {
		resp.Diagnostics.AddAttributeError(path.Root("ttl"), "Invalid ttl",
			fmt.Sprintf("ttl must be at most max_ttl (%s); %s is not.", formatDuration(m), formatDuration(t)))
	}
}

func (r *taskResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan taskModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || notConfigured(r.svc, &resp.Diagnostics) {
		return
	}
	decl := plan.decl(&resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	got, err := r.svc.CreateTask(ctx, decl, asTerraform)
	if err != nil {
		storeError(&resp.Diagnostics, fmt.Sprintf("declare task %q", decl.Name), err)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, taskState(got))...)
}

func (r *taskResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state taskModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || notConfigured(r.svc, &resp.Diagnostics) {
		return
	}
	got, err := r.svc.GetTask(ctx, state.Name.ValueString())
	if err != nil {
		storeError(&resp.Diagnostics, fmt.Sprintf("read task %q", state.Name.ValueString()), err)
		return
	}
	if got == nil {
		// Deleted outside Terraform: forget it, so the plan creates it again.
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, taskState(got))...)
}

func (r *taskResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan taskModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || notConfigured(r.svc, &resp.Diagnostics) {
		return
	}
	// A change of spelling alone (1m30s, as imported from a store that
	// kept none, to 90s) is written too: the store keeps the spelling.
	decl := plan.decl(&resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	got, err := r.svc.UpdateTask(ctx, decl, asTerraform)
	if err != nil {
		storeError(&resp.Diagnostics, fmt.Sprintf("update task %q", decl.Name), err)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, taskState(got))...)
}

func (r *taskResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state taskModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || notConfigured(r.svc, &resp.Diagnostics) {
		return
	}
	// Already gone is as good as deleted.
	if _, err := r.svc.DeleteTask(ctx, state.Name.ValueString(), asTerraform); err != nil {
		storeError(&resp.Diagnostics, fmt.Sprintf("delete task %q", state.Name.ValueString()), err)
	}
}

// ImportState imports a declaration by the task's name.
func (r *taskResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if err := leasecore.ValidateTask(req.ID); err != nil {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("The import ID is a task's name, %q is not one: %s", req.ID, errorText(err)))
		return
	}
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
}

// decl is the declaration a plan asks for, with the durations' spellings.
func (m taskModel) decl(diags *diag.Diagnostics) leasecore.TaskDecl {
	d := leasecore.TaskDecl{
		Name:            m.Name.ValueString(),
		Description:     m.Description.ValueString(),
		RetentionPolicy: m.RetentionPolicy.ValueString(),
		TTLSpelling:     spelling(m.TTL),
	}
	var ds diag.Diagnostics
	d.TTL, ds = m.TTL.ValueGoDuration()
	diags.Append(ds...)
	if !m.MaxTTL.IsNull() {
		d.MaxTTL, ds = m.MaxTTL.ValueGoDuration()
		diags.Append(ds...)
		d.MaxTTLSpelling = spelling(m.MaxTTL)
	}
	if !m.MinHold.IsNull() {
		d.MinHold, ds = m.MinHold.ValueGoDuration()
		diags.Append(ds...)
		d.MinHoldSpelling = spelling(m.MinHold)
	}
	return d
}

// taskState is a stored declaration as state. The durations are spelled as
// the store kept them (as this provider wrote them), so that an import
// gives the configuration's text back; a declaration written without
// spellings (by the HTTP API, say) has Go's, which the framework's
// semantic equality keeps from showing as a change after a refresh.
func taskState(d *leasecore.TaskDecl) taskModel {
	return taskModel{
		Name:            types.StringValue(d.Name),
		TTL:             spelledDuration(d.TTL, d.TTLSpelling),
		MaxTTL:          optionalSpelledDuration(d.MaxTTL, d.MaxTTLSpelling),
		MinHold:         optionalSpelledDuration(d.MinHold, d.MinHoldSpelling),
		Description:     types.StringValue(d.Description),
		RetentionPolicy: types.StringValue(d.RetentionPolicy),
		CreatedAt:       timestampValue(d.CreatedAt),
		UpdatedAt:       timestampValue(d.UpdatedAt),
		ManagedBy:       types.StringValue(string(d.ManagedBy)),
	}
}
