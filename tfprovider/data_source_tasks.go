package tfprovider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"

	"github.com/leasehold/leasehold/leasecore"
)

var _ datasource.DataSourceWithConfigure = (*tasksDataSource)(nil)

type tasksDataSource struct{ svc *leasecore.Service }

func newTasksDataSource() datasource.DataSource { return &tasksDataSource{} }

type tasksModel struct {
	Tasks []taskModel `tfsdk:"tasks"`
}

func (d *tasksDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_tasks"
}

func (d *tasksDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Every task declared in the store, whoever declared it, ordered by name.",
		Attributes: map[string]schema.Attribute{
			"tasks": schema.ListNestedAttribute{
				MarkdownDescription: "The declarations, ordered by name.",
				Computed:            true,
				NestedObject: schema.NestedAttributeObject{
					Attributes: map[string]schema.Attribute{
						"name": schema.StringAttribute{
							MarkdownDescription: "The task's name.",
							Computed:            true,
						},
						"ttl": schema.StringAttribute{
							MarkdownDescription: "The ttl of a claim that gives none, as a Go duration.",
							CustomType:          durationType{},
							Computed:            true,
						},
						"max_ttl": schema.StringAttribute{
							MarkdownDescription: "The longest ttl a claim or renewal may ask for, as a Go duration; null when unbounded.",
							CustomType:          durationType{},
							Computed:            true,
						},
						"min_hold": schema.StringAttribute{
							MarkdownDescription: "The minimum hold of a claim that asks for none, as a Go duration; null when none.",
							CustomType:          durationType{},
							Computed:            true,
						},
						"description": schema.StringAttribute{
							MarkdownDescription: "Free text for people.",
							Computed:            true,
						},
						"retention_policy": schema.StringAttribute{
							MarkdownDescription: "The name of the task's retention policy.",
							Computed:            true,
						},
						"created_at": schema.StringAttribute{
							MarkdownDescription: "When the task was declared (RFC 3339).",
							CustomType:          timetypes.RFC3339Type{},
							Computed:            true,
						},
						"updated_at": schema.StringAttribute{
							MarkdownDescription: "When the declaration last changed (RFC 3339).",
							CustomType:          timetypes.RFC3339Type{},
							Computed:            true,
						},
						"managed_by": schema.StringAttribute{
							MarkdownDescription: "Who manages the declaration: `terraform` (a `leasehold_task` resource) or `operator` (`leasehold tasks declare`, the HTTP API).",
							Computed:            true,
						},
					},
				},
			},
		},
	}
}

func (d *tasksDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.svc = service(req.ProviderData, &resp.Diagnostics)
}

func (d *tasksDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	if notConfigured(d.svc, &resp.Diagnostics) {
		return
	}
	// Every declaration, read in pages so that no one query is unbounded.
	var decls []leasecore.TaskDecl
	for after := ""; ; {
		page, next, err := d.svc.ListTasks(ctx, leasecore.ListParams{After: after, Limit: leasecore.MaxListLimit})
		if err != nil {
			storeError(&resp.Diagnostics, "list tasks", err)
			return
		}
		decls = append(decls, page...)
		if next == "" {
			break
		}
		after = next
	}
	state := tasksModel{Tasks: make([]taskModel, 0, len(decls))}
	for i := range decls {
		// Go's spelling, whoever declared the task and however they
		// spelled it, so that readers of the list compare like with like.
		decls[i].TTLSpelling, decls[i].MaxTTLSpelling, decls[i].MinHoldSpelling = "", "", ""
		state.Tasks = append(state.Tasks, taskState(&decls[i]))
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}
