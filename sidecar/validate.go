package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/labstack/echo/v4"

	leasehold "github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/sidecar/api"
)

// maxBodyBytes bounds a request body; larger bodies are answered 413.
const maxBodyBytes = 64 << 10

// spec is the embedded openapi.yaml, parsed and checked once per process,
// with a router that matches its paths on whatever address the server
// listens on. Nothing modifies it after loading.
var spec = sync.OnceValues(func() (*specRouter, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(leasehold.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	// The document's servers name the default listen address (a host the
	// router would insist on); requests reach the sidecar on any address.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	return &specRouter{doc: doc, router: router}, nil
})

type specRouter struct {
	doc    *openapi3.T
	router routers.Router
}

// findRoute returns the document's operation for req, with the path
// parameters percent-decoded. The router matches the encoded path, so a task
// such as billing%2Fnightly stays one segment, but it hands the parameters
// back still encoded, and the validator would then check "billing%2Fnightly"
// against the task pattern; decoding here keeps both right.
func (s *specRouter) findRoute(req *http.Request) (*routers.Route, map[string]string, error) {
	route, raw, err := s.router.FindRoute(req)
	if err != nil {
		return nil, nil, err
	}
	params := make(map[string]string, len(raw))
	for name, v := range raw {
		if params[name], err = url.PathUnescape(v); err != nil {
			return nil, nil, invalid([]api.InvalidParam{{Name: name, Reason: "is not a valid percent-encoded path segment"}})
		}
	}
	return route, params, nil
}

// validateRequests checks each request that matches an operation of
// openapi.yaml before its handler runs: body size (413), content type (415),
// JSON syntax (400), then parameters and body against the schemas (422).
// Requests that match no operation go on to echo, which answers 404 or 405.
func validateRequests(s *specRouter) echo.MiddlewareFunc {
	options := &openapi3filter.Options{
		MultiError:          true, // name every offending field, not only the first
		SkipSettingDefaults: true,
		// Bearer tokens are checked by their own middleware, before this one.
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			route, params, err := s.findRoute(req)
			if err != nil {
				if _, ok := err.(*problemError); ok {
					return err
				}
				// echo matches an empty segment (/v1/leases//claim) to a
				// parameter; the document's router, rightly, does not.
				for i, name := range c.ParamNames() {
					if i < len(c.ParamValues()) && c.ParamValues()[i] == "" {
						return invalid([]api.InvalidParam{{Name: name, Reason: "is required: the path segment is empty"}})
					}
				}
				// echo lets a parameter that ends a route take the rest of
				// the path, slashes included (/v1/tasks/billing/nightly);
				// the document's paths say {task} is one segment.
				if errors.Is(err, routers.ErrPathNotFound) {
					return echo.ErrNotFound
				}
				return next(c)
			}
			if rb := route.Operation.RequestBody; rb != nil && rb.Value != nil {
				if err := checkBody(req, rb.Value); err != nil {
					return err
				}
			}
			input := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: options}
			if err := openapi3filter.ValidateRequest(req.Context(), input); err != nil {
				return invalid(invalidParams(err))
			}
			return next(c)
		}
	}
}

// checkBody reads the body (at most maxBodyBytes), checks that it is present,
// declared as a content type the operation accepts, and syntactically JSON,
// and puts it back for the validator and the handler.
func checkBody(req *http.Request, rb *openapi3.RequestBody) error {
	if req.ContentLength > maxBodyBytes {
		return tooLarge()
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBodyBytes+1))
	if err != nil {
		return malformed("reading the request body: " + err.Error())
	}
	if len(body) > maxBodyBytes {
		return tooLarge()
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }

	ct := req.Header.Get(echo.HeaderContentType)
	if (ct != "" || len(body) > 0) && rb.Content.Get(ct) == nil {
		return newProblem(http.StatusUnsupportedMediaType, problemBlank, "",
			fmt.Sprintf("the request body must be application/json, not %q", ct))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if rb.Required {
			return malformed("a request body is required: a JSON object")
		}
		return nil
	}
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v)
		if err == nil { // valid for Unmarshal but not for Valid: cannot happen
			err = fmt.Errorf("not a single JSON value")
		}
		return malformed("the request body is not valid JSON: " + err.Error())
	}
	return nil
}

