package cli

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/endpoint"
)

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	addr := fs.String("addr", "default", "")
	tokenFile := fs.String("token-file", "default", "")
	wait := fs.Duration("wait", 0, "")
	grace := fs.Duration("grace", time.Second, "")
	if err := fs.Parse([]string{"--addr", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LEASEHOLD_ADDR": "from-env", "LEASEHOLD_TOKEN_FILE": "/env/token", "LEASEHOLD_WAIT": "5s"}
	if err := ApplyEnv(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if *addr != "from-flag" || *tokenFile != "/env/token" || *wait != 5*time.Second || *grace != time.Second {
		t.Errorf("addr %q, token-file %q, wait %s, grace %s; want the flag, then the environment, then the default",
			*addr, *tokenFile, *wait, *grace)
	}
	// Bad values are reported together, each with its variable.
	fs = flag.NewFlagSet("y", flag.ContinueOnError)
	fs.Duration("wait", 0, "")
	fs.Duration("grace", time.Second, "")
	env = map[string]string{"LEASEHOLD_WAIT": "soon", "LEASEHOLD_GRACE": "later"}
	err := ApplyEnv(fs, func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), `LEASEHOLD_WAIT="soon"`) || !strings.Contains(err.Error(), `LEASEHOLD_GRACE="later"`) {
		t.Errorf("bad values from the environment: %v, want an error naming both variables", err)
	}
	if EnvName("token-file") != "LEASEHOLD_TOKEN_FILE" || EnvName("log-format") != "LEASEHOLD_LOG_FORMAT" || EnvName("addr") != "LEASEHOLD_ADDR" {
		t.Error("EnvName")
	}
}

// ParseArgs: the command line wins over the environment; a stray argument
// and a bad value from the environment are refused, said on the flag set's
// output (a password in the value masked), and -h is flag.ErrHelp.
func TestParseArgs(t *testing.T) {
	t.Parallel()
	parse := func(args []string, env map[string]string) (string, string, error) {
		var out bytes.Buffer
		fs := flag.NewFlagSet("leasehold migrate", flag.ContinueOnError)
		fs.SetOutput(&out)
		var c StoreConfig
		c.RegisterFlags(fs)
		fs.Int("limit", 1, "")
		err := ParseArgs(fs, args, func(k string) string { return env[k] })
		return c.Store, out.String(), err
	}
	store, _, err := parse([]string{"--store", "sqlite:flag.db"}, map[string]string{"LEASEHOLD_STORE": "sqlite:env.db", "LEASEHOLD_LOG_FORMAT": "json"})
	if err != nil || store != "sqlite:flag.db" {
		t.Errorf("store %q, %v; want the command line's", store, err)
	}
	if store, _, err := parse(nil, map[string]string{"LEASEHOLD_STORE": "sqlite:env.db"}); err != nil || store != "sqlite:env.db" {
		t.Errorf("store %q, %v; want the environment's", store, err)
	}
	if _, out, err := parse([]string{"extra"}, nil); err == nil || !strings.Contains(out, `leasehold migrate: unexpected argument "extra"`) || !strings.Contains(out, "-store") {
		t.Errorf("a stray argument: %v, output %q; want it refused, named, with the usage", err, out)
	}
	_, out, err := parse(nil, map[string]string{"LEASEHOLD_LIMIT": "postgres://u:s3cr3t@h/db"})
	if err == nil || !strings.Contains(out, "LEASEHOLD_LIMIT") || strings.Contains(out+err.Error(), "s3cr3t") {
		t.Errorf("a bad value from the environment: %v, output %q; want it refused, named, its password masked", err, out)
	}
	if _, _, err := parse([]string{"-h"}, nil); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

func TestReadTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tok, err := endpoint.ReadTokenFile(write("ok", "  s3cret\n"))
	if err != nil || string(tok) != "s3cret" {
		t.Fatalf("ReadTokenFile = %q, %v", tok, err)
	}
	for name, content := range map[string]string{"empty": "\n \n", "two words": "a b\n", "huge": strings.Repeat("x", 5000)} {
		if _, err := endpoint.ReadTokenFile(write(name, content)); err == nil {
			t.Errorf("token file %s accepted", name)
		}
	}
	if _, err := endpoint.ReadTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing token file accepted")
	}
}

func TestNewLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := NewLogger("json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "addr", "127.0.0.1:1", "store", "postgres://u:s3cret@127.0.0.1/db")
	if out := buf.String(); !strings.HasPrefix(out, "{") || !strings.Contains(out, `"addr":"127.0.0.1:1"`) || strings.Contains(out, "s3cret") {
		t.Errorf("json log (a store's password masked): %s", out)
	}
	if _, err := NewLogger("xml", &buf); err == nil {
		t.Error("log format xml accepted")
	}
}
