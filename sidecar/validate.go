package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

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
	// query names the query parameters, each to be given at most once.
	query []string
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
				if p.In == openapi3.ParameterInQuery {
					o.query = append(o.query, p.Name)
				}
			}
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

// validationOptions are openapi3filter's options for every parameter.
var validationOptions = &openapi3filter.Options{
	MultiError:          true, // name every offending field, not only the first
	SkipSettingDefaults: true,
	// Bearer tokens are checked by their own middleware, before this one.
	AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
}

// paramValidation are the options openapi3filter.ValidateParameter
// validates a parameter's value with, given validationOptions.
var paramValidation = []openapi3.SchemaValidationOption{openapi3.MultiErrors()}

// bodyValidation are the options openapi3filter.ValidateRequestBody
// validates a body with, given validationOptions.
var bodyValidation = []openapi3.SchemaValidationOption{openapi3.VisitAsRequest(), openapi3.MultiErrors()}

// bodyContext is the context validateRequests hands on for a request with
// a body: the body as it decoded and validated it, for the handler
// (bodyFields). It saves echo's Set a map per request.
type bodyContext struct {
	echo.Context
	body any
}

// validateRequests checks each request that asks for an operation of
// openapi.yaml before its handler runs: body size (413), content type (415),
// JSON syntax (400), then parameters and body against the operation's
// schemas with kin-openapi (422). The operation is found from the route echo
// matched (operationOf), so a request is routed once. The body is read and
// decoded once: the decoded value is what the schema validates and what the
// handler reads (bodyFields). Requests that match no operation go on to
// echo, which answers 404 or 405.
func validateRequests(sp *specRouter, ops map[routeKey]*operation) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			op, names, values, err := operationOf(c, sp, ops)
			if err != nil {
				return err
			}
			if op == nil {
				return next(c) // echo answers 404 or 405
			}
			if len(op.query) > 0 {
				if err := checkRepeatedQuery(req, op.query); err != nil {
					return err
				}
			}
			var (
				body    any
				hasBody bool // body may be JSON's null
			)
			if op.body != nil {
				var err error
				if body, hasBody, err = checkBody(req, op); err != nil {
					return err
				}
			}
			var errs openapi3.MultiError
			var input *openapi3filter.RequestValidationInput // made when needed
			for _, p := range op.params {
				if i := slices.Index(names, p.Name); i >= 0 && p.simpleString {
					// What ValidateParameter does with a string in the
					// path, without decoding it from a map again.
					if err := p.Schema.Value.VisitJSON(values[i], paramValidation...); err != nil {
						errs = append(errs, &openapi3filter.RequestError{Parameter: p.Parameter, Err: err})
					}
					continue
				}
				if input == nil {
					input = validationInput(req, op, names, values)
				}
				if err := openapi3filter.ValidateParameter(req.Context(), input, p.Parameter); err != nil {
					errs = append(errs, err)
				}
			}
			if hasBody && op.bodySchema != nil {
				// As openapi3filter.ValidateRequestBody validates a body.
				if err := op.bodySchema.VisitJSON(body, bodyValidation...); err != nil {
					errs = append(errs, &openapi3filter.RequestError{RequestBody: op.body, Reason: "doesn't match schema", Err: err})
				}
			}
			if len(errs) > 0 {
				return invalid(invalidParams(errs))
			}
			if hasBody {
				return next(&bodyContext{Context: c, body: body})
			}
			return next(c)
		}
	}
}

// validationInput is what openapi3filter's validators take of a request.
func validationInput(req *http.Request, op *operation, names, values []string) *openapi3filter.RequestValidationInput {
	params := make(map[string]string, len(names))
	for i, name := range names {
		params[name] = values[i]
	}
	return &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: op.route, Options: validationOptions}
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

// checkRepeatedQuery refuses a query parameter of the operation given more
// than once (?owner=a&owner=b): each is one value, and which of two a
// client, a proxy or the validator would take is anyone's guess.
func checkRepeatedQuery(req *http.Request, names []string) error {
	query := req.URL.Query()
	var params []api.InvalidParam
	for _, name := range names {
		if n := len(query[name]); n > 1 {
			params = append(params, api.InvalidParam{Name: name, Reason: fmt.Sprintf("is given %d times; give it once", n)})
		}
	}
	if len(params) > 0 {
		return invalid(params)
	}
	return nil
}

