package leasehold_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	leasehold "github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/leasecore"
)

// taskNameSchema loads openapi.yaml and returns its TaskName schema, after
// checking that every place the document names a task refers to it, so the
// one schema is the whole of the spec's task name rule.
func taskNameSchema(t testing.TB) *openapi3.Schema {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(leasehold.OpenAPI)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	const ref = "#/components/schemas/TaskName"
	refs := map[string]*openapi3.SchemaRef{
		"parameters/Task":              doc.Components.Parameters["Task"].Value.Schema,
		"schemas/Lease.task":           doc.Components.Schemas["Lease"].Value.Properties["task"],
		"schemas/Event.task":           doc.Components.Schemas["Event"].Value.Properties["task"],
		"schemas/TaskDeclaration.name": doc.Components.Schemas["TaskDeclaration"].Value.Properties["name"],
	}
	for where, r := range refs {
		if r == nil || r.Ref != ref {
			t.Errorf("%s does not refer to %s", where, ref)
		}
	}
	s := doc.Components.Schemas["TaskName"]
	if s == nil || s.Value == nil {
		t.Fatal("openapi.yaml has no TaskName schema")
	}
	return s.Value
}

// agree fails t when openapi.yaml's TaskName schema and leasecore.ValidateTask
// disagree on name.
func agree(t testing.TB, schema *openapi3.Schema, name string) {
	t.Helper()
	specErr := schema.VisitJSON(name)
	coreErr := leasecore.ValidateTask(name)
	if (specErr == nil) != (coreErr == nil) {
		t.Errorf("task name %q: openapi.yaml says %v, leasecore.ValidateTask says %v", name, errText(specErr), errText(coreErr))
	}
}

func errText(err error) string {
	if err == nil {
		return "valid"
	}
	return "invalid (" + err.Error() + ")"
}

