package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/leasehold/leasehold/sidecar/api"
)

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
//   - is not exactly one JSON value (400 malformed, naming the byte where
//     the syntax breaks);
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
// One tokenizer cuts every body: the syntax is encoding/json's. A body
// json.Valid accepts (every body a client means) is cut whole, and each
// token only has to be found. For any other body, syntaxBreak first asks
// encoding/json's scanner where the syntax breaks, and the tokens wholly
// before that byte are cut as for a valid body, so strictValue applies the
// rules to them in order and the first rule broken is the one named, even
// before the break; at the break the body is refused as malformed, naming
// the byte.
func strictJSON(body []byte, intFields map[string]*openapi3.Schema) (any, error) {
	t := tokens{body: body}
	if !json.Valid(body) {
		end, detail := syntaxBreak(body)
		t = tokens{body: body[:end], broken: detail}
	}
	return strictValue(&t, intFields)
}

// jsonToken is one token of a body: its kind (one of {}[]" for delimiters
// and strings, '0' for a number, 't', 'f', 'n' for true, false and null),
// its bytes as sent (a string's with its quotes), and a string's value.
type jsonToken struct {
	kind byte
	raw  []byte
	str  string
}

// strictValue applies strictJSON's rules to the tokens of src and builds
// the value.
func strictValue(src *tokens, intFields map[string]*openapi3.Schema) (any, error) {
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
		// src yields io.EOF only after one whole value, and stops at the
		// byte where the syntax breaks, so the two malformed answers here
		// are guards: strictValue alone never accepts less or more than
		// one value.
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

// tokens cuts a body into tokens, then yields io.EOF, or, for a body that
// is not JSON, the malformed problem at the byte where its syntax breaks.
// body ends at that byte; everything before it is a prefix of a JSON text
// (encoding/json's scanner says so), so each token only has to be found,
// and a token is yielded only when it ends before body does, and is
// whole: a string with its closing quote, a literal with all its letters,
// a number with its last digit.
type tokens struct {
	body   []byte
	pos    int
	broken string // why the syntax breaks at the end of body; "" when the body is JSON
}

func (t *tokens) next() (jsonToken, error) {
	b := t.body
	for t.pos < len(b) && isSeparator(b[t.pos]) {
		t.pos++
	}
	if t.pos == len(b) {
		return jsonToken{}, t.end()
	}
	start := t.pos
	tok := jsonToken{kind: b[start]}
	switch tok.kind {
	case '{', '}', '[', ']':
		t.pos++
	case '"':
		i, escaped := start+1, false
		for ; i < len(b) && b[i] != '"'; i++ {
			if b[i] == '\\' {
				escaped = true
				i++ // the escaped byte, which may be a quote
			}
		}
		if i >= len(b) {
			return jsonToken{}, t.end() // the break is inside the string
		}
		t.pos = i + 1
		if !escaped {
			tok.str = string(b[start+1 : i])
		} else {
			var err error
			if tok.str, err = unquote(b[start:t.pos]); err != nil {
				// Not reached: the scanner has checked the literal.
				return jsonToken{}, malformed("the request body is not valid JSON: a string cannot be read")
			}
		}
	case 't', 'n':
		if t.pos += len("true"); t.pos > len(b) {
			return jsonToken{}, t.end()
		}
	case 'f':
		if t.pos += len("false"); t.pos > len(b) {
			return jsonToken{}, t.end()
		}
	default: // a number
		tok.kind = '0'
		for t.pos < len(b) && isNumberByte(b[t.pos]) {
			t.pos++
		}
		// Cut short by the break ("1.", "-", "1e+"), a number does not end
		// with a digit; every whole one does.
		if t.pos == start || b[t.pos-1] < '0' || b[t.pos-1] > '9' {
			return jsonToken{}, t.end()
		}
	}
	tok.raw = b[start:t.pos]
	return tok, nil
}

// end is what follows the last whole token: io.EOF, or the problem with
// the body's syntax.
func (t *tokens) end() error {
	t.pos = len(t.body)
	if t.broken == "" {
		return io.EOF
	}
	return malformed("the request body is not valid JSON: " + t.broken)
}

// syntaxBreak finds where a body that json.Valid refused stops being JSON:
// end is the offset of the first byte no JSON text could have there, or
// len(body) when the body ends before its value does, and detail says so
// without the scanner's package prefix. A byte after a whole value that
// begins another is "more than one JSON value".
func syntaxBreak(body []byte) (end int, detail string) {
	// encoding/json's scanner names the byte that breaks the syntax. With
	// a control byte appended, which no JSON text holds anywhere, a body
	// that only ends early breaks at that byte instead of at its end,
	// whatever it was in the middle of.
	probe := append(body[:len(body):len(body)], 0x01)
	var se *json.SyntaxError
	if err := json.Unmarshal(probe, new(json.RawMessage)); !errors.As(err, &se) || se.Offset < 1 {
		return len(body), "it cannot be parsed" // not reached: probe is never JSON
	}
	end = int(se.Offset) - 1 // Offset counts the breaking byte
	msg := strings.TrimPrefix(se.Error(), "json: ")
	switch {
	case end >= len(body):
		return len(body), "it ends before its value does"
	case strings.HasSuffix(msg, "after top-level value") && strings.IndexByte(`{["-0123456789tfn`, body[end]) >= 0:
		return end, "it holds more than one JSON value"
	}
	return end, fmt.Sprintf("%s (at byte %d)", msg, end)
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

// validJSONString reports whether raw, a JSON string literal that the
// scanner accepted, is valid UTF-8 and escapes no lone UTF-16 surrogate.
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