// bodyBuffers hold request bodies while they are checked and decoded; the
// decoded value shares no memory with them.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// checkBody reads the body (at most maxBodyBytes), checks that it is present,
// declared as a content type the operation accepts, and strict JSON (see
// strictJSON), and returns it decoded, as openapi3filter decodes a JSON
// body (numbers as json.Number); present is false when it is empty and
// optional.
func checkBody(req *http.Request, op *operation) (value any, present bool, err error) {
	if req.ContentLength > maxBodyBytes {
		return nil, false, tooLarge()
	}
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer bodyBuffers.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(req.Body, maxBodyBytes+1)); err != nil {
		return nil, false, bodyReadProblem(req, err)
	}
	body := buf.Bytes()
	if len(body) > maxBodyBytes {
		return nil, false, tooLarge()
	}

	if n := len(req.Header.Values(echo.HeaderContentType)); n > 1 {
		return nil, false, newProblem(http.StatusUnsupportedMediaType, problemBlank, "",
			fmt.Sprintf("the request has %d Content-Type headers; give one: application/json", n))
	}
	ct := req.Header.Get(echo.HeaderContentType)
	mt := op.body.Content.Get(ct)
	if (ct != "" || len(body) > 0) && mt == nil {
		return nil, false, newProblem(http.StatusUnsupportedMediaType, problemBlank, "",
			fmt.Sprintf("the request body must be application/json, not %q", ct))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if op.body.Required {
			return nil, false, malformed("a request body is required: a JSON object")
		}
		return nil, false, nil
	}
	value, err = strictJSON(body, op.intFields)
	return value, err == nil, err
}

// bodyReadProblem is the answer to a body that could not be read. Its detail
// never carries the read error's text, which names the connection's
// addresses ("read tcp 127.0.0.1:7411->…: i/o timeout"). A timeout's detail
// names the ReadTimeout of the server that served req, whatever it was
// configured to.
func bodyReadProblem(req *http.Request, err error) *problemError {
	var maxErr *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &maxErr):
		return tooLarge()
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		// The server's ReadTimeout ran out while the body was still
		// arriving: a client that sent its headers and then stalled.
		within := "the server's read timeout"
		if srv, ok := req.Context().Value(http.ServerContextKey).(*http.Server); ok && srv.ReadTimeout > 0 {
			within = srv.ReadTimeout.String()
		}
		return newProblem(http.StatusRequestTimeout, problemBlank, "",
			fmt.Sprintf("the request body did not arrive within %s of the request's start", within))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return malformed("the request body ended before its declared length (Content-Length or chunked encoding)")
	default:
		return malformed("the request body could not be read (the connection failed while it arrived)")
	}
}

// maxBodyDepth bounds how deeply a request body's arrays and objects nest.
// Every request body is a flat object; the bound only stops a hostile body.
const maxBodyDepth = 16

// integerFields returns, for an object schema, the schema of each top-level
// property declared as an integer: the fields whose numbers strictJSON
// checks and respells.
func integerFields(schema *openapi3.Schema) map[string]*openapi3.Schema {
	if schema == nil {
		return nil
	}
	out := make(map[string]*openapi3.Schema)
	for name, p := range schema.Properties {
		if p != nil && p.Value != nil && p.Value.Type.Is(openapi3.TypeInteger) {
			out[name] = p.Value
		}
	}
	return out
}

// strictJSON checks body and decodes it in one pass, into what
// encoding/json with UseNumber would make of it (map[string]any, []any,
// string, json.Number, bool, nil): the value the schema validates and the
// handler reads. A body is refused when it
//   - is not exactly one JSON value (400 malformed);
//   - has a string (key or value) that is not valid UTF-8, or holds a lone
//     UTF-16 surrogate escape ("\ud800"): encoding/json would silently turn
//     either into U+FFFD, so two different owners would become one (422
//     naming the field);
//   - repeats a key in one object (422 naming the key): encoding/json keeps
//     the last, a proxy or another parser may keep the first;
//   - nests arrays and objects deeper than maxBodyDepth (422);
//   - has a number that no float64 can hold (1e400), or, in a field the
//     schema declares an integer, a number that is not a whole number of
//     the int64 range (100.5, 2^63) (422 naming the field, with the
//     schema's range).
//
// JSON has one number type, so an integer field accepts any spelling of a
// whole number (1e5, 100000.0, 1.0E5): its json.Number is respelled as a
// plain integer ("100000"). intFields are the top-level integer fields.
//
// The tokens come from encoding/json: a body json.Valid accepts (every
// body a client means) is cut into tokens by validTokens, which only has to
// find where each one ends; any other body is read with json.Decoder.Token,
// whose errors say where the syntax breaks. Either way strictValue applies
// the rules to the same tokens in the same order, so the first rule broken
// is the one named.
func strictJSON(body []byte, intFields map[string]*openapi3.Schema) (any, error) {
	if json.Valid(body) {
		return strictValue(&validTokens{body: body}, intFields)
	}
	return strictValue(newDecoderTokens(body), intFields)
}

