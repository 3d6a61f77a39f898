package tfprovider

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
)

var updateSchemaVersions = flag.Bool("update", false, "add each resource's current schema version to testdata/schema_versions.json when it is missing")

const schemaVersionsFile = "testdata/schema_versions.json"

// schemaShape is what state must fit: each attribute's type and whether it
// is required, optional, computed or sensitive; the type as Terraform stores
// it, so a custom type over the same value is no change. Descriptions, validators and
// plan modifiers do not change what state holds.
func schemaShape(s schema.Schema) map[string]string {
	shape := map[string]string{}
	for name, a := range s.Attributes {
		var flags []string
		for flag, on := range map[string]bool{"required": a.IsRequired(), "optional": a.IsOptional(), "computed": a.IsComputed(), "sensitive": a.IsSensitive()} {
			if on {
				flags = append(flags, flag)
			}
		}
		slices.Sort(flags)
		shape[name] = a.GetType().TerraformType(context.Background()).String() + " " + strings.Join(flags, ",")
	}
	return shape
}

// TestSchemaVersions holds every resource's schema to the shape recorded
// for its version: a schema that changes what state holds without a new
// version (and a state upgrader from the one before) fails, and every
// recorded earlier version has an upgrader with its prior schema.
func TestSchemaVersions(t *testing.T) {
	ctx := context.Background()
	recorded := map[string]map[string]map[string]string{} // resource → version → shape
	if data, err := os.ReadFile(schemaVersionsFile); err == nil {
		if err := json.Unmarshal(data, &recorded); err != nil {
			t.Fatalf("%s: %v", schemaVersionsFile, err)
		}
	} else if !*updateSchemaVersions {
		t.Fatal(err)
	}
	changed := false
	p := New("test")().(*leaseholdProvider)
	for _, newResource := range p.Resources(ctx) {
		r := newResource()
		var meta resource.MetadataResponse
		r.Metadata(ctx, resource.MetadataRequest{ProviderTypeName: "leasehold"}, &meta)
		var sch resource.SchemaResponse
		r.Schema(ctx, resource.SchemaRequest{}, &sch)
		name, version := meta.TypeName, strconv.FormatInt(sch.Schema.Version, 10)
		shape := schemaShape(sch.Schema)
		versions := recorded[name]
		want, ok := versions[version]
		switch {
		case !ok && *updateSchemaVersions:
			if recorded[name] == nil {
				recorded[name] = map[string]map[string]string{}
			}
			recorded[name][version] = shape
			changed = true
		case !ok:
			t.Errorf("%s: version %s of its schema is not recorded: go test ./tfprovider -run TestSchemaVersions -update records it", name, version)
		case !maps.Equal(want, shape):
			t.Errorf("%s: its schema changed without a new version:\n%s\nbump its schema version, add a state upgrader from version %s (its PriorSchema is the recorded one), "+
				"then go test ./tfprovider -run TestSchemaVersions -update records the new version (docs/provider.md, \"Schema versions\")", name, shapeDiff(want, shape), version)
		}
		upgraders := r.(resource.ResourceWithUpgradeState).UpgradeState(ctx)
		for v := range versions {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n >= sch.Schema.Version {
				continue
			}
			if u, ok := upgraders[n]; !ok || u.PriorSchema == nil || u.StateUpgrader == nil {
				t.Errorf("%s: no state upgrader (with its PriorSchema) from recorded version %d to %d", name, n, sch.Schema.Version)
			}
		}
	}
	if changed {
		data, err := json.MarshalIndent(recorded, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(schemaVersionsFile, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func shapeDiff(want, got map[string]string) string {
	var lines []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if got[name] != want[name] {
			lines = append(lines, fmt.Sprintf("  %s: recorded %q, now %q", name, want[name], got[name]))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[name]; !ok {
			lines = append(lines, fmt.Sprintf("  %s: not recorded, now %q", name, got[name]))
		}
	}
	return strings.Join(lines, "\n")
}
