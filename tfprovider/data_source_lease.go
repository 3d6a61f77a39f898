package tfprovider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/leasehold/leasehold/leasecore"
)

var _ datasource.DataSourceWithConfigure = (*leaseDataSource)(nil)

type leaseDataSource struct{ svc *leasecore.Service }

func newLeaseDataSource() datasource.DataSource { return &leaseDataSource{} }

type leaseModel struct {
	Task      types.String      `tfsdk:"task"`
	Held      types.Bool        `tfsdk:"held"`
	Owner     types.String      `tfsdk:"owner"`
	Token     types.Int64       `tfsdk:"token"`
	ExpiresAt timetypes.RFC3339 `tfsdk:"expires_at"`
}

func (d *leaseDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_lease"
}

func (d *leaseDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Who holds a task's lease now, as the store answers when Terraform reads it. " +
			"A lease that was released or has expired is not held.",
		Attributes: map[string]schema.Attribute{
			"task": schema.StringAttribute{
				MarkdownDescription: "The task's name. It need not be declared.",
				Required:            true,
				Validators:          []validator.String{taskNameRule},
			},
			"held": schema.BoolAttribute{
				MarkdownDescription: "Whether the task has a live lease.",
				Computed:            true,
			},
			"owner": schema.StringAttribute{
				MarkdownDescription: "The owner of the live lease; null when not held.",
				Computed:            true,
			},
			"token": schema.Int64Attribute{
				MarkdownDescription: "The live lease's fencing token; null when not held.",
				Computed:            true,
			},
			"expires_at": schema.StringAttribute{
				MarkdownDescription: "When the live lease expires unless renewed (RFC 3339, the store's clock); null when not held.",
				CustomType:          timetypes.RFC3339Type{},
				Computed:            true,
			},
		},
	}
}

func (d *leaseDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.svc = service(req.ProviderData, &resp.Diagnostics)
}

func (d *leaseDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var cfg leaseModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() || notConfigured(d.svc, &resp.Diagnostics) {
		return
	}
	lease, err := d.svc.Get(ctx, cfg.Task.ValueString())
	if err != nil {
		storeError(&resp.Diagnostics, fmt.Sprintf("read the lease of task %q", cfg.Task.ValueString()), err)
		return
	}
	state := leaseModel{
		Task:      cfg.Task,
		Held:      types.BoolValue(lease != nil),
		Owner:     types.StringNull(),
		Token:     types.Int64Null(),
		ExpiresAt: timetypes.NewRFC3339Null(),
	}
	if lease != nil {
		state.Owner = types.StringValue(lease.Owner)
		state.Token = types.Int64Value(lease.Token)
		state.ExpiresAt = timestampValue(lease.ExpiresAt)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}