// jsonToken is one token of a body: its kind (one of {}[]" for delimiters
// and strings, '0' for a number, 't', 'f', 'n' for true, false and null),
// its bytes as sent (a string's with its quotes), and a string's value.
type jsonToken struct {
	kind byte
	raw  []byte
	str  string
}

// tokenSource yields a body's tokens, then io.EOF; any other error is the
// problem to answer.
type tokenSource interface {
	next() (jsonToken, error)
}

// strictValue applies strictJSON's rules to the tokens of src and builds
// the value.
func strictValue(src tokenSource, intFields map[string]*openapi3.Schema) (any, error) {
	type frame struct {
		obj     map[string]any // when an object
		arr     []any          // when an array
		object  bool
		key     string // in an object: the key of the value being read
		wantKey bool   // in an object: the next string is a key
	}
	// Neither grows past maxBodyDepth; the arrays keep them off the heap.
	var (
		stackArray [maxBodyDepth]frame
		pathArray  [maxBodyDepth]string
	)
	var (
		stack = stackArray[:0]
		path  = pathArray[:0] // of the value being read
		root  any
		done  bool // one whole value has been read
	)
	for {
		tok, err := src.next()
		if err == io.EOF {
			if !done {
				return nil, malformed("the request body is not valid JSON: it ends before its value does")
			}
			return root, nil
		}
		if err != nil {
			return nil, err
		}
		if done {
			return nil, malformed("the request body is not valid JSON: it holds more than one JSON value")
		}

		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		// The key of a value in an object, or the index in an array.
		if top != nil && !top.object && tok.kind != ']' {
			path = append(path[:len(stack)-1], strconv.Itoa(len(top.arr)))
		}
		if tok.kind == '"' && top != nil && top.object && top.wantKey {
			if !validJSONString(tok.raw) {
				return nil, invalid([]api.InvalidParam{{Name: bodyField(path[:len(stack)-1]), Reason: "has a key that is not valid UTF-8"}})
			}
			if _, dup := top.obj[tok.str]; dup {
				return nil, invalid([]api.InvalidParam{{Name: bodyField(append(path[:len(stack)-1:len(stack)-1], tok.str)), Reason: "appears more than once in the same object"}})
			}
			top.key = tok.str
			top.wantKey = false
			path = append(path[:len(stack)-1], tok.str)
			continue
		}

		var v any
		switch tok.kind {
		case '}', ']':
			f := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if f.object {
				v = f.obj
			} else {
				v = f.arr
			}
		case '{', '[':
			if len(stack) >= maxBodyDepth {
				valuePath := path[:min(len(stack), len(path))]
				name := "body" // or the top-level field it is in
				if len(valuePath) > 0 && stack[0].object {
					name = bodyField(valuePath[:1])
				}
				return nil, invalid([]api.InvalidParam{{Name: name, Reason: fmt.Sprintf("nests arrays and objects deeper than %d levels", maxBodyDepth)}})
			}
			if tok.kind == '{' {
				stack = append(stack, frame{object: true, wantKey: true, obj: make(map[string]any)})
			} else {
				stack = append(stack, frame{arr: []any{}})
			}
			continue
		case '"':
			if !validJSONString(tok.raw) {
				return nil, invalid([]api.InvalidParam{{Name: bodyField(path[:min(len(stack), len(path))]), Reason: "is not valid UTF-8 (nor may it hold a lone UTF-16 surrogate escape)"}})
			}
			v = tok.str
		case '0':
			valuePath := path[:min(len(stack), len(path))]
			var schema *openapi3.Schema // of an integer field
			if len(valuePath) == 1 {
				schema = intFields[valuePath[0]]
			}
			text, reason := checkNumber(string(tok.raw), schema)
			if reason != "" {
				return nil, invalid([]api.InvalidParam{{Name: bodyField(valuePath), Reason: reason}})
			}
			v = json.Number(text)
		case 't', 'f':
			v = tok.kind == 't'
		case 'n':
			v = nil
		}
		// A whole value was read: it goes into its container, which then
		// wants the next key.
		if len(stack) == 0 {
			root, done = v, true
		} else if top := &stack[len(stack)-1]; top.object {
			top.obj[top.key] = v
			top.wantKey = true
		} else {
			top.arr = append(top.arr, v)
		}
	}
}