// invalidParams names each field that err (from openapi3filter.ValidateRequest)
// reports, as the API spells it: the path parameter's name, or the body
// field's JSON pointer without the leading slash ("owner", "ttl_ms").
// A field that breaks several rules is named once, with the reasons joined.
func invalidParams(err error) []api.InvalidParam {
	var out []api.InvalidParam
	for _, p := range collectParams(nil, err, "") {
		i := slices.IndexFunc(out, func(q api.InvalidParam) bool { return q.Name == p.Name })
		switch {
		case i < 0:
			out = append(out, p)
		case !strings.Contains(out[i].Reason, p.Reason):
			out[i].Reason += "; " + p.Reason
		}
	}
	if len(out) == 0 {
		out = append(out, api.InvalidParam{Name: "request", Reason: "does not match the API description"})
	}
	return out
}

func collectParams(out []api.InvalidParam, err error, prefix string) []api.InvalidParam {
	switch e := err.(type) {
	case openapi3.MultiError:
		for _, err := range e {
			out = collectParams(out, err, prefix)
		}
	case *openapi3filter.RequestError:
		if e.Parameter != nil {
			prefix = e.Parameter.Name
		}
		if e.Err == nil {
			return append(out, api.InvalidParam{Name: fieldName(prefix, nil), Reason: e.Reason})
		}
		return collectParams(out, e.Err, prefix)
	case *openapi3.SchemaError:
		return append(out, schemaParams(e, prefix)...)
	case *openapi3filter.ParseError:
		return append(out, api.InvalidParam{Name: fieldName(prefix, nil), Reason: e.Reason})
	case *openapi3filter.SecurityRequirementsError:
		// Authentication is not the validator's job (see validateRequests).
	default:
		return append(out, api.InvalidParam{Name: fieldName(prefix, nil), Reason: err.Error()})
	}
	return out
}

// schemaParams turns one schema error into named fields. Its Reason never
// contains the offending value, so nothing the client sent is echoed back.
func schemaParams(e *openapi3.SchemaError, prefix string) []api.InvalidParam {
	pointer := e.JSONPointer()
	switch e.SchemaField {
	case "required":
		return []api.InvalidParam{{Name: fieldName(prefix, pointer), Reason: "is required"}}
	case "properties":
		// additionalProperties: false. The error is about the object; name
		// each field it does not know.
		obj, _ := e.Value.(map[string]any)
		known := make([]string, 0, len(e.Schema.Properties))
		for k := range e.Schema.Properties {
			known = append(known, k)
		}
		slices.Sort(known)
		reason := "is not a field of this request (known fields: " + strings.Join(known, ", ") + ")"
		var out []api.InvalidParam
		for _, k := range sortedKeys(obj) {
			if _, ok := e.Schema.Properties[k]; !ok {
				out = append(out, api.InvalidParam{Name: fieldName(prefix, append(pointer, k)), Reason: reason})
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	reason := e.Reason
	if e.SchemaField == "pattern" && e.Schema.Description != "" {
		// "string doesn't match the regular expression …" says less than
		// the schema's own description of the rule.
		desc := strings.TrimSuffix(strings.ReplaceAll(e.Schema.Description, "`", ""), ".")
		reason = fmt.Sprintf("must be %s (pattern %s)", strings.TrimSpace(desc), e.Schema.Pattern)
	}
	return []api.InvalidParam{{Name: fieldName(prefix, pointer), Reason: reason}}
}

func fieldName(prefix string, pointer []string) string {
	parts := pointer
	if prefix != "" {
		parts = append([]string{prefix}, pointer...)
	}
	if len(parts) == 0 {
		return "body"
	}
	return strings.Join(parts, "/")
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
