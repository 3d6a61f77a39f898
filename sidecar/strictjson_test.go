package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

var updateStrictAnswers = flag.Bool("update-strict-answers", false,
	"rewrite testdata/strictjson_answers.txt with strictJSON's current answers")

// strictAnswersFile holds strictJSON's answer to each body of
// strictAnswerBodies: one line per body, the body quoted, a tab, the answer.
const strictAnswersFile = "testdata/strictjson_answers.txt"

// TestStrictJSONAnswers: strictJSON gives each body of a corpus of broken
// and hostile bodies the answer recorded in strictAnswersFile (problem type,
// detail, invalid_params, or the value accepted), so a change to how bodies
// are cut into tokens changes no answer unnoticed; a syntax error names
// the byte where the syntax breaks by its offset. The corpus is the fuzz
// seeds, every truncation of typical bodies, every single-byte breakage of
// a claim body, and syntax breaks after a rule is already broken.
// -update-strict-answers rewrites the file.
func TestStrictJSONAnswers(t *testing.T) {
	t.Parallel()
	sp, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	// The integer fields of the claim (ttl_ms) and of the renewal (token).
	intFields := integerFields(sp.doc.Components.Schemas["ClaimRequest"].Value)
	maps.Copy(intFields, integerFields(sp.doc.Components.Schemas["RenewRequest"].Value))
	var got strings.Builder
	for _, body := range strictAnswerBodies(t) {
		got.WriteString(strconv.Quote(string(body)) + "\t" + strictAnswer(t, body, intFields) + "\n")
	}
	if *updateStrictAnswers {
		if err := os.WriteFile(strictAnswersFile, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(strictAnswersFile)
	if err != nil {
		t.Fatal(err)
	}
	gotLines, wantLines := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
	if len(gotLines) != len(wantLines) {
		t.Fatalf("%d answers, %s holds %d: rerun with -update-strict-answers after changing the corpus",
			len(gotLines)-1, strictAnswersFile, len(wantLines)-1)
	}
	diffs := 0
	for i := range gotLines {
		if gotLines[i] != wantLines[i] {
			if diffs++; diffs <= 20 {
				t.Errorf("answer changed:\n got %s\nwant %s", gotLines[i], wantLines[i])
			}
		}
	}
	if diffs > 0 {
		t.Errorf("%d of %d answers changed", diffs, len(gotLines)-1)
	}
}

// strictAnswer is strictJSON's answer to body, as one line.
func strictAnswer(t *testing.T, body []byte, intFields map[string]*openapi3.Schema) string {
	t.Helper()
	v, err := strictJSON(body, intFields)
	if err == nil {
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%q: accepted value %#v does not encode: %v", body, v, err)
		}
		return "accepted " + string(out)
	}
	var p *problemError
	if !errors.As(err, &p) {
		t.Fatalf("%q: refusal %v is not a problem", body, err)
	}
	// A byte a syntax error names is in the body, and is the byte named.
	if m := atByte.FindStringSubmatch(p.Detail); m != nil {
		if n, _ := strconv.Atoi(m[2]); n >= len(body) || m[1] != quoteByte(body[n]) {
			t.Errorf("%q: %q names the wrong byte", body, p.Detail)
		}
	}
	answer := fmt.Sprintf("%d %s %q", p.Status, p.Type, p.Detail)
	if p.InvalidParams != nil {
		for _, ip := range *p.InvalidParams {
			answer += fmt.Sprintf(" [%q %q]", ip.Name, ip.Reason)
		}
	}
	return answer
}

// strictAnswerBodies is the corpus of TestStrictJSONAnswers, in a fixed
// order.
func strictAnswerBodies(t *testing.T) [][]byte {
	t.Helper()
	var bodies [][]byte
	add := func(b []byte) { bodies = append(bodies, bytes.Clone(b)) }

	// The fuzz seeds and the fuzz corpus's failures kept in testdata.
	seeds := []string{
		`{"owner":"w"}`, `{"owner":"w","ttl_ms":30000,"note":"n"}`, `{"owner":"w","ttl_ms":1e5}`,
		`{"owner":"w","ttl_ms":100000.0}`, `{"owner":"w","ttl_ms":100.5}`, `{"owner":"w","ttl_ms":1e400}`,
		`{"owner":"w","ttl_ms":9223372036854775808}`, `{"owner":"w","ttl_ms":-0.0e3}`, `{"owner":"a","owner":"b"}`,
		"{\"owner\":\"a\xff\"}", `{"owner":"\ud800"}`, `{"owner":"\ud83d\ude00"}`, `{"owner":"\\ud800"}`,
		`{"a":{"b":[1,{"c":2,"c":3}]}}`, `[` + strings.Repeat(`[`, 20), `{"owner":"w"}{}`, `{"owner":"w"} x`,
		`"just a string"`, `5`, `null`, `{}`, `[]`, ``, ` `, `{"owner":"w",}`, `{"owner" "w"}`,
		`{"\u0000":1}`, `{"owner":"w","ttl_ms":1E+5,"note":"\u00e9"}`, ` { "owner" : "a\"b" , "x" : [ true, false, null, -1.5e-3 ] } `,
		strings.Repeat(`[`, 17) + strings.Repeat(`]`, 17), `{"a":[[],{}],"b":{"a":{}}}`,
	}
	for _, s := range seeds {
		add([]byte(s))
	}
	corpus, err := filepath.Glob("testdata/fuzz/FuzzStrictJSON/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range corpus {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// go test fuzz v1, then one []byte("...") line.
		_, lit, _ := strings.Cut(strings.TrimSpace(string(data)), "[]byte(")
		s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		add([]byte(s))
	}

	// Every truncation of typical and hostile bodies: each ends before its
	// value does, unless a rule broken earlier is named first.
	for _, s := range []string{
		`{"owner":"worker-1","ttl_ms":30000,"note":"nightly \"export\" \u00e9"}`,
		` { "owner" : "a\"b" , "x" : [ true, false, null, -1.5e-3 ] } `,
		`{"owner":"w","ttl_ms":1.5e3,"token":-0.0E+1}`,
		`{"owner":"a","owner":"b","ttl_ms":1x}`,
		`{"owner":"w","ttl_ms":100.5,"note":tru}`,
		"{\"owner\":\"a\xff\",\"note\":\"\\ud800\"}",
		`[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]`,
	} {
		for i := range len(s) {
			add([]byte(s[:i]))
		}
	}

	// Every byte of a claim body replaced by, or followed by, a byte that
	// breaks or changes its syntax.
	claim := `{"owner":"w-1","ttl_ms":1e5,"note":"a\"b"}`
	for i := range len(claim) {
		for _, c := range []byte{'x', '}', ']', ',', ':', '"', '\\', '0', '.', '-', ' ', 0x01} {
			add([]byte(claim[:i] + string(c) + claim[i+1:]))
			add([]byte(claim[:i] + string(c) + claim[i:]))
		}
	}

	// Syntax breaks after a rule is broken, and hostile shapes.
	for _, s := range []string{
		`{"owner":"a","owner":"b"`, `{"owner":"a","owner":"b" x`, `{"owner":"a","owner":`,
		`{"ttl_ms":1.5`, `{"ttl_ms":1.5,`, `{"ttl_ms":1.5 x}`, `{"ttl_ms":1.}`, `{"ttl_ms":1.`, `{"ttl_ms":-`,
		`{"ttl_ms":1e400 "x"}`, `{"ttl_ms":01}`, `{"ttl_ms":1.5.3}`, `{"ttl_ms":1e}`, `{"ttl_ms":1e+}`,
		`{"owner":"\ud800" x}`, "{\"owner\":\"\xff\"", `{"owner":"\x"}`, `{"owner":"\u12"}`, `{"owner":"\u12x4"}`,
		"{\"owner\":\"a\nb\"}", `{"owner":"a\`, `{"owner":nul}`, `{"owner":nulx}`, `{"owner":True}`,
		`{"a":[1 2]}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":{}]}`, `{1:2}`, `{]`, `{,}`, `{:}`, `{[}`,
		`{"a"}`, `{"a",1}`, `{"a":1:2}`, `{"a"::1}`, `[}`, `]`, `}`, `:`, `,`, `x`, `'a'`,
		`{} x`, `{}]`, `{}}`, `{} ,`, `{}{}`, `{} []`, `{} "a"`, `{} "a`, `{} 1`, `{} 1.`, `{} 1.x`, `{} tru`,
		`{} tx`, `{} null`, `{} nulll`, `nulll`, `01`, `-01`, `1.5.3`, `1 2`, `"a" "b"`, `"a""b"`, `[]]`,
		"\ufeff{}", "{}\x00", `{"a":1}` + "\t\r\n ", `{"a":1}` + "\u00a0", `{"a":"` + strings.Repeat("é", 40) + `"`,
		strings.Repeat(`[`, 17) + `x`, strings.Repeat(`{"a":`, 17) + `x`, strings.Repeat(`[`, 10001),
		strings.Repeat(`[1,`, 15) + `{"a":1,"a":2` + strings.Repeat(`]`, 16) + `x`,
	} {
		add([]byte(s))
	}
	return bodies
}

// BenchmarkStrictJSON: strictJSON on a typical claim body, a claim with
// escapes and non-ASCII text, and malformed bodies (cut short, broken in
// the middle, a second value after the first).
func BenchmarkStrictJSON(b *testing.B) {
	sp, err := spec()
	if err != nil {
		b.Fatal(err)
	}
	intFields := integerFields(sp.doc.Components.Schemas["ClaimRequest"].Value)
	for _, c := range []struct {
		name, body string
		ok         bool
	}{
		{"claim", `{"owner":"worker-7","ttl_ms":30000,"note":"nightly export"}`, true},
		{"claim-escaped", `{"owner":"w-\ud83d\ude00-é","ttl_ms":1e5,"note":"a \"quoted\" note\nwith a newline"}`, true},
		{"malformed-truncated", `{"owner":"worker-7","ttl_ms":30000,"note":"nightly`, false},
		{"malformed-middle", `{"owner":"worker-7","ttl_ms":30000 "note":"nightly export"}`, false},
		{"malformed-second-value", `{"owner":"worker-7","ttl_ms":30000,"note":"nightly export"}{}`, false},
	} {
		body := []byte(c.body)
		if _, err := strictJSON(body, intFields); (err == nil) != c.ok {
			b.Fatalf("%s: %v", c.name, err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				_, _ = strictJSON(body, intFields)
			}
		})
	}
}
