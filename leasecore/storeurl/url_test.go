package storeurl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
)

// leakA and leakB are the two halves of a password built around a
// character that could end a naive parse early; neither may be shown.
const leakA, leakB = "alpha7", "omega9"

// tricky are passwords holding every character a userinfo or query
// password may carry (taken from the redact package's tests).
var tricky = []string{
	leakA + "'" + leakB,
	leakA + "`" + leakB,
	leakA + "\"" + leakB,
	leakA + "!$&()*+,;=" + leakB,
	leakA + "%40" + leakB,
	leakA + "@" + leakB,
	leakA + ":" + leakB,
	leakA + "/" + leakB,
	leakA + "?" + leakB,
	leakA + "#" + leakB,
	leakA + " " + leakB,
	leakA + "'@`:\"/" + leakB,
	leakA + "@x//?" + leakB,
	leakA + "://" + leakB,
	"'" + leakA + leakB + "'",
}

// urlShapes are the store URLs to print: shapes (storeurl_test.go) and
// every tricky password in every place a PostgreSQL URL carries one, raw
// and percent-encoded.
func urlShapes() []string {
	out := append([]string(nil), shapes...)
	for _, pw := range tricky {
		for _, enc := range []string{pw, url.PathEscape(pw), url.QueryEscape(pw)} {
			out = append(out,
				"postgres://u:"+enc+"@127.0.0.1:5432/db",
				"postgresql://u:"+enc+"@h1:5432,h2:5433/db?target_session_attrs=read-write",
				"postgres://u:"+enc+"@[::1]:5432/db?sslmode=disable",
				"postgres://o'brien:"+enc+"@h/db",
				"postgres://u@h/db?password="+enc,
				"postgres://u@h/db?sslmode=disable&PassWord="+enc+"&x=1",
				"postgres://u@h/db?sslpassword="+enc,
				"postgres://u@h/db?%70assword="+enc,
				"postgres://u@h/db?pass%77ord="+enc,
				"postgres://u:"+enc+"@h1:1,h2:2/db?password="+enc,
				"postgres://u:"+enc+"@h?sslpassword="+enc,
			)
		}
	}
	return out
}

// holds reports whether s shows any part of a test password.
func holds(s string) bool {
	return strings.Contains(s, "s3cr3t") || strings.Contains(s, leakA) || strings.Contains(s, leakB)
}

// TestURLMasksEverywhere prints every shape that parses every way a URL
// can leave the process: String, the fmt verbs, slog's text and JSON
// handlers (with no ReplaceAttr: the type masks itself), encoding/json and
// wrapped errors. Shapes that do not parse must say so without the
// password.
func TestURLMasksEverywhere(t *testing.T) {
	t.Parallel()
	parsed := 0
	for _, raw := range urlShapes() {
		u, err := Parse(raw)
		if err != nil {
			if holds(err.Error()) || holds(fmt.Sprintf("%+v", err)) {
				t.Errorf("Parse(%q) error shows the password: %v", raw, err)
			}
			continue
		}
		parsed++
		if u.Secret() != raw {
			t.Errorf("Parse(%q).Secret() = %q, want the URL as given", raw, u.Secret())
		}
		var texts []string
		texts = append(texts, u.String(), u.GoString())
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%10v", "%-v"} {
			texts = append(texts, fmt.Sprintf(verb, u), fmt.Sprintf(verb, &u))
		}
		texts = append(texts, fmt.Sprintf("%v", struct{ Store URL }{u}), fmt.Sprintf("%+v", struct{ Store URL }{u}), fmt.Sprintf("%#v", struct{ Store URL }{u}))
		texts = append(texts, fmt.Sprint(u), fmt.Sprintln(u), fmt.Sprint([]URL{u}), fmt.Sprint(map[string]URL{"s": u}))
		for _, newHandler := range []func(*bytes.Buffer) slog.Handler{
			func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
			func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		} {
			var buf bytes.Buffer
			log := slog.New(newHandler(&buf))
			log.Info("opening", "store", u, "ptr", &u, "any", any(u))
			log.Info("opening", slog.Any("store", u), slog.Group("g", slog.Any("store", u)))
			log.With("store", u).Error("failed", "err", fmt.Errorf("open %v: boom", u))
			texts = append(texts, buf.String())
		}
		for _, v := range []any{u, &u, struct{ Store URL }{u}, map[string]URL{"s": u}, []URL{u}} {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("json.Marshal(%T): %v", v, err)
			}
			texts = append(texts, string(b))
		}
		base := errors.New("refused")
		wrapped := fmt.Errorf("serve: %w", fmt.Errorf("open store %s: %w", u, base))
		if !errors.Is(wrapped, base) {
			t.Errorf("errors.Is lost the cause")
		}
		texts = append(texts, wrapped.Error(), fmt.Errorf("store %v", u).Error(), fmt.Errorf("store %q", u).Error())
		for _, text := range texts {
			if holds(text) {
				t.Errorf("%q shows the password as %q", raw, text)
			}
		}
		if scheme, _, _ := strings.Cut(raw, ":"); !strings.HasPrefix(u.String(), scheme+":") {
			t.Errorf("%q prints as %q, which does not name its scheme", raw, u)
		}
	}
	// Most shapes are well-formed: a parse that refused them all would
	// pass the checks above vacuously.
	if parsed < 200 {
		t.Errorf("only %d shapes parsed", parsed)
	}
}

