package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// maxBodyBytes bounds a request body; larger bodies are answered 413.
const maxBodyBytes = 64 << 10

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
			if err := checkParamSpelling(req, op); err != nil {
				return err
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

// checkParamSpelling refuses, before the schemas are consulted:
//   - a query parameter the operation does not list (?sinse=0): a misspelt
//     parameter would otherwise be ignored, and the request do something
//     the client did not ask for;
//   - a query or header parameter given more than once (?owner=a&owner=b,
//     two Last-Event-ID lines): each is one value, and which of two a
//     client, a proxy or the validator would take is anyone's guess;
//   - an integer parameter that is not plain decimal digits (plainInteger):
//     the parsers behind the validator also take "+5" and "-0", and a
//     proxy or another server may read them otherwise.
//
// Each offending parameter is named, once.
func checkParamSpelling(req *http.Request, op *operation) error {
	if req.URL.RawQuery == "" && len(op.headers) == 0 {
		return nil
	}
	query := req.URL.Query()
	var params []api.InvalidParam
	for _, name := range slices.Sorted(maps.Keys(query)) {
		if _, known := slices.BinarySearch(op.query, name); !known {
			reason := "is not a parameter of this operation, which takes none"
			if len(op.query) > 0 {
				reason = "is not a parameter of this operation (its parameters: " + strings.Join(op.query, ", ") + ")"
			}
			params = append(params, api.InvalidParam{Name: name, Reason: reason})
		}
	}
	values := func(name string) []string {
		if slices.Contains(op.headers, name) {
			return req.Header.Values(name)
		}
		return query[name]
	}
	for _, name := range append(slices.Clip(op.query), op.headers...) {
		if n := len(values(name)); n > 1 {
			params = append(params, api.InvalidParam{Name: name, Reason: fmt.Sprintf("is given %d times; give it once", n)})
		}
	}
	for _, name := range op.integers {
		if v := values(name); len(v) == 1 && !plainInteger(v[0]) {
			params = append(params, api.InvalidParam{Name: name, Reason: "must be an integer in plain decimal digits, such as 0 or 42 " +
				"(no sign, spaces, leading zeros or exponent, and at most 9223372036854775807)"})
		}
	}
	if len(params) > 0 {
		return invalid(params)
	}
	return nil
}

// plainInteger says whether v is an integer as the API writes them: decimal
// digits without a leading zero (or 0 itself), with a minus sign only
// before a number other than 0, within int64. A negative value then meets
// its schema's minimum, which names the bound.
func plainInteger(v string) bool {
	digits := strings.TrimPrefix(v, "-")
	if digits == "" || (digits[0] == '0' && (len(digits) > 1 || len(digits) < len(v))) {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	_, err := strconv.ParseInt(v, 10, 64)
	return err == nil
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
	if task, ok := e.Value.(string); ok && e.SchemaField == "pattern" && isTaskName(e.Schema) {
		// A task name: the rule as leasecore states it, with where the
		// name breaks it ("segment 2 is \"\""), as the CLI says it. The
		// only parts of the name it repeats are one quoted character or
		// an empty, "." or ".." segment.
		var ve *leasecore.ValidationError
		if err := leasecore.ValidateTask(task); errors.As(err, &ve) {
			return []api.InvalidParam{{Name: fieldName(prefix, pointer), Reason: ve.Rule}}
		}
	}
	if e.SchemaField == "pattern" && e.Schema.Description != "" {
		// "string doesn't match the regular expression …" says less than
		// the schema's own description of the rule.
		desc := strings.TrimSuffix(strings.ReplaceAll(e.Schema.Description, "`", ""), ".")
		reason = fmt.Sprintf("must be %s (pattern %s)", strings.TrimSpace(desc), e.Schema.Pattern)
	}
	return []api.InvalidParam{{Name: fieldName(prefix, pointer), Reason: plainNumbers(reason)}}
}

// isTaskName reports whether schema is openapi.yaml's TaskName (the task
// name rule, which leasecore.ValidateTask states; openapi_test.go keeps
// the two in step), known by its pattern.
func isTaskName(schema *openapi3.Schema) bool {
	sp, err := spec()
	if err != nil || schema == nil {
		return false
	}
	ref := sp.doc.Components.Schemas["TaskName"]
	return ref != nil && ref.Value != nil && schema.Pattern == ref.Value.Pattern
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
