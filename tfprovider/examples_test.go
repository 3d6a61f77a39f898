package tfprovider

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// TestExamples applies every resource and data source example that the
// docs show, so that they stay valid.
func TestExamples(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("examples", "*", "*", "*.tf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	eachStore(t, func(t *testing.T, ts *testStore) {
		for _, file := range files {
			t.Run(filepath.Dir(file), func(t *testing.T) {
				src, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				resource.Test(t, resource.TestCase{
					ProtoV6ProviderFactories: ts.factories(nil),
					CheckDestroy:             ts.checkDestroyed,
					Steps:                    []resource.TestStep{{Config: ts.config(string(src))}},
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
