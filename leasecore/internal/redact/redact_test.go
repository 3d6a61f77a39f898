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
