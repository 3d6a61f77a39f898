package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	tfaddr "github.com/hashicorp/terraform-registry-address"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// EnvStore is the environment variable the provider reads the store URL
// from when its store attribute is not set, as the sidecar does.
const EnvStore = "LEASEHOLD_STORE"

// Address is the provider's full address: Terraform's default registry
// host, namespace leasehold, type leasehold. Configurations write the short
// form, source = "leasehold/leasehold"; a filesystem mirror lays the
// provider out under the full one (see `make mirror`).
var Address = tfaddr.NewProvider(tfaddr.DefaultProviderRegistryHost, "leasehold", "leasehold").String()

// opener opens the store a URL names; storeurl.Open outside tests.
type opener func(ctx context.Context, url storeurl.URL) (leasecore.Store, error)

var _ provider.Provider = (*leaseholdProvider)(nil)

type leaseholdProvider struct {
	version string
	open    opener
	getenv  func(string) string
}

// New returns a constructor of the provider, for providerserver.Serve.
// version is reported to Terraform; "dev" for local builds.
func New(version string) func() provider.Provider {
	return newProvider(version, storeurl.Open, os.Getenv)
}

func newProvider(version string, open opener, getenv func(string) string) func() provider.Provider {
	return func() provider.Provider {
		return &leaseholdProvider{version: version, open: open, getenv: getenv}
	}
}

type providerModel struct {
	Store types.String `tfsdk:"store"`
}

func (p *leaseholdProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "leasehold"
	resp.Version = p.version
}

func (p *leaseholdProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Declares [leasehold](https://github.com/leasehold/leasehold) tasks and retention policies, " +
			"limits PostgreSQL roles to task prefixes, and reads who holds a lease. The provider talks to the lease store " +
			"directly (the same database the sidecars use), creating or upgrading its schema as `leasehold migrate` does: " +
			"on PostgreSQL, give it the role that owns leasehold's tables, not a sidecar's runtime role (docs/store-roles.md in the leasehold repository).",
		Attributes: map[string]schema.Attribute{
			"store": schema.StringAttribute{
				MarkdownDescription: "The lease store: `sqlite:PATH` or `postgres://USER@HOST:PORT/DB`, as given to " +
					"`leasehold serve --store`. Falls back to the `" + EnvStore + "` environment variable. " +
					"Sensitive, since a PostgreSQL URL may carry a password.",
				Optional:  true,
				Sensitive: true,
			},
		},
	}
}

func (p *leaseholdProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if cfg.Store.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("store"), "Unknown store",
			"The provider cannot open a store whose URL is only known after apply. Set store to a value known at plan time, or use the "+EnvStore+" environment variable.")
		return
	}
	raw := cfg.Store.ValueString()
	if raw == "" {
		raw = p.getenv(EnvStore)
	}
	if raw == "" {
		resp.Diagnostics.AddAttributeError(path.Root("store"), "Missing store",
			"Set store in the provider block, or the "+EnvStore+" environment variable, to sqlite:PATH or postgres://USER@HOST:PORT/DB.")
		return
	}
	url, err := storeurl.Parse(raw)
	var store leasecore.Store
	if err == nil {
		store, err = p.open(ctx, url)
	}
	if err != nil {
		// Pattern masking stays on the error text as the last net: a
		// driver's error may quote a connection string (storeurl's doc).
		detail := storeurl.Redact(err.Error())
		if !url.IsZero() && !strings.Contains(detail, url.String()) {
			detail = fmt.Sprintf("open %s: %s", url, detail)
		}
		summary := "Cannot open store"
		if errors.Is(err, leasecore.ErrUnavailable) {
			summary = "Cannot reach store"
		}
		configError(&resp.Diagnostics, cfg.Store.ValueString() == "", summary, detail)
		return
	}
	svc := leasecore.New(store)
	if err := svc.Migrate(ctx); err != nil {
		summary, detail := "Cannot migrate store", fmt.Sprintf("Create or upgrade the schema of %s: %s", url, storeurl.Redact(err.Error()))
		if errors.Is(err, leasecore.ErrUnavailable) {
			summary, detail = "Cannot reach store", fmt.Sprintf("The store %s does not answer: %s", url, storeurl.Redact(err.Error()))
		}
		configError(&resp.Diagnostics, cfg.Store.ValueString() == "", summary, detail)
		return
	}
	// The store stays open for the life of the provider process: the
	// framework gives a provider no hook to close it, and Terraform ends the
	// process when the command is done.
	data := &configured{svc: svc, storeKind: storeurl.Kind(store), plannedPolicies: map[string]bool{}}
	resp.ResourceData = data
	resp.DataSourceData = data
}

// configured is what Configure hands the resources and data sources: the
// Service over the store, and the store's kind (sqlite or postgres), for
// the resources that need one kind.
type configured struct {
	svc       *leasecore.Service
	storeKind string

	mu sync.Mutex
	// plannedPolicies names the retention policies this run's plan
	// creates or keeps (leasehold_retention_policy's ModifyPlan records
	// them), for the tasks' plan-time check of their retention_policy.
	plannedPolicies map[string]bool
}

// planPolicy notes that the plan creates or keeps the policy name.
func (c *configured) planPolicy(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.plannedPolicies[name] = true
}

// policyPlanned reports whether the plan creates or keeps the policy name.
func (c *configured) policyPlanned(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.plannedPolicies[name]
}

// configError reports a store that cannot be used: on the store attribute,
// or, when the URL came from the environment, with no attribute to point
// at (Terraform would show an empty provider block).
func configError(diags *diag.Diagnostics, fromEnv bool, summary, detail string) {
	if fromEnv {
		diags.AddError(summary, detail+" (the store URL came from "+EnvStore+")")
		return
	}
	diags.AddAttributeError(path.Root("store"), summary, detail)
}

func (p *leaseholdProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newTaskResource, newPolicyResource, newRoleScopeResource}
}

func (p *leaseholdProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newLeaseDataSource, newTasksDataSource}
}

// service takes the *leasecore.Service that Configure handed a resource or
// data source. data is nil before the provider is configured (Terraform
// validates configurations first), which is not an error.
func service(data any, diags *diag.Diagnostics) *leasecore.Service {
	if c := providerData(data, diags); c != nil {
		return c.svc
	}
	return nil
}

// providerData takes what Configure handed a resource or data source; nil
// before the provider is configured.
func providerData(data any, diags *diag.Diagnostics) *configured {
	if data == nil {
		return nil
	}
	c, ok := data.(*configured)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("Expected *tfprovider.configured, got %T. This is a bug in the provider.", data))
		return nil
	}
	return c
}

// notConfigured reports a call that needs the store before the provider
// was configured, and says whether it did.
func notConfigured(svc *leasecore.Service, diags *diag.Diagnostics) bool {
	if svc != nil {
		return false
	}
	diags.AddError("Provider not configured", "The leasehold provider has no store yet. This is a bug in the provider or in Terraform.")
	return true
}

// storeError turns an error of the Service into a diagnostic: what failed,
// and the Service's words for why, which name the field, the policy's
// tasks or the store fault.
func storeError(diags *diag.Diagnostics, what string, err error) {
	detail := errorText(err)
	switch {
	case errors.Is(err, leasecore.ErrUnavailable):
		detail = "The lease store did not answer: " + detail
	case errors.Is(err, leasecore.ErrExists):
		detail += ". To manage it with Terraform, import it (terraform import, or an import block) instead of creating it."
	}
	diags.AddError("Cannot "+what, detail)
}
