package sidecar

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/labstack/echo/v4"

	leasehold "github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/sidecar/api"
)

// spec is the embedded openapi.yaml, parsed and checked once per process,
// with a router that matches its paths on whatever address the server
// listens on (the server asks it only about requests echo routed to no
// operation; see operationOf). Nothing modifies it after loading.
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

// routeKey names a route as echo matched it: the method and the path
// template (/v1/leases/:task/claim).
type routeKey struct{ method, path string }

// operation is one operation of openapi.yaml, resolved once at start-up,
// with what the validator needs of it for each request.
type operation struct {
	// route is the operation as openapi3filter's validators take it.
	route *routers.Route
	// params are the parameters ValidateRequest would check, in its order:
	// the path item's (unless the operation overrides them), then the
	// operation's.
	params []param
	// query names the query parameters, each to be given at most once;
	// no other query parameter is accepted.
	query []string
	// headers names the header parameters, each to be given at most once.
	headers []string
	// integers are the query and header parameters whose values are
	// integers, to be spelled as plain decimal digits.
	integers []string
	// body is the request body, or nil; bodySchema its JSON schema.
	body       *openapi3.RequestBody
	bodySchema *openapi3.Schema
	intFields  map[string]*openapi3.Schema
}

// param is a parameter of an operation.
type param struct {
	*openapi3.Parameter
	// simpleString: in the path, in the simple style, with a string
	// schema: its value is the path segment (percent-decoded), which
	// ValidateParameter would check against the schema as it is.
	simpleString bool
}

func newParam(p *openapi3.Parameter) param {
	return param{Parameter: p, simpleString: p.In == openapi3.ParameterInPath && p.Content == nil &&
		(p.Style == "" || p.Style == openapi3.SerializationSimple) &&
		p.Schema != nil && p.Schema.Value != nil && p.Schema.Value.Type.Is(openapi3.TypeString)}
}

// operations maps each operation of the document to the route echo
// registers for it (oapi-codegen turns {name} into :name).
func operations(doc *openapi3.T) map[routeKey]*operation {
	ops := make(map[routeKey]*operation)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			o := &operation{
				route: &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op},
			}
			for _, ref := range item.Parameters {
				if op.Parameters.GetByInAndName(ref.Value.In, ref.Value.Name) == nil {
					o.params = append(o.params, newParam(ref.Value))
				}
			}
			for _, ref := range op.Parameters {
				o.params = append(o.params, newParam(ref.Value))
			}
			for _, p := range o.params {
				switch p.In {
				case openapi3.ParameterInQuery:
					o.query = append(o.query, p.Name)
				case openapi3.ParameterInHeader:
					o.headers = append(o.headers, p.Name)
				default:
					continue
				}
				if p.Schema != nil && p.Schema.Value != nil && p.Schema.Value.Type.Is(openapi3.TypeInteger) {
					o.integers = append(o.integers, p.Name)
				}
			}
			slices.Sort(o.query)
			if rb := op.RequestBody; rb != nil && rb.Value != nil {
				o.body = rb.Value
				if mt := rb.Value.Content.Get(echo.MIMEApplicationJSON); mt != nil && mt.Schema != nil {
					o.bodySchema = mt.Schema.Value
				}
				o.intFields = integerFields(o.bodySchema)
			}
			ops[routeKey{method, echoPath(path)}] = o
		}
	}
	return ops
}

// echoPath is a path template of the document as echo spells it.
func echoPath(path string) string {
	return strings.NewReplacer("{", ":", "}", "").Replace(path)
}

// checkRoutes says whether echo's routes and the document's operations are
// the same set, so that every request echo routes is validated.
func checkRoutes(ops map[routeKey]*operation, routes []*echo.Route) error {
	seen := make(map[routeKey]bool, len(routes))
	for _, r := range routes {
		k := routeKey{r.Method, r.Path}
		if ops[k] == nil {
			return fmt.Errorf("openapi.yaml: echo route %s %s has no operation", r.Method, r.Path)
		}
		seen[k] = true
	}
	for k := range ops {
		if !seen[k] {
			return fmt.Errorf("openapi.yaml: operation %s %s has no echo route", k.method, k.path)
		}
	}
	return nil
}

// operationOf returns the operation of the document req asks for, with the
// names of its path parameters and their values, percent-decoded. With no
// operation, it returns the error to answer, or none to let echo answer.
func operationOf(c echo.Context, sp *specRouter, ops map[routeKey]*operation) (op *operation, names, values []string, err error) {
	req := c.Request()
	names = c.ParamNames()
	values = c.ParamValues()
	values = values[:min(len(names), len(values))]
	if op = ops[routeKey{req.Method, c.Path()}]; op != nil && routable(values) {
		// echo hands back a parameter still percent-encoded when the path
		// has an escaped form of its own (RawPath), as billing%2Fnightly
		// has; decoding here checks the task itself.
		if req.URL.RawPath != "" {
			decoded := make([]string, len(values))
			for i, v := range values {
				if decoded[i], err = url.PathUnescape(v); err != nil {
					return nil, nil, nil, invalid([]api.InvalidParam{{Name: names[i], Reason: "is not a valid percent-encoded path segment"}})
				}
			}
			values = decoded
		}
		return op, names, values, nil
	}

	// echo routed the request to no operation (and answers 404 or 405), or
	// matched a parameter to an empty segment or to several: the document's
	// own router says what the request is. This is the path of requests
	// that are refused, so routing again costs nothing that matters.
	route, params, err := sp.findRoute(req)
	if err != nil {
		if _, ok := err.(*problemError); ok {
			return nil, nil, nil, err
		}
		// echo matches an empty segment (/v1/leases//claim) to a
		// parameter; the document's router, rightly, does not.
		for i, v := range values {
			if v == "" {
				return nil, nil, nil, invalid([]api.InvalidParam{{Name: names[i], Reason: "is required: the path segment is empty"}})
			}
		}
		// echo lets a parameter that ends a route take the rest of the
		// path, slashes included (/v1/tasks/billing/nightly); the
		// document's paths say {task} is one segment.
		if errors.Is(err, routers.ErrPathNotFound) {
			return nil, nil, nil, echo.ErrNotFound
		}
		return nil, nil, nil, nil
	}
	names = slices.Sorted(maps.Keys(params))
	values = make([]string, len(names))
	for i, name := range names {
		values[i] = params[name]
	}
	return ops[routeKey{route.Method, echoPath(route.Path)}], names, values, nil
}

// routable says whether the document's paths match the parameter values
// echo matched: each is one non-empty path segment.
func routable(values []string) bool {
	for _, v := range values {
		if v == "" || strings.Contains(v, "/") {
			return false
		}
	}
	return true
}
