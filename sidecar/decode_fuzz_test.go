package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzStrictJSON checks the request-body check against the claim's schema:
// it never panics; what it refuses is a 400 or a 422 naming a field; what
// it accepts is valid UTF-8 without lone surrogates or repeated keys, is
// decoded to the value encoding/json gives the body, and has every integer
// field as plain digits that fit an int64. A body json.Valid refuses is
// refused, and a malformed body's detail names a byte of the body by its
// offset; a body json.Valid accepts, broken after its value, is refused
// for the rule it broke before, if any, else for the break. The seeds run
// in `make test`; `make fuzz` runs it for FUZZTIME.
func FuzzStrictJSON(f *testing.F) {
	sp, err := spec()
	if err != nil {
		f.Fatal(err)
	}
	schema := sp.doc.Components.Schemas["ClaimRequest"].Value
	for _, s := range []string{
		`{"owner":"w"}`, `{"owner":"w","ttl_ms":30000,"note":"n"}`, `{"owner":"w","ttl_ms":1e5}`,
		`{"owner":"w","ttl_ms":100000.0}`, `{"owner":"w","ttl_ms":100.5}`, `{"owner":"w","ttl_ms":1e400}`,
		`{"owner":"w","ttl_ms":9223372036854775808}`, `{"owner":"w","ttl_ms":-0.0e3}`, `{"owner":"a","owner":"b"}`,
		"{\"owner\":\"a\xff\"}", `{"owner":"\ud800"}`, `{"owner":"\ud83d\ude00"}`, `{"owner":"\\ud800"}`,
		`{"a":{"b":[1,{"c":2,"c":3}]}}`, `[` + strings.Repeat(`[`, 20), `{"owner":"w"}{}`, `{"owner":"w"} x`,
		`"just a string"`, `5`, `null`, `{}`, `[]`, ``, ` `, `{"owner":"w",}`, `{"owner" "w"}`,
		`{"\u0000":1}`, `{"owner":"w","ttl_ms":1E+5,"note":"\u00e9"}`, ` { "owner" : "a\"b" , "x" : [ true, false, null, -1.5e-3 ] } `,
		strings.Repeat(`[`, 17) + strings.Repeat(`]`, 17), `{"a":[[],{}],"b":{"a":{}}}`,
	} {
		f.Add([]byte(s))
	}
	intFields := integerFields(schema)
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := strictJSON(body, intFields)
		if json.Valid(body) {
			// The same body broken after its value: the rules broken
			// before the break are named first, else the break is.
			broken := append(bytes.Clone(body), 0x01)
			_, brokenErr := strictJSON(broken, intFields)
			want := error(malformed(fmt.Sprintf("the request body is not valid JSON: invalid character '\\x01' after top-level value (at byte %d)", len(body))))
			if err != nil {
				want = err
			}
			if !reflect.DeepEqual(brokenErr, want) {
				t.Fatalf("%q: refused with %v, %q with %v", body, err, broken, brokenErr)
			}
		} else if err == nil {
			t.Fatalf("accepted %q, which json.Valid refuses", body)
		}
		if err != nil {
			var p *problemError
			if !errors.As(err, &p) {
				t.Fatalf("refusal %v is not a problem", err)
			}
			switch p.Status {
			case http.StatusBadRequest:
				// A byte named is in the body, and is the byte named.
				if m := atByte.FindStringSubmatch(p.Detail); m != nil {
					n, _ := strconv.Atoi(m[2])
					if n >= len(body) || m[1] != quoteByte(body[n]) {
						t.Fatalf("%q: %q names the wrong byte", body, p.Detail)
					}
				}
			case http.StatusUnprocessableEntity:
				if p.InvalidParams == nil || len(*p.InvalidParams) == 0 || (*p.InvalidParams)[0].Name == "" {
					t.Fatalf("422 names no field: %+v", p.Problem)
				}
			default:
				t.Fatalf("refused with status %d: %+v", p.Status, p.Problem)
			}
			return
		}

		if !utf8.Valid(body) {
			t.Fatalf("accepted invalid UTF-8: %q", body)
		}
		var before any
		if err := json.Unmarshal(body, &before); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
		}
		if after := numbersAsFloats(t, out); !reflect.DeepEqual(before, after) {
			t.Fatalf("accepted %q as %#v, which encoding/json decodes as %#v", body, out, before)
		}
		if n := keysInText(body); n != keysInValue(before) {
			t.Fatalf("accepted %q, which repeats a key (%d keys, %d distinct)", body, n, keysInValue(before))
		}
		if hasReplacementChar(before) && !bytes.Contains(body, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)) {
			t.Fatalf("accepted %q, which encoding/json decodes with U+FFFD it does not contain (a lone surrogate)", body)
		}
		// Integer fields reach the handler as plain int64 digits.
		if obj, ok := out.(map[string]any); ok {
			for field := range obj {
				if intFields[field] == nil {
					continue
				}
				if n, ok := obj[field].(json.Number); ok {
					if _, err := strconv.ParseInt(string(n), 10, 64); err != nil {
						t.Fatalf("accepted %q with %s %q, not plain int64 digits", body, field, n)
					}
				}
			}
		}
	})
}

// atByte finds the byte a syntax error names: the character as
// encoding/json quotes it, and its offset.
var atByte = regexp.MustCompile(`invalid character ('\\''|'[^']*') .*\(at byte (\d+)\)$`)

// quoteByte quotes c as encoding/json's syntax errors do.
func quoteByte(c byte) string {
	switch c {
	case '\'':
		return `'\''`
	case '"':
		return `'"'`
	}
	q := strconv.Quote(string(rune(c)))
	return "'" + q[1:len(q)-1] + "'"
}

// numbersAsFloats is v with each json.Number as the float64 encoding/json
// would decode it to.
func numbersAsFloats(t *testing.T, v any) any {
	switch v := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			t.Fatalf("number %q: %v", v, err)
		}
		return f
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = numbersAsFloats(t, e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = numbersAsFloats(t, e)
		}
		return out
	}
	return v
}

// keysInText counts the keys of every object in a JSON text: the colons
// outside strings.
func keysInText(b []byte) int {
	n, inString, escaped := 0, false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && c == ':':
			n++
		}
	}
	return n
}

// keysInValue counts the distinct keys of every object in a decoded value.
func keysInValue(v any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		n += len(v)
		for _, e := range v {
			n += keysInValue(e)
		}
	case []any:
		for _, e := range v {
			n += keysInValue(e)
		}
	}
	return n
}

func hasReplacementChar(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, utf8.RuneError)
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, utf8.RuneError) || hasReplacementChar(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasReplacementChar(e) {
				return true
			}
		}
	}
	return false
}