// TestTaskNameRuleAgrees checks that openapi.yaml's TaskName (its pattern and
// length bounds) accepts exactly the names leasecore.ValidateTask accepts: on
// a table of edge cases, each checked to be valid or not as listed, and on
// random names drawn from an alphabet rich in slashes and dots.
func TestTaskNameRuleAgrees(t *testing.T) {
	t.Parallel()
	schema := taskNameSchema(t)
	for _, c := range []struct {
		name  string
		valid bool
	}{
		{"nightly", true},
		{"billing/nightly", true},
		{"telescope:prune", true},
		{"a.b_c:d/e@f-g", true},
		{"...", true},
		{".../....", true},
		{".a/a./..b/b..", true},
		{"a..b", true},
		{"leasehold:prune", true}, // reserved, but a valid name: reads are allowed
		{strings.Repeat("x", 200), true},
		{strings.Repeat("a/", 99) + "bc", true},
		{"", false},
		{strings.Repeat("x", 201), false},
		{".", false},
		{"..", false},
		{"a/../b", false},
		{"./a", false},
		{"a/.", false},
		{"a/..", false},
		{"../a", false},
		{"a//b", false},
		{"/a", false},
		{"a/", false},
		{"/", false},
		{"//", false},
		{"a b", false},
		{"tâche", false},
		{"a%2Fb", false},
		{"a?b", false},
		{"a\nb", false},
		{"a\\b", false},
	} {
		if got := leasecore.ValidateTask(c.name) == nil; got != c.valid {
			t.Errorf("leasecore.ValidateTask(%q) valid = %v, want %v", c.name, got, c.valid)
		}
		agree(t, schema, c.name)
	}

	const alphabet = "./a./Z.:9/-_@.x/ é%"
	rng := rand.New(rand.NewPCG(8, 3))
	valid := 0
	for range 20000 {
		n := rng.IntN(12)
		if rng.IntN(50) == 0 {
			n = 195 + rng.IntN(10) // around the length bound
		}
		var b strings.Builder
		for range n {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		if leasecore.ValidateTask(b.String()) == nil {
			valid++
		}
		agree(t, schema, b.String())
	}
	if valid < 1000 || valid > 19000 {
		t.Errorf("%d of 20000 random names were valid: the generator does not exercise both sides of the rule", valid)
	}
}

// FuzzTaskNameRule is TestTaskNameRuleAgrees for go test -fuzz: its seed
// corpus runs in every go test.
func FuzzTaskNameRule(f *testing.F) {
	for _, seed := range []string{"nightly", "a/../b", "a//b", "...", "/", ".", "a/.", "x/..y", "leasehold:prune"} {
		f.Add(seed)
	}
	schema := taskNameSchema(f)
	f.Fuzz(func(t *testing.T, name string) {
		agree(t, schema, name)
	})
}

// TestListAfterRuleAgrees: the list endpoints' after parameter accepts
// exactly the non-empty names leasecore.ListParams.Validate accepts.
func TestListAfterRuleAgrees(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(leasehold.OpenAPI)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	param := doc.Components.Parameters["ListAfter"]
	if param == nil || param.Value.Schema == nil || param.Value.Schema.Value == nil {
		t.Fatal("openapi.yaml has no ListAfter parameter")
	}
	schema := param.Value.Schema.Value
	for _, op := range []*openapi3.Operation{doc.Paths.Find("/v1/leases").Get, doc.Paths.Find("/v1/tasks").Get} {
		if p := op.Parameters.GetByInAndName("query", "after"); p == nil || p != param.Value {
			t.Errorf("%s: its after parameter is not #/components/parameters/ListAfter", op.OperationID)
		}
	}
	const alphabet = "./a:Z9-_@ é%\x00"
	rng := rand.New(rand.NewPCG(1, 2))
	valid := 0
	for range 5000 {
		n := 1 + rng.IntN(8)
		if rng.IntN(40) == 0 {
			n = 198 + rng.IntN(5)
		}
		var b strings.Builder
		for range n {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		after := b.String()
		specErr := schema.VisitJSON(after)
		coreErr := leasecore.ListParams{After: after, Limit: 1}.Validate()
		if coreErr == nil {
			valid++
		}
		if (specErr == nil) != (coreErr == nil) {
			t.Errorf("after %q: openapi.yaml says %v, ListParams.Validate says %v", after, errText(specErr), errText(coreErr))
		}
	}
	if valid < 500 || valid > 4500 {
		t.Errorf("%d of 5000 random names were valid: the generator does not exercise both sides of the rule", valid)
	}
}

// TestCredentialRuleAgrees: openapi.yaml's EventCredential, which
// Event.credential refers to, accepts the empty string (no credential) and
// exactly the names leasecore.ValidateCredential accepts.
func TestCredentialRuleAgrees(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(leasehold.OpenAPI)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	const ref = "#/components/schemas/EventCredential"
	if r := doc.Components.Schemas["Event"].Value.Properties["credential"]; r == nil || r.Ref != ref {
		t.Fatalf("schemas/Event.credential does not refer to %s", ref)
	}
	schema := doc.Components.Schemas["EventCredential"].Value
	if err := schema.VisitJSON(""); err != nil {
		t.Errorf("EventCredential refuses the empty string (no credential): %v", err)
	}
	names := []string{"ci", "team-a/deploy_bot.v2:eu@prod", strings.Repeat("c", 64), strings.Repeat("c", 65),
		"deploy bot", "ci\n", "crédit", "ci?x", "ci%20", `ci"x`, "ci\x00"}
	const alphabet = "a-Z9._:/@ é%?\n"
	rng := rand.New(rand.NewPCG(5, 11))
	for range 5000 {
		n := 1 + rng.IntN(8)
		if rng.IntN(20) == 0 {
			n = 60 + rng.IntN(8) // around the length bound
		}
		var b strings.Builder
		for range n {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		names = append(names, b.String())
	}
	valid := 0
	for _, name := range names {
		specErr := schema.VisitJSON(name)
		coreErr := leasecore.ValidateCredential(name)
		if coreErr == nil {
			valid++
		}
		if (specErr == nil) != (coreErr == nil) {
			t.Errorf("credential %q: openapi.yaml says %v, leasecore.ValidateCredential says %v", name, errText(specErr), errText(coreErr))
		}
	}
	if valid < 100 || valid > len(names)-100 {
		t.Errorf("%d of %d names were valid: the generator does not exercise both sides of the rule", valid, len(names))
	}
}