// TestURLMaskedForm pins what a URL prints as: the password (userinfo or
// query) masked, everything else as given.
func TestURLMaskedForm(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"sqlite:./leasehold.db":                                                    "sqlite:./leasehold.db",
		"sqlite:///var/lib/leasehold.db":                                           "sqlite:///var/lib/leasehold.db",
		"postgres://leasehold@127.0.0.1:5432/leasehold":                            "postgres://leasehold@127.0.0.1:5432/leasehold",
		"postgres://127.0.0.1:5432/db?sslmode=disable":                             "postgres://127.0.0.1:5432/db?sslmode=disable",
		"postgres://u:s3cr3t@h:5432/db":                                            "postgres://u:xxxxx@h:5432/db",
		"postgresql://u:s3cr3t@h1:5432,h2:5433/db?target_session_attrs=read-write": "postgresql://u:xxxxx@h1:5432,h2:5433/db?target_session_attrs=read-write",
		"postgres://u:@h/db":                                                       "postgres://u:xxxxx@h/db",
		"postgres://u@h/db?sslmode=disable&Password=s3cr3t&x=1":                    "postgres://u@h/db?sslmode=disable&Password=xxxxx&x=1",
		"postgres://u@h/db?pass%77ord=s3cr3t&sslpassword=s3cr3t":                   "postgres://u@h/db?pass%77ord=xxxxx&sslpassword=xxxxx",
		"postgres://u:s3cr3t@h?application_name=a%40b":                             "postgres://u:xxxxx@h?application_name=a%40b",
	} {
		u, err := Parse(raw)
		if err != nil {
			t.Errorf("Parse(%q): %v", raw, err)
			continue
		}
		if got := u.String(); got != want {
			t.Errorf("Parse(%q).String() = %q, want %q", raw, got, want)
		}
		if got := fmt.Sprintf("%#v", u); got != fmt.Sprintf("storeurl.URL(%q)", want) {
			t.Errorf("%%#v of %q = %s", raw, got)
		}
		var got string
		if b, err := json.Marshal(u); err != nil || json.Unmarshal(b, &got) != nil || got != want {
			t.Errorf("json.Marshal(%q) = %s, %v; want %q", raw, b, err, want)
		}
	}
}

// TestParseRefuses names the rule a store URL breaks, and never quotes a
// text it does not accept.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"":                                 "store URL (empty) must be sqlite:PATH or postgres://",
		"sqlite:":                          "sqlite: needs a file path",
		"mysql://u:s3cr3t@h/db":            "store URL (scheme mysql) must be sqlite:PATH or postgres://",
		"host=h user=u password=s3cr3t":    "store URL (a key=value connection string) must be",
		"u:s3cr3t@h/db":                    "store URL must be sqlite:PATH or postgres://",
		"postgres://u:s3/cr3t@h/db":        "percent-encode",
		"postgres://u:s3cr3t@h:notaport/x": "postgres store URL",
	} {
		_, err := Parse(raw)
		if err == nil {
			t.Errorf("Parse(%q) accepted it", raw)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want it to say %q", raw, err, want)
		}
		if strings.Contains(err.Error(), "cr3t") {
			t.Errorf("Parse(%q) = %v shows the password", raw, err)
		}
	}
	var zero URL
	if !zero.IsZero() || zero.String() != "" {
		t.Errorf("zero URL: IsZero %v, String %q", zero.IsZero(), zero)
	}
	if _, err := Open(t.Context(), zero); err == nil {
		t.Errorf("Open(zero URL) opened a store")
	}
}
