package tfprovider

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// exampleRoles are the PostgreSQL roles the examples name. Roles belong
// to the whole server, so each test run makes roles of its own and puts
// their names in the example in place of these.
var exampleRoles = []string{"team_payments"}

// TestExamples applies every resource and data source example that the
// docs show, so that they stay valid. The role scope example needs
// PostgreSQL: on SQLite, its plan must fail saying so.
func TestExamples(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("examples", "*", "*", "*.tf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	eachStore(t, func(t *testing.T, ts *testStore) {
		for _, file := range files {
			t.Run(filepath.Dir(file), func(t *testing.T) {
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				src := string(b)
				step := resource.TestStep{Config: ts.config(src)}
				if strings.Contains(src, "leasehold_role_scope") {
					if ts.kind == "sqlite" {
						step.PlanOnly, step.ExpectError = true, diagnostic("Role scopes need a PostgreSQL store", "has no database roles")
					} else {
						for _, role := range exampleRoles {
							made, _ := pgtest.NewRole(t, ts.url, "lh_example")
							src = strings.ReplaceAll(src, fmt.Sprintf("%q", role), fmt.Sprintf("%q", made))
						}
						step.Config = ts.config(src)
					}
				}
				resource.Test(t, resource.TestCase{
					ProtoV6ProviderFactories: ts.factories(nil),
					CheckDestroy:             ts.checkDestroyed,
					Steps:                    []resource.TestStep{step},
				})
			})
		}
	})
}

// TestExamplesFormatted checks the examples with terraform fmt.
func TestExamplesFormatted(t *testing.T) {
	t.Parallel()
	requireTerraform(t)
	out, err := exec.Command(os.Getenv("TF_ACC_TERRAFORM_PATH"), "fmt", "-check", "-diff", "-recursive", "examples").CombinedOutput()
	if err != nil {
		t.Fatalf("terraform fmt -check examples: %v\n%s", err, out)
	}
}