// validTokens cuts a body that json.Valid accepted into tokens: with the
// syntax known to be right, each token only has to be found.
type validTokens struct {
	body []byte
	pos  int
}

func (t *validTokens) next() (jsonToken, error) {
	b := t.body
	for t.pos < len(b) && isSeparator(b[t.pos]) {
		t.pos++
	}
	if t.pos == len(b) {
		return jsonToken{}, io.EOF
	}
	start := t.pos
	tok := jsonToken{kind: b[start]}
	switch tok.kind {
	case '{', '}', '[', ']':
		t.pos++
	case '"':
		i, escaped := start+1, false
		for ; b[i] != '"'; i++ {
			if b[i] == '\\' {
				escaped = true
				i++ // the escaped byte, which may be a quote
			}
		}
		t.pos = i + 1
		if !escaped {
			tok.str = string(b[start+1 : i])
		} else {
			var err error
			if tok.str, err = unquote(b[start:t.pos]); err != nil {
				return jsonToken{}, malformed("the request body is not valid JSON: " + syntaxDetail(err))
			}
		}
	case 't', 'n':
		t.pos += len("true")
	case 'f':
		t.pos += len("false")
	default: // a number
		tok.kind = '0'
		for t.pos < len(b) && isNumberByte(b[t.pos]) {
			t.pos++
		}
	}
	tok.raw = b[start:t.pos]
	return tok, nil
}

// unquote is the value of a JSON string literal with escapes.
func unquote(lit []byte) (string, error) {
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err
}

// isSeparator reports whether c is whitespace or a separator between tokens.
func isSeparator(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ':' || c == ','
}

func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// decoderTokens reads any body with json.Decoder.Token, whose errors are
// what a body that is not JSON is refused with.
type decoderTokens struct {
	body []byte
	dec  *json.Decoder
	prev int64
}

func newDecoderTokens(body []byte) *decoderTokens {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	return &decoderTokens{body: body, dec: dec}
}

func (t *decoderTokens) next() (jsonToken, error) {
	tok, err := t.dec.Token()
	if err == io.EOF {
		return jsonToken{}, io.EOF
	}
	if err != nil {
		return jsonToken{}, malformed("the request body is not valid JSON: " + syntaxDetail(err))
	}
	cur := t.dec.InputOffset()
	raw := bytes.TrimLeft(t.body[t.prev:cur], " \t\r\n:,")
	t.prev = cur
	out := jsonToken{raw: raw}
	switch tok := tok.(type) {
	case json.Delim:
		out.kind = byte(tok)
	case string:
		out.kind, out.str = '"', tok
	case json.Number:
		out.kind = '0'
	case bool:
		out.kind = 'f'
		if tok {
			out.kind = 't'
		}
	case nil:
		out.kind = 'n'
	}
	return out, nil
}

// bodyField names the body field at path as invalid_params do ("owner",
// "owner/0"); the body itself is "body", an empty key `""`.
func bodyField(path []string) string {
	if len(path) == 0 {
		return "body"
	}
	parts := make([]string, len(path))
	for i, p := range path {
		if p == "" {
			p = `""`
		}
		parts[i] = p
	}
	return strings.Join(parts, "/")
}

// syntaxDetail describes a JSON syntax error by its byte offset, without
// the decoder's package prefix.
func syntaxDetail(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "it ends before its value does"
	}
	return "it cannot be parsed"
}

// checkNumber checks one JSON number literal; schema is the field's when it
// is an integer, else nil. It returns the literal to use (a whole number in
// an integer field, respelled as a plain integer) or a reason to refuse it.
func checkNumber(lit string, schema *openapi3.Schema) (text, reason string) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) {
		if schema != nil {
			return "", integerRule(schema)
		}
		return "", "is a number too large to be represented"
	}
	if schema == nil {
		return lit, ""
	}
	if _, err := strconv.ParseInt(lit, 10, 64); err == nil {
		return lit, "" // the plain spelling, in range
	}
	if math.Abs(f) >= 1<<64 {
		return "", integerRule(schema)
	}
	n, ok := wholeNumber(lit)
	if !ok {
		return "", integerRule(schema)
	}
	return strconv.FormatInt(n, 10), ""
}

