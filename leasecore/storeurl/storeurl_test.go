package storeurl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const secret = "s3cr3t-Pw"

// shapes are store URLs and connection strings holding secret in every
// place a credential can go, parsing or not.
var shapes = []string{
	"postgres://u:" + secret + "@127.0.0.1:1/db",
	"postgresql://u:" + secret + "@127.0.0.1:1/db?sslmode=disable",
	"postgres://u@127.0.0.1:1/db?password=" + secret,
	"postgres://u@127.0.0.1:1/db?sslmode=disable&PassWord=" + secret + "&connect_timeout=1",
	"postgres://u@127.0.0.1:1/db?sslpassword=" + secret,
	"postgres://u:" + secret + "@127.0.0.1:1,127.0.0.1:2/db?target_session_attrs=read-write",
	"postgres://u:" + secret + "@127.0.0.1:1,127.0.0.1:2/db?password=" + secret,
	"postgres://u:" + secret + " with space@127.0.0.1:1/db",
	"postgres://u:" + secret + "%zz@127.0.0.1:1/db",
	"postgres://u:" + secret + "/slash@127.0.0.1:1/db",
	"postgres://u:" + secret + "@127.0.0.1:notaport/db",
	"postgres://u:" + secret + "@[::1/db",
	"host=127.0.0.1 port=1 user=u password=" + secret + " dbname=db",
	"host=127.0.0.1 password='" + secret + " quoted' dbname=db",
	"mysql://u:" + secret + "@h/db",
	// Characters that may end a naive pattern early, between two halves
	// of the secret.
	"postgres://u:" + secret + "'" + secret + "@127.0.0.1:1/db",
	"postgres://u:" + secret + "`" + secret + "@127.0.0.1:1/db",
	"postgres://u:" + secret + "\"" + secret + "@127.0.0.1:1/db",
	"postgres://u:" + secret + "!$&()*+,;=" + secret + "@127.0.0.1:1/db",
	"postgres://u:" + secret + "@" + secret + "@127.0.0.1:1/db",
	"postgres://u:" + secret + "%40" + secret + "@127.0.0.1:1/db",
	"postgres://u:" + secret + ":" + secret + "@127.0.0.1:1/db",
	"postgres://u:" + secret + "/" + secret + "@127.0.0.1:1/db",
	"postgres://u:" + secret + "'" + secret + "@127.0.0.1:1,127.0.0.1:2/db",
	"postgres://u:" + secret + "'`@:/" + secret + "@127.0.0.1:notaport,127.0.0.1:2/db",
	"postgres://u@127.0.0.1:1/db?%70assword=" + secret,
	"postgres://u@127.0.0.1:1/db?pass%77ord=" + secret + "'" + secret,
	"postgres://u@127.0.0.1:notaport/db?%73slpassword=" + secret,
	"host=127.0.0.1 port=1 password=" + secret + "\\ " + secret + " dbname=db",
	"host=127.0.0.1 port=notaport password=" + secret + "\\ " + secret + " dbname=db",
	"host=127.0.0.1 port=notaport password='" + secret + "\\' " + secret + "' dbname=db",
	"host=127.0.0.1 port=notaport password=" + secret + "'" + secret + " dbname=db",
}

func TestRedactShapes(t *testing.T) {
	t.Parallel()
	for _, raw := range shapes {
		// As given, and quoted inside error texts as Go and pgx quote it.
		for _, text := range []string{raw, fmt.Sprintf("open store %q: bad", raw), "cannot parse `" + raw + "`: bad (x@y)", "store '" + raw + "', at u@h"} {
			if got := Redact(text); strings.Contains(got, "s3cr3t") {
				t.Errorf("Redact(%q) = %q", text, got)
			}
		}
	}
	for raw, want := range map[string]string{
		"sqlite:./leasehold.db":                  "sqlite:./leasehold.db",
		"postgres://u@h:5432/db?sslmode=disable": "postgres://u@h:5432/db?sslmode=disable",
		"postgres://u:pw@h:5432/db":              "postgres://u:xxxxx@h:5432/db",
	} {
		if got := Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}

// TestOpenErrorsHoldNoSecret parses every shape, opens what parses and
// then migrates what opened (nothing listens at 127.0.0.1:1): no error text
// holds the secret.
func TestOpenErrorsHoldNoSecret(t *testing.T) {
	t.Parallel()
	for _, raw := range shapes {
		u, err := Parse(raw)
		if err != nil {
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("Parse(%q) = %v", raw, err)
			}
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		s, err := Open(ctx, u)
		if err != nil {
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("Open(%q) = %v", raw, err)
			}
			cancel()
			continue
		}
		err = s.Migrate(ctx)
		if err == nil {
			t.Errorf("Migrate(%q) succeeded with nothing listening", raw)
		} else if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Migrate(%q) = %v", raw, err)
		}
		_ = s.Close()
		cancel()
	}
}

func TestRedactAttr(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		opts := &slog.HandlerOptions{ReplaceAttr: RedactAttr}
		h := slog.Handler(slog.NewTextHandler(&buf, opts))
		if format == "json" {
			h = slog.NewJSONHandler(&buf, opts)
		}
		log := slog.New(h)
		for _, raw := range shapes {
			log.Error("store "+raw, "store", raw, "err", errors.New("failed: "+raw), "group", slog.GroupValue(slog.String("url", raw)))
		}
		if strings.Contains(buf.String(), "s3cr3t") {
			t.Errorf("%s log holds the secret:\n%s", format, buf.String())
		}
	}
}

// Kind names the driver of each store Open returns, and no other store.
func TestKind(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"sqlite:" + t.TempDir() + "/kind.db": "sqlite",
		"postgres://u@127.0.0.1:1/db":        "postgres",
	} {
		s, err := Open(t.Context(), MustParse(raw))
		if err != nil {
			t.Fatalf("Open(%s): %v", raw, err)
		}
		if got := Kind(s); got != want {
			t.Errorf("Kind(Open(%s)) = %q, want %q", raw, got, want)
		}
		_ = s.Close()
	}
	if got := Kind(nil); got != "" {
		t.Errorf("Kind(nil) = %q, want empty", got)
	}
}
