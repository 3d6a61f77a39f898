package sidecar

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// DefaultListen is the address `leasehold serve` listens on by default.
const DefaultListen = "127.0.0.1:7411"

// Config is what `leasehold serve` runs with.
type Config struct {
	// Listen is the TCP address to serve on (host:port; port 0 picks one).
	Listen string
	// Store is the store URL: sqlite:PATH or postgres://…
	Store string
	// TokenFile, when set, names a file whose content is the bearer token
	// every /v1/* request must carry.
	TokenFile string
	// LogFormat is text or json.
	LogFormat string
	// MaxStreams caps concurrent keepalive streams; 0 means DefaultMaxStreams.
	MaxStreams int
	// RequireDeclared refuses claims of tasks that are not declared.
	RequireDeclared bool
	// PruneInterval is how often this sidecar tries to prune lease history
	// (guarded by the lease leasehold:prune); 0 disables pruning here.
	PruneInterval time.Duration
}

// DefaultConfig returns the configuration of `leasehold serve` with no flags.
func DefaultConfig() Config {
	return Config{Listen: DefaultListen, Store: storeurl.Default, LogFormat: "text", MaxStreams: DefaultMaxStreams,
		PruneInterval: leasecore.DefaultPruneInterval}
}

// RegisterFlags defines the serve flags on fs, with c's values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "`address` to listen on (host:port; a non-loopback host needs --token-file)")
	fs.StringVar(&c.Store, "store", c.Store, "store `URL`: sqlite:PATH or postgres://USER@HOST:PORT/DB")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "`path` of a file holding the bearer token required on /v1/*")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log `format`: text or json")
	fs.IntVar(&c.MaxStreams, "max-streams", c.MaxStreams, "most keepalive streams held at once; more are answered 503")
	fs.BoolVar(&c.RequireDeclared, "require-declared", c.RequireDeclared, "refuse claims of tasks that are not declared (leasehold_task in Terraform)")
	fs.DurationVar(&c.PruneInterval, "prune-interval", c.PruneInterval, "how often to prune lease history by the tasks' retention policies; 0 disables pruning in this sidecar")
}

// Validate checks the configuration before anything is opened or bound.
func (c Config) Validate() error {
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("--log-format must be text or json, not %q", c.LogFormat)
	}
	if c.MaxStreams < 0 {
		return fmt.Errorf("--max-streams must be positive (0 means %d), not %d", DefaultMaxStreams, c.MaxStreams)
	}
	if c.Store == "" {
		return errors.New("--store must name a store: sqlite:PATH or postgres://…")
	}
	if c.PruneInterval < 0 || (c.PruneInterval > 0 && c.PruneInterval < time.Second) {
		return fmt.Errorf("--prune-interval must be 0 (off) or at least 1s, not %s", c.PruneInterval)
	}
	return CheckListen(c.Listen, c.TokenFile != "")
}

// CheckListen refuses to serve without authentication on anything but a
// loopback address: 127.0.0.0/8, ::1 or localhost. An empty host means every
// interface, so it needs a token too.
func CheckListen(addr string, hasToken bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: must be host:port, as in %s: %w", addr, DefaultListen, err)
	}
	if hasToken || isLoopback(host) {
		return nil
	}
	shown := host
	if shown == "" {
		shown = "every interface"
	}
	return fmt.Errorf("refusing to listen on %s (--listen %q) without a token file: anyone who can reach it could claim and release leases; "+
		"pass --token-file PATH (or LEASEHOLD_TOKEN_FILE), or listen on a loopback address such as %s", shown, addr, DefaultListen)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// maxTokenBytes bounds a token file, which should hold one line.
const maxTokenBytes = 4096

// ReadTokenFile reads a bearer token: the file's content without surrounding
// white space (a trailing newline is usual). An empty file is an error, not
// "no authentication".
func ReadTokenFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	if len(b) > maxTokenBytes {
		return nil, fmt.Errorf("token file %s: larger than %d bytes; it should hold one token", path, maxTokenBytes)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) == 0 {
		return nil, fmt.Errorf("token file %s is empty", path)
	}
	if bytes.ContainsAny(tok, " \t\r\n") {
		return nil, fmt.Errorf("token file %s: the token must be one word without white space", path)
	}
	return tok, nil
}

// EnvPrefix starts the environment variable of every flag: --token-file is
// also read from LEASEHOLD_TOKEN_FILE.
const EnvPrefix = "LEASEHOLD_"

// EnvName returns the environment variable that backs the flag name.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ApplyEnv sets each flag of fs that the command line did not set from its
// environment variable (see EnvName), when that is non-empty, so that the
// command line wins over the environment and the environment over defaults.
// Call it after fs.Parse.
func ApplyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		name := EnvName(f.Name)
		if v := getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// NewLogger returns a logger writing to w in format (text or json).
func NewLogger(format string, w io.Writer) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{ReplaceAttr: storeurl.RedactAttr})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: storeurl.RedactAttr})), nil
	default:
		return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
	}
}
