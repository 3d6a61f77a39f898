package sidecar

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	leasehold "github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/leasecore"
)

// TestWireNames keeps the table of wire names whole: every field leasecore
// can refuse in what the sidecar asks of it has a wire name, and every wire
// name is a parameter or body property of openapi.yaml.
func TestWireNames(t *testing.T) {
	t.Parallel()
	owner := "w1"
	refusals := []error{
		leasecore.ClaimParams{Task: "a b", Owner: owner}.Validate(),
		leasecore.ClaimParams{Task: "t", Owner: ""}.Validate(),
		leasecore.ClaimParams{Task: "t", Owner: owner, TTL: time.Millisecond}.Validate(),
		leasecore.ClaimParams{Task: "t", Owner: owner, Note: "a\x00"}.Validate(),
		leasecore.RenewParams{Task: "t", Owner: owner, Token: -1}.Validate(),
		leasecore.ReleaseParams{Task: "t", Owner: owner, Token: -1}.Validate(),
		leasecore.ReleaseParams{Task: "t", Owner: owner, Run: &leasecore.RunOutcome{ExitCode: 256}}.Validate(),
		leasecore.ReleaseParams{Task: "t", Owner: owner, Run: &leasecore.RunOutcome{Error: "a\x00"}}.Validate(),
		leasecore.ReleaseParams{Task: "t", Owner: owner, Run: &leasecore.RunOutcome{Duration: -time.Second}}.Validate(),
		leasecore.ClaimParams{Task: "t", Owner: owner, MinHold: -time.Second}.Validate(),
		leasecore.ListParams{Limit: -1}.Validate(),
		leasecore.ListParams{After: "a b"}.Validate(),
		leasecore.ValidateHistoryLimit(0),
		(&leasecore.TaskDecl{Name: "t", TTL: time.Minute, MaxTTL: time.Millisecond}).Validate(),
		(&leasecore.TaskDecl{Name: "t", TTL: time.Minute, Description: "a\x00"}).Validate(),
		(&leasecore.TaskDecl{Name: "t", TTL: time.Minute, RetentionPolicy: "a b"}).Validate(),
		(&leasecore.RetentionPolicy{Name: "p", KeepFor: -time.Second}).Validate(),
		(&leasecore.RetentionPolicy{Name: "p", KeepLast: -1}).Validate(),
		leasecore.Writer{By: "x"}.Validate(),
	}
	for _, err := range refusals {
		var ve *leasecore.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%v is no *leasecore.ValidationError", err)
			continue
		}
		if _, ok := wireNames[ve.Field]; !ok {
			t.Errorf("leasecore field %q has no wire name in wireNames", ve.Field)
		}
	}

	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(leasehold.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, p := range append(item.Parameters, op.Parameters...) {
				names[p.Value.Name] = true
			}
			if op.RequestBody == nil {
				continue
			}
			for _, mt := range op.RequestBody.Value.Content {
				for name, prop := range mt.Schema.Value.Properties {
					names[name] = true
					for inner := range prop.Value.Properties { // an object's own (a release's run)
						names[name+"."+inner] = true
					}
				}
			}
		}
	}
	for goName, wire := range wireNames {
		if !names[wire] {
			t.Errorf("wire name %q (of %s) is no parameter or body property of openapi.yaml", wire, goName)
		}
		if strings.ToLower(goName) == goName {
			t.Errorf("%q is not a Go field name", goName)
		}
	}
}
