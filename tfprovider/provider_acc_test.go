package tfprovider

import (
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/leasehold/leasehold/leasecore"
)

const oneTask = `
resource "leasehold_task" "t" {
  name = "env"
  ttl  = "1s"
}`

// TestProviderStoreFromEnv reads the store from LEASEHOLD_STORE when the
// provider block names none.
func TestProviderStoreFromEnv(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testStore) {
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: ts.factories(map[string]string{EnvStore: ts.url}),
			CheckDestroy:             ts.checkDestroyed,
			Steps: []resource.TestStep{{
				Config: oneTask,
				Check:  ts.checkTask(leasecore.TaskDecl{Name: "env", TTL: time.Second, RetentionPolicy: leasecore.DefaultPolicy}),
			}},
		})
	})
}

// TestProviderStoreErrors: no store anywhere, or one that is no store URL.
func TestProviderStoreErrors(t *testing.T) {
	t.Parallel()
	requireTerraform(t)
	ts := newTestStore(t, "sqlite")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: ts.factories(nil),
		Steps: []resource.TestStep{
			{
				Config:      oneTask,
				PlanOnly:    true,
				ExpectError: diagnostic("Missing store", "Set store in the provider block, or the LEASEHOLD_STORE environment variable"),
			},
			{
				Config: `
provider "leasehold" {
  store = "mysql://root:hunter2@127.0.0.1/x"
}
` + oneTask,
				PlanOnly:    true,
				ExpectError: diagnostic("Cannot open store", `store URL (scheme mysql) must be sqlite:PATH or postgres://`),
			},
			{
				// Nothing listens on port 1.
				Config: `
provider "leasehold" {
  store = "postgres://leasehold@127.0.0.1:1/leasehold?connect_timeout=5"
}
` + oneTask,
				PlanOnly:    true,
				ExpectError: diagnostic("Cannot reach store", "postgres://leasehold@127.0.0.1:1/leasehold"),
			},
			{
				// A password as a query parameter is masked too.
				Config: `
provider "leasehold" {
  store = "postgres://leasehold@127.0.0.1:1/leasehold?connect_timeout=5&password=hunter2"
}
` + oneTask,
				PlanOnly:    true,
				ExpectError: diagnostic("Cannot reach store", "postgres://leasehold@127.0.0.1:1/leasehold?connect_timeout=5&password=xxxxx"),
			},
			{
				// A URL that does not parse and holds a password is not
				// quoted at all: no parse says where its password ends.
				Config: `
provider "leasehold" {
  store = "postgres://leasehold:hunter2%zz@127.0.0.1:1/leasehold"
}
` + oneTask,
				PlanOnly:    true,
				ExpectError: diagnostic("Cannot open store", "its text is not shown, since it holds a password"),
			},
		},
	})
	// The same from the environment: no attribute to point at, and the
	// detail says where the URL came from.
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: ts.factories(map[string]string{EnvStore: "postgres://leasehold@127.0.0.1:1/leasehold?connect_timeout=5"}),
		Steps: []resource.TestStep{{
			Config:      oneTask,
			PlanOnly:    true,
			ExpectError: diagnostic("Cannot reach store", "came from LEASEHOLD_STORE"),
		}},
	})
}