// wholeNumber returns the value of a JSON number literal that is a whole
// number within the int64 range, exactly (no float rounding), from its
// decimal digits: 1.5e1 is 15, 100000.0 is 100000, 1.05e1 is not whole.
// The caller has bounded the value below 2^64, so only a negative exponent
// can be long, and it is never expanded.
func wholeNumber(lit string) (int64, bool) {
	mant, exp, hasExp := strings.Cut(strings.ToLower(lit), "e")
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return 0, true // any spelling of zero
	}
	scale := -len(frac) // value = digits × 10^(scale + exp)
	trimmed := strings.TrimRight(digits, "0")
	scale += len(digits) - len(trimmed)
	if hasExp {
		e, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return 0, false // an exponent beyond int64 with a non-zero mantissa: not a whole int64
		}
		if e < -1<<20 || e > 1<<20 {
			return 0, false
		}
		scale += int(e)
	}
	if scale < 0 || scale+len(trimmed) > 19 {
		return 0, false // a fraction is left, or it has more than 19 digits
	}
	text := trimmed + strings.Repeat("0", scale)
	if neg {
		text = "-" + text
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// integerRule says what an integer field accepts, with the schema's bounds
// printed as plain integers.
func integerRule(schema *openapi3.Schema) string {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if schema.Min != nil {
		lo = int64(*schema.Min)
	}
	if schema.Max != nil {
		hi = int64(*schema.Max)
	}
	return fmt.Sprintf("must be a whole number from %d to %d", lo, hi)
}

// validJSONString reports whether raw, a JSON string literal (possibly after
// a separator and whitespace) that the decoder accepted, is valid UTF-8 and
// escapes no lone UTF-16 surrogate.
func validJSONString(raw []byte) bool {
	i := bytes.IndexByte(raw, '"')
	if i < 0 {
		return false
	}
	s := raw[i:]
	if !utf8.Valid(s) {
		return false
	}
	pendingHigh := false // the previous escape was a high surrogate
	for i := 1; i < len(s)-1; i++ {
		if s[i] != '\\' {
			if pendingHigh {
				return false
			}
			continue
		}
		i++
		if s[i] != 'u' {
			if pendingHigh {
				return false
			}
			continue
		}
		if i+4 >= len(s) {
			return false
		}
		v, err := strconv.ParseUint(string(s[i+1:i+5]), 16, 16)
		if err != nil {
			return false
		}
		i += 4
		switch {
		case v >= 0xD800 && v < 0xDC00:
			if pendingHigh {
				return false
			}
			pendingHigh = true
		case v >= 0xDC00 && v < 0xE000:
			if !pendingHigh {
				return false
			}
			pendingHigh = false
		default:
			if pendingHigh {
				return false
			}
		}
	}
	return !pendingHigh
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
		reason := e.Reason
		if strings.HasPrefix(reason, "an invalid ") { // "an invalid integer"
			reason = "is " + reason + " (plain decimal digits)"
		}
		return append(out, api.InvalidParam{Name: fieldName(prefix, nil), Reason: reason})
	case *openapi3filter.SecurityRequirementsError:
		// Authentication is not the validator's job (see validateRequests).
	default:
		return append(out, api.InvalidParam{Name: fieldName(prefix, nil), Reason: plainNumbers(err.Error())})
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
	return []api.InvalidParam{{Name: fieldName(prefix, pointer), Reason: plainNumbers(reason)}}
}

// floatRE matches a number in exponent notation, as kin-openapi prints a
// schema's bounds ("number must be at most 8.64e+07").
var floatRE = regexp.MustCompile(`-?\d+(?:\.\d+)?[eE][-+]?\d+`)

// plainNumbers respells the whole numbers of a reason in exponent notation
// as plain integers ("8.64e+07" becomes "86400000"): every bound in this API
// is an integer.
func plainNumbers(reason string) string {
	return floatRE.ReplaceAllStringFunc(reason, func(m string) string {
		f, err := strconv.ParseFloat(m, 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<63 {
			return m
		}
		return strconv.FormatInt(int64(f), 10)
	})
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
