package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
			if err := checkRepeatedQuery(req, route.Operation); err != nil {
				return err
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

// checkRepeatedQuery refuses a query parameter of the operation given more
// than once (?owner=a&owner=b): each is one value, and which of two a
// client, a proxy or the validator would take is anyone's guess.
func checkRepeatedQuery(req *http.Request, op *openapi3.Operation) error {
	query := req.URL.Query()
	var params []api.InvalidParam
	for _, p := range op.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInQuery && len(query[p.Value.Name]) > 1 {
			params = append(params, api.InvalidParam{Name: p.Value.Name, Reason: fmt.Sprintf("is given %d times; give it once", len(query[p.Value.Name]))})
		}
	}
	if len(params) > 0 {
		return invalid(params)
	}
	return nil
}

// checkBody reads the body (at most maxBodyBytes), checks that it is present,
// declared as a content type the operation accepts, and strict JSON (see
// strictJSON), and puts it back, with its numbers respelled, for the
// validator and the handler.
func checkBody(req *http.Request, rb *openapi3.RequestBody) error {
	if req.ContentLength > maxBodyBytes {
		return tooLarge()
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBodyBytes+1))
	if err != nil {
		return bodyReadProblem(req, err)
	}
	if len(body) > maxBodyBytes {
		return tooLarge()
	}
	setBody(req, body)

	if n := len(req.Header.Values(echo.HeaderContentType)); n > 1 {
		return newProblem(http.StatusUnsupportedMediaType, problemBlank, "",
			fmt.Sprintf("the request has %d Content-Type headers; give one: application/json", n))
	}
	ct := req.Header.Get(echo.HeaderContentType)
	mt := rb.Content.Get(ct)
	if (ct != "" || len(body) > 0) && mt == nil {
		return newProblem(http.StatusUnsupportedMediaType, problemBlank, "",
			fmt.Sprintf("the request body must be application/json, not %q", ct))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if rb.Required {
			return malformed("a request body is required: a JSON object")
		}
		return nil
	}
	var schema *openapi3.Schema
	if mt.Schema != nil {
		schema = mt.Schema.Value
	}
	strict, err := strictJSON(body, integerFields(schema))
	if err != nil {
		return err
	}
	setBody(req, strict)
	return nil
}

func setBody(req *http.Request, body []byte) {
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
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
// property declared as an integer (nil for any other path): the fields whose
// numbers strictJSON checks and respells.
func integerFields(schema *openapi3.Schema) func(path []string) *openapi3.Schema {
	return func(path []string) *openapi3.Schema {
		if schema == nil || len(path) != 1 {
			return nil
		}
		p := schema.Properties[path[0]]
		if p == nil || p.Value == nil || !p.Value.Type.Is(openapi3.TypeInteger) {
			return nil
		}
		return p.Value
	}
}

// strictJSON checks body in one pass, with encoding/json's token reader
// (no library: the standard decoder already bounds memory by the body's
// 64 KiB, and the token walk is the one place that still sees the bytes
// each token came from). A body is refused when it
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
// whole number (1e5, 100000.0, 1.0E5): the returned body has those numbers
// respelled as plain integers ("100000"), which is what the validator and
// the handler's decoder then read. intField says which paths are integers.
func strictJSON(body []byte, intField func(path []string) *openapi3.Schema) ([]byte, error) {
	type frame struct {
		object  bool
		keys    map[string]struct{}
		wantKey bool // in an object: the next string is a key
		index   int  // in an array: the index of the next value
	}
	type edit struct {
		from, to int64
		text     string
	}
	var (
		stack []frame
		path  []string // of the value being read
		edits []edit
		done  bool // one whole value has been read
	)
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	prev := int64(0)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if !done {
				return nil, malformed("the request body is not valid JSON: it ends before its value does")
			}
			break
		}
		if err != nil {
			return nil, malformed("the request body is not valid JSON: " + syntaxDetail(err))
		}
		if done {
			return nil, malformed("the request body is not valid JSON: it holds more than one JSON value")
		}
		cur := dec.InputOffset()
		raw := body[prev:cur]
		prev = cur

		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		// The key of a value in an object, or the index in an array.
		if top != nil && !top.object {
			if d, ok := tok.(json.Delim); !ok || d != ']' {
				path = append(path[:len(stack)-1], strconv.Itoa(top.index))
				top.index++
			}
		}
		if s, ok := tok.(string); ok && top != nil && top.object && top.wantKey {
			if !validJSONString(raw) {
				return nil, invalid([]api.InvalidParam{{Name: bodyField(path[:len(stack)-1]), Reason: "has a key that is not valid UTF-8"}})
			}
			if _, dup := top.keys[s]; dup {
				return nil, invalid([]api.InvalidParam{{Name: bodyField(append(path[:len(stack)-1:len(stack)-1], s)), Reason: "appears more than once in the same object"}})
			}
			top.keys[s] = struct{}{}
			top.wantKey = false
			path = append(path[:len(stack)-1], s)
			continue
		}

		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
		}
		valuePath := path[:min(len(stack), len(path))]
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) >= maxBodyDepth {
					name := "body" // or the top-level field it is in
					if len(valuePath) > 0 && stack[0].object {
						name = bodyField(valuePath[:1])
					}
					return nil, invalid([]api.InvalidParam{{Name: name, Reason: fmt.Sprintf("nests arrays and objects deeper than %d levels", maxBodyDepth)}})
				}
				stack = append(stack, frame{object: t == '{', keys: map[string]struct{}{}, wantKey: t == '{'})
				continue
			} // '}' or ']' ended its container above

		case string:
			if !validJSONString(raw) {
				return nil, invalid([]api.InvalidParam{{Name: bodyField(valuePath), Reason: "is not valid UTF-8 (nor may it hold a lone UTF-16 surrogate escape)"}})
			}
		case json.Number:
			lit := strings.TrimLeft(string(raw), " \t\r\n:,")
			text, reason := checkNumber(lit, intField(valuePath))
			if reason != "" {
				return nil, invalid([]api.InvalidParam{{Name: bodyField(valuePath), Reason: reason}})
			}
			if text != lit {
				edits = append(edits, edit{from: cur - int64(len(lit)), to: cur, text: text})
			}
		}
		// A whole value was read: its container wants the next key.
		if len(stack) == 0 {
			done = true
		} else if top := &stack[len(stack)-1]; top.object {
			top.wantKey = true
		}
	}
	if len(edits) == 0 {
		return body, nil
	}
	out := make([]byte, 0, len(body))
	at := int64(0)
	for _, e := range edits {
		out = append(out, body[at:e.from]...)
		out = append(out, e.text...)
		at = e.to
	}
	return append(out, body[at:]...), nil
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
