package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"

	leasehold "github.com/leasehold/leasehold"
)

// apiSpec is openapi.yaml as this build embeds it, loaded the first time
// the client checks an answer.
var apiSpec = sync.OnceValues(loadSpec)

func loadSpec() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(leasehold.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	seen := map[*openapi3.Schema]bool{}
	for _, ref := range doc.Components.Schemas {
		dropStringEnums(ref, seen)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, resp := range op.Responses.Map() {
				if resp.Value != nil {
					for _, mt := range resp.Value.Content {
						dropStringEnums(mt.Schema, seen)
					}
				}
			}
		}
	}
	return doc, nil
}

// dropStringEnums drops the enums of the string schemas under ref: a newer
// sidecar may answer a value this build does not know (an event kind, a
// store kind), and that is no sign of a server that is not a sidecar; the
// output prints any string. Boolean enums (acquired: true) stay.
func dropStringEnums(ref *openapi3.SchemaRef, seen map[*openapi3.Schema]bool) {
	if ref == nil || ref.Value == nil || seen[ref.Value] {
		return
	}
	s := ref.Value
	seen[s] = true
	if s.Type.Is(openapi3.TypeString) {
		s.Enum = nil
	}
	for _, p := range s.Properties {
		dropStringEnums(p, seen)
	}
	dropStringEnums(s.Items, seen)
	dropStringEnums(s.AdditionalProperties.Schema, seen)
	for _, sub := range slices.Concat(s.AllOf, s.AnyOf, s.OneOf) {
		dropStringEnums(sub, seen)
	}
}

// notTheAPI is why an answer is not one the API gives: the server asked
// is something else (another service, a proxy's error page, a stub).
type notTheAPI struct{ reason string }

func (e *notTheAPI) Error() string { return e.reason }

// checkAnswer reports whether an answer to method on the path template
// (as openapi.yaml writes it, /v1/leases/{task}) is one the API gives: a
// status openapi.yaml declares there, with a declared Content-Type and a
// body that matches the declared schema (required properties, types,
// bounds, boolean enums, RFC 3339 times; not the patterns, so that a lease
// stored under an older task naming rule still reads, nor the string enums,
// so that a newer sidecar's new kind of event still prints). A refusal (4xx, 5xx) may
// also be any RFC 9457 problem (application/problem+json matching the
// Problem schema), whether or not the status is declared there, so that a
// refusal a newer sidecar adds still reads as the sidecar's.
//
// Properties the schema does not name are allowed: a newer sidecar may
// answer more.
func checkAnswer(method, template string, status int, header http.Header, body []byte) error {
	doc, err := apiSpec()
	if err != nil {
		return err
	}
	var op *openapi3.Operation
	if item := doc.Paths.Value(template); item != nil {
		op = item.GetOperation(method)
	}
	if op == nil {
		return fmt.Errorf("openapi.yaml has no operation %s %s", method, template) // a bug here, not the server's
	}
	ct := header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	var schema *openapi3.SchemaRef
	ref := op.Responses.Status(status)
	if ref != nil && ref.Value != nil {
		if mediaType := ref.Value.Content.Get(mt); mt != "" && mediaType != nil {
			schema = mediaType.Schema
		}
	}
	if schema == nil && status >= 400 && mt == "application/problem+json" {
		schema = doc.Components.Schemas["Problem"]
	}
	switch {
	case schema != nil:
	case ref != nil && ref.Value != nil && len(ref.Value.Content) == 0 && len(body) == 0:
		return nil // an answer with no content (204), as the API gives it
	case ref == nil:
		return &notTheAPI{fmt.Sprintf("status %d, which the API does not answer there", status)}
	default:
		return &notTheAPI{fmt.Sprintf("status %d with Content-Type %q, where the API answers %s", status, ct, strings.Join(slices.Sorted(maps.Keys(ref.Value.Content)), " or "))}
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return &notTheAPI{fmt.Sprintf("status %d with a body that is not JSON", status)}
	}
	if err := schema.Value.VisitJSON(v, openapi3.VisitAsResponse(), openapi3.DisablePatternValidation()); err != nil {
		name := schema.Ref[strings.LastIndexByte(schema.Ref, '/')+1:]
		var se *openapi3.SchemaError
		if errors.As(err, &se) {
			return &notTheAPI{fmt.Sprintf("status %d with a body that is not the API's %s (at /%s: %s)", status, name, strings.Join(se.JSONPointer(), "/"), se.Reason)}
		}
		return &notTheAPI{fmt.Sprintf("status %d with a body that is not the API's %s", status, name)}
	}
	return nil
}

// checkSchema reports whether data, the data of a stream's event, is the
// API's schema name (components/schemas of openapi.yaml, with the leniency
// of checkAnswer): a required field missing, or of another type, is no
// sidecar's event.
func checkSchema(name string, data []byte) error {
	doc, err := apiSpec()
	if err != nil {
		return err
	}
	schema := doc.Components.Schemas[name]
	if schema == nil || schema.Value == nil {
		return fmt.Errorf("openapi.yaml has no schema %s", name) // a bug here, not the server's
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return &notTheAPI{"not JSON"}
	}
	if err := schema.Value.VisitJSON(v, openapi3.VisitAsResponse(), openapi3.DisablePatternValidation()); err != nil {
		return &notTheAPI{fmt.Sprintf("not the API's %s", name)}
	}
	return nil
}
