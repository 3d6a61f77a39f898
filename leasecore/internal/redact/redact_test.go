package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t"
	cases := []struct {
		in, want string
	}{
		// Nothing to hide.
		{"sqlite:./leasehold.db", "sqlite:./leasehold.db"},
		{"postgres://leasehold@127.0.0.1:5432/leasehold", "postgres://leasehold@127.0.0.1:5432/leasehold"},
		{"postgres://127.0.0.1:5432/db?sslmode=disable", "postgres://127.0.0.1:5432/db?sslmode=disable"},
		// Userinfo.
		{"postgres://u:s3cr3t@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"postgresql://u:s3cr3t@h/db?sslmode=disable", "postgresql://u:xxxxx@h/db?sslmode=disable"},
		{"postgres://u:s3cr3t@h1:5432,h2:5433/db?target_session_attrs=read-write", "postgres://u:xxxxx@h1:5432,h2:5433/db?target_session_attrs=read-write"},
		{"postgres://u:s3@cr3t@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:s3cr3t@h/db?application_name=a@b", "postgres://u:xxxxx@h/db?application_name=a@b"},
		// Userinfo that does not parse: raw '/', '?', '#', space, bad escape.
		{"postgres://u:s3/cr3t@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:s3?cr3t@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:s3#cr3t@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:s3 cr3t@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:s3cr3t%zz@h/db", "postgres://u:xxxxx@h/db"},
		// Query parameters, any case, percent-encoded key.
		{"postgres://u@h/db?password=s3cr3t", "postgres://u@h/db?password=xxxxx"},
		{"postgres://u@h/db?sslmode=disable&Password=s3cr3t&x=1", "postgres://u@h/db?sslmode=disable&Password=xxxxx&x=1"},
		{"postgres://u@h/db?sslpassword=s3cr3t", "postgres://u@h/db?sslpassword=xxxxx"},
		{"postgres://u@h/db?pass%77ord=s3cr3t", "postgres://u@h/db?pass%77ord=xxxxx"},
		{"postgres://u:s3cr3t@h1:1,h2:2/db?PASSWORD=s3cr3t", "postgres://u:xxxxx@h1:1,h2:2/db?PASSWORD=xxxxx"},
		// key=value connection strings.
		{"host=h user=u password=s3cr3t dbname=db", "host=h user=u password=xxxxx dbname=db"},
		{"host=h password='s3 cr3t' dbname=db", "host=h password=xxxxx dbname=db"},
		{"host=h password = s3cr3t", "host=h password = xxxxx"},
		{"password=s3cr3t host=h", "password=xxxxx host=h"},
		{"PGPASSWORD=s3cr3t", "PGPASSWORD=xxxxx"},
		// Quoted inside error texts.
		{"open store \"postgres://u:s3cr3t@h/db\": bad", "open store \"postgres://u:xxxxx@h/db\": bad"},
		{"cannot parse `host=h password=s3cr3t`: failed", "cannot parse `host=h password=xxxxx`: failed"},
		{"a postgres://u:s3cr3t@h/db and b postgres://v:s3cr3t@g/db", "a postgres://u:xxxxx@h/db and b postgres://v:xxxxx@g/db"},
	}
	for _, c := range cases {
		got := String(c.in)
		if got != c.want {
			t.Errorf("String(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
		if strings.Contains(got, secret) || strings.Contains(got, "cr3t") {
			t.Errorf("String(%q) = %q still holds the secret", c.in, got)
		}
	}
}

// TestURLErrors checks the texts that quote a URL which does not parse:
// net/url's own errors hold the raw URL.
func TestURLErrors(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"postgres://u:s3 cr3t@h/db", "postgres://u:s3cr3t%zz@h/db", "postgres://u:s3cr3t@h:port/db"} {
		_, err := url.Parse(raw)
		if err == nil {
			t.Fatalf("url.Parse(%q) succeeded", raw)
		}
		if got := Error(fmt.Errorf("store: %w", err)).Error(); strings.Contains(got, "cr3t") {
			t.Errorf("Error(%v) = %q still holds the secret", err, got)
		}
	}
}

func TestErrorUnwraps(t *testing.T) {
	t.Parallel()
	base := errors.New("password=s3cr3t")
	err := Error(fmt.Errorf("wrapped: %w", base))
	if !errors.Is(err, base) {
		t.Errorf("errors.Is lost the cause")
	}
	if err.Error() != "wrapped: password=xxxxx" {
		t.Errorf("Error() = %q", err.Error())
	}
	if Error(nil) != nil {
		t.Errorf("Error(nil) != nil")
	}
}

// trickyPasswords hold every character a userinfo, query or key=value
// password may carry that could end a naive pattern early. Each is built
// around the two halves leakA and leakB, neither of which may survive.
const leakA, leakB = "alpha7", "omega9"

var trickyPasswords = []string{
	leakA + "'" + leakB,
	leakA + "`" + leakB,
	leakA + "\"" + leakB,
	leakA + "!$&()*+,;=" + leakB,
	leakA + "%40" + leakB,
	leakA + "@" + leakB,
	leakA + "@@" + leakB + "@",
	leakA + ":" + leakB,
	leakA + "/" + leakB,
	leakA + "'@`:\"/" + leakB,
	"'" + leakA + leakB + "'",
	// Found by a random search: an '@' with a raw '/', '?' or '#' after
	// it, a quote before "://".
	leakA + "@" + leakB + "/'x",
	leakA + "@x//?" + leakB,
	leakA + "@,/:?" + leakB,
	leakA + "@x#;?" + leakB,
	leakA + "'x://" + leakB,
	leakA + "://" + leakB,
	leakA + "@x`;=" + leakB,
}

func assertMasked(t *testing.T, in string) {
	t.Helper()
	got := String(in)
	if strings.Contains(got, leakA) || strings.Contains(got, leakB) {
		t.Errorf("String(%q)\n = %q still holds part of the password", in, got)
	}
}

func TestTrickyUserinfoPasswords(t *testing.T) {
	t.Parallel()
	for _, pw := range trickyPasswords {
		for _, u := range []string{
			"postgres://u:" + pw + "@h:5432/db",
			"postgresql://u:" + pw + "@h/db?sslmode=disable",
			"postgres://u:" + pw + "@h1:5432,h2:5433/db?target_session_attrs=read-write",
			"postgres://u:" + pw + "@[::1]:5432,h2/db",
			"postgres://o'brien:" + pw + "@h/db",
			"postgres://u:" + url.PathEscape(pw) + "@h1:1,h2:2/db",
		} {
			assertMasked(t, u)
			assertMasked(t, "open store "+u+": bad")
			assertMasked(t, fmt.Sprintf("open store %q: bad", u))
			assertMasked(t, "cannot parse `"+u+"`: failed to parse as URL (x@y)")
			assertMasked(t, "store '"+u+"', retrying at user@host")
			assertMasked(t, "a "+u+"\nb "+u)
		}
	}
	// What is not a password stays.
	for in, want := range map[string]string{
		"postgres://u:ab'cd@h/db":                        "postgres://u:xxxxx@h/db",
		"postgres://u:ab@cd@h1:1,h2:2/db?x=1":            "postgres://u:xxxxx@h1:1,h2:2/db?x=1",
		"cannot parse `postgres://u:a`b@h/db`: bad":      "cannot parse `postgres://u:xxxxx@h/db`: bad",
		"open \"postgres://u:a/b@h/db\": bad at x@y":     "open \"postgres://u:xxxxx@h/db\": bad at x@y",
		"open \"postgres://h:5432/db\": failed for u@h2": "open \"postgres://h:5432/db\": failed for u@h2",
		// A quoted URL with no password, then text with an '@'.
		`store "mysql://x": must be sqlite:PATH or postgres://USER@HOST:PORT/DB`:   `store "mysql://x": must be sqlite:PATH or postgres://USER@HOST:PORT/DB`,
		"store `postgres://h`: bad, try postgres://u@h":                            "store `postgres://h`: bad, try postgres://u@h",
		`open store mysql://x: store "mysql://x": must be postgres://USER@HOST/DB`: `open store mysql://x: store "mysql://x": must be postgres://USER@HOST/DB`,
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}

func TestTrickyQueryPasswords(t *testing.T) {
	t.Parallel()
	for _, pw := range trickyPasswords {
		for _, key := range []string{"password", "PassWord", "sslpassword", "%70assword", "pass%77ord", "%73sl%70%61ssword"} {
			for _, u := range []string{
				"postgres://u@h/db?" + key + "=" + url.QueryEscape(pw),
				"postgres://u@h1:1,h2:2/db?sslmode=disable&" + key + "=" + url.QueryEscape(pw) + "&x=1",
			} {
				assertMasked(t, u)
				assertMasked(t, fmt.Sprintf("open store %q: bad", u))
				assertMasked(t, "cannot parse `"+u+"`: bad")
			}
			if !strings.ContainsAny(pw, "&#") {
				raw := "postgres://u@h/db?" + key + "=" + pw
				assertMasked(t, raw)
				assertMasked(t, "cannot parse `"+raw+"`: bad")
			}
		}
	}
	for in, want := range map[string]string{
		"postgres://u@h/db?%70assword=s&x=1":       "postgres://u@h/db?%70assword=xxxxx&x=1",
		"open 'postgres://h/db?password=a'b': bad": "open 'postgres://h/db?password=xxxxx': bad",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}

func TestTrickyKeywordValuePasswords(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`host=h password=` + leakA + `\ ` + leakB + ` dbname=db`:    `host=h password=xxxxx dbname=db`,
		`host=h password='` + leakA + `\' ` + leakB + `' dbname=db`: `host=h password=xxxxx dbname=db`,
		// An escaped backslash before the closing quote reads as an escaped
		// quote (Go's %q doubles backslashes): masked to the end.
		`host=h password='` + leakA + `\\' dbname=db`:                 `host=h password=xxxxx`,
		`host=h password=` + leakA + `'` + leakB + ` dbname=db`:       `host=h password=xxxxx dbname=db`,
		"cannot parse `host=h password=" + leakA + `\ ` + leakB + "`": "cannot parse `host=h password=xxxxx`",
		"cannot parse `host=h password=" + leakA + "`: failed":        "cannot parse `host=h password=xxxxx`: failed",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}
