package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/sidecar/api"
)

// TestRequestBodiesReadEveryField: each operation with a request body has a
// reader in handlers.go, and the reader takes every property its schema
// declares, so a property added to openapi.yaml cannot be validated and then
// silently dropped. A body with every property set comes back whole when the
// handler's struct is encoded again.
func TestRequestBodiesReadEveryField(t *testing.T) {
	t.Parallel()
	readers := map[string]func(echo.Context) (any, error){
		"claimLease":    func(c echo.Context) (any, error) { return claimRequest(c) },
		"renewLease":    func(c echo.Context) (any, error) { return renewRequest(c) },
		"releaseLease":  func(c echo.Context) (any, error) { return releaseRequest(c) },
		"revokeLease":   func(c echo.Context) (any, error) { return revokeRequest(c) },
		"declareTask":   func(c echo.Context) (any, error) { return declareTaskRequest(c) },
		"declarePolicy": func(c echo.Context) (any, error) { return declarePolicyRequest(c) },
	}
	sp, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	for key, op := range operations(sp.doc) {
		if op.body == nil {
			continue
		}
		id := op.route.Operation.OperationID
		read := readers[id]
		if read == nil {
			t.Errorf("%s %s (%s) has a request body and no reader", key.method, key.path, id)
			continue
		}
		body := fillProperties(t, id, op.bodySchema)
		if err := op.bodySchema.VisitJSON(body); err != nil {
			t.Fatalf("%s: the test's body does not match the schema: %v", id, err)
		}
		c := &bodyContext{Context: e.NewContext(httptest.NewRequest("POST", "/", nil), httptest.NewRecorder()), body: body}
		v, err := read(c)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		encoded, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		dec := json.NewDecoder(bytes.NewReader(encoded))
		dec.UseNumber()
		if err := dec.Decode(&back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(body, back) {
			t.Errorf("%s: body %v read as %s: fields %v, want %v", id, body, encoded,
				slices.Sorted(maps.Keys(back)), slices.Sorted(maps.Keys(body)))
		}

		// A field the reader does not know is refused, not dropped.
		body["unknown"] = "x"
		if _, err := read(c); err == nil {
			t.Errorf("%s: a body with an unknown field was read", id)
		}
		delete(body, "unknown")
	}
}

// fillProperties is an object with every property of schema set: strings
// "v", integers 1000 (or the schema's maximum, when lower), booleans true,
// objects filled the same way.
func fillProperties(t *testing.T, id string, schema *openapi3.Schema) map[string]any {
	body := map[string]any{}
	for name, p := range schema.Properties {
		switch v := p.Value; {
		case v.Type.Is(openapi3.TypeString):
			body[name] = "v"
		case v.Type.Is(openapi3.TypeInteger):
			n := 1000.0
			if v.Max != nil && *v.Max < n {
				n = *v.Max
			}
			body[name] = json.Number(strconv.FormatFloat(n, 'f', -1, 64))
		case v.Type.Is(openapi3.TypeBoolean):
			body[name] = true
		case v.Type.Is(openapi3.TypeObject):
			body[name] = fillProperties(t, id, v)
		default:
			t.Fatalf("%s: property %s of a type this test does not fill", id, name)
		}
	}
	return body
}

// TestNullBodyMeetsTheSchema: a body of JSON's null is a body, validated
// against the request's schema like any other (not taken for a missing one).
func TestNullBodyMeetsTheSchema(t *testing.T) {
	t.Parallel()
	sp, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	var se *openapi3.SchemaError
	if !errors.As(sp.doc.Components.Schemas["ClaimRequest"].Value.VisitJSON(nil), &se) {
		t.Fatal("the claim's schema accepts null")
	}
	ts := newTestServer(t)
	p := expectProblem(t, ts.do("POST", "/v1/leases/n/claim", "application/json", []byte(`null`)), http.StatusUnprocessableEntity, problemInvalid)
	if p.InvalidParams == nil || len(*p.InvalidParams) != 1 || (*p.InvalidParams)[0] != (api.InvalidParam{Name: "body", Reason: se.Reason}) {
		t.Errorf("invalid_params %+v, want body: %s", p.InvalidParams, se.Reason)
	}
}
