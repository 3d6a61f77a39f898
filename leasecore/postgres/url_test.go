package postgres

import (
	"context"
	"strings"
	"testing"
)

// TestOpenErrorsMaskPasswords opens URLs and connection strings that pgx
// refuses or would misread: no error quotes any part of the password.
func TestOpenErrorsMaskPasswords(t *testing.T) {
	t.Parallel()
	const a, b = "alpha7", "omega9"
	for _, raw := range []string{
		// pgx's own masking leaves the tail of an escaped value.
		`host=127.0.0.1 port=notaport password=` + a + `\ ` + b,
		`host=127.0.0.1 port=notaport password='` + a + `\' ` + b + `'`,
		"postgres://u:" + a + "'" + b + "@127.0.0.1:notaport/db",
		"postgres://u@127.0.0.1:notaport/db?%70assword=" + a + "'" + b,
		// pgx would read the rest of the password as a host or database.
		"postgres://u:" + a + "@" + b + "@127.0.0.1:1/db",
		"postgres://u:" + a + "/" + b + "@127.0.0.1:1/db",
		"postgres://u:" + a + "'`@:/" + b + "@127.0.0.1:1,127.0.0.1:2/db",
		// pgx would send the rest of the password to the server as a
		// parameter name, which its error quotes: a raw '&', or "/?" after
		// an '@'.
		"postgres://u@127.0.0.1:1/db?password=" + a + "&(x)=" + b,
		"postgres://u@127.0.0.1:1/db?sslpassword=" + a + "!$&()*+,;=" + b,
		"postgres://u:" + a + "@x//?" + b + "@h?sslmode=disable",
		"postgres://u:" + a + "%40x%2F%2F%3F" + b + "@h?sslpassword=" + a + "@x//?" + b,
		// pgx quotes the value it refuses, password or not.
		"postgres://u@127.0.0.1:1/db?password=" + a + " " + b,
		"postgres://u@127.0.0.1:1/db?PassWord=" + a + " " + b + "&x=1",
		"postgres://u:" + a + " " + b + "@127.0.0.1:1/db?sslpassword=" + a + " " + b,
	} {
		s, err := Open(context.Background(), raw)
		if err == nil {
			_ = s.Close()
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, a) || strings.Contains(msg, b) {
			t.Errorf("Open(%q) = %q holds part of the password", raw, msg)
		}
	}
}
