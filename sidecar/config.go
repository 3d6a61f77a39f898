package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// Config is what `leasehold serve` runs with.
type Config struct {
	// Listen is the address to serve on: a TCP host:port (port 0 picks
	// one), or unix:PATH for a Unix socket at PATH.
	Listen string
	// ProbeListen, when set, is a second TCP host:port (port 0 picks one)
	// that serves the probe routes only (Server.ProbeHandler), with no token
	// and no Host check, for the kubelet's probes; empty: none.
	ProbeListen string
	// ListenMode is the file mode of the socket of a unix: Listen; 0 means
	// DefaultListenMode. It must be 0 for a TCP Listen.
	ListenMode os.FileMode
	// Store is the store URL: sqlite:PATH or postgres://…
	Store string
	// WatchStore is ignored. It was the URL of a connection of its own on
	// which the watch LISTENed for changes of a PostgreSQL store behind
	// PgBouncer; the watch now follows the store through Store itself (no
	// LISTEN, no NOTIFY), and the flag is kept so that command lines and
	// environments that set it still start. Run warns when it is set.
	//
	// Deprecated: the watch reads through Store.
	WatchStore string
	// AllowHosts are the Host names the sidecar answers besides loopback
	// names, IP addresses and the name it listens on (--allow-host):
	// names, *.DOMAIN patterns, or * for any (NewHostPolicy).
	AllowHosts []string
	// TokenFile, when set, names a file whose content is the bearer token
	// every /v1/* request must carry: one credential with every right.
	TokenFile string
	// CredentialsFile, when set, names a credentials file (auth.File):
	// named tokens, each with its task prefixes and rights. Exclusive with
	// TokenFile.
	CredentialsFile string
	// TokenGrace is how long a token replaced in the token or credentials
	// file under the same name is still accepted (DefaultConfig:
	// auth.DefaultGrace); 0 means none, and so does a negative value (the
	// spelling -1s older releases documented).
	TokenGrace time.Duration
	// LogFormat is text or json.
	LogFormat string
	// MaxStreams caps concurrent keepalive streams; 0 means
	// DefaultMaxStreams, lowered when the open-file limit cannot hold it. A
	// cap given that the limit cannot hold fails Serve (see FileReserve).
	MaxStreams int
	// MaxWatchers caps concurrent watch streams; 0 means
	// DefaultMaxWatchers, lowered as MaxStreams is.
	MaxWatchers int
	// WatchPoll is how often a sidecar with watchers asks the store for
	// other processes' commits (watch.WithPoll): the longest one
	// waits before its watchers are told. 0 turns the signal off: the
	// watch reads the store once a second.
	WatchPoll time.Duration
	// RequireDeclared refuses claims of tasks that are not declared.
	RequireDeclared bool
	// PruneInterval is how often this sidecar tries to prune lease history
	// (guarded by the lease leasehold:prune); 0 disables pruning here.
	PruneInterval time.Duration
}

// The bounds of --watch-poll: polls more often than MinWatchPoll would cost
// the store more than the few milliseconds they save a watcher (a watch
// reads at most every 100 ms anyway); polls less often than MaxWatchPoll
// would come after the watch's own once-a-second read.
const (
	MinWatchPoll = 10 * time.Millisecond
	MaxWatchPoll = time.Second
)

// DefaultConfig returns the configuration of `leasehold serve` with no flags.
func DefaultConfig() Config {
	return Config{Listen: cli.DefaultListen, Store: storeurl.Default, LogFormat: "text", PruneInterval: leasecore.DefaultPruneInterval,
		WatchPoll: leasecore.DefaultWatchPoll, TokenGrace: auth.DefaultGrace}
}

// RegisterFlags defines the serve flags on fs, with c's values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "`address` to listen on: host:port (a non-loopback host needs --token-file), or unix:PATH for a Unix socket")
	fs.StringVar(&c.ProbeListen, "probe-listen", c.ProbeListen, "`address` (host:port) of a second listener for Kubernetes probes, such as 0.0.0.0:7412: "+
		"it answers GET /healthz, /readyz and /v1/leases/{task}/held-here only, with no token and no Host check, so it may listen on any interface; unset: none")
	fs.Var(listenModeFlag{&c.ListenMode}, "listen-mode", "file `mode` of a unix:PATH socket, in octal (default 0660: its owner and group may connect)")
	fs.StringVar(&c.Store, "store", c.Store, "store `URL`: sqlite:PATH or postgres://USER@HOST:PORT/DB")
	fs.StringVar(&c.WatchStore, "watch-store", c.WatchStore, "ignored, and deprecated: the watch (GET /v1/watch) follows a PostgreSQL store through --store, PgBouncer included, with no connection of its own")
	fs.DurationVar(&c.WatchPoll, "watch-poll", c.WatchPoll, "how often a sidecar with watchers asks the store for other processes' commits, the longest one waits before the watch sees it (its own commits wake it at once); 10ms to 1s, or 0: no signal, the watch reads once a second")
	fs.Var((*hostList)(&c.AllowHosts), "allow-host", "a Host `name` to answer besides loopback names, IP addresses and the --listen host, as in leasehold.default.svc; *.DOMAIN matches its subdomains, * any host; repeat or separate with commas")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "`path` of a file holding the bearer token required on /v1/*")
	fs.StringVar(&c.CredentialsFile, "credentials-file", c.CredentialsFile, "`path` of a credentials file: named bearer tokens (stored as SHA-256), each with the task prefixes it covers and its right (read, hold, admin); exclusive with --token-file")
	fs.DurationVar(&c.TokenGrace, "token-grace", c.TokenGrace, "how long a token replaced in --token-file or --credentials-file stays accepted after the file changes (re-read every 2s); 0: none. A removed or revoked credential (revoked_sha256, leasehold credentials revoke) is refused at once")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log `format`: text or json")
	fs.IntVar(&c.MaxStreams, "max-streams", c.MaxStreams, fmt.Sprintf("most keepalive streams held at once; more are answered 503. Each holds a file descriptor: "+
		"unset (or 0) means %d, lowered to fit the open-file limit; a value set that the limit cannot hold is refused at start", DefaultMaxStreams))
	fs.IntVar(&c.MaxWatchers, "max-watchers", c.MaxWatchers, fmt.Sprintf("most watch streams (GET /v1/watch) served at once; more are answered 503. "+
		"Unset (or 0) means %d, lowered or refused as --max-streams is", DefaultMaxWatchers))
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
	if c.WatchPoll != 0 && (c.WatchPoll < MinWatchPoll || c.WatchPoll > MaxWatchPoll) {
		return fmt.Errorf("--watch-poll must be 0 (no signal: the watch reads once a second) or from %s to %s, not %s", MinWatchPoll, MaxWatchPoll, c.WatchPoll)
	}
	if c.MaxWatchers < 0 {
		return fmt.Errorf("--max-watchers must be positive (0 means %d), not %d", DefaultMaxWatchers, c.MaxWatchers)
	}
	if c.Store == "" {
		return errors.New("--store must name a store: sqlite:PATH or postgres://…")
	}
	if _, err := storeurl.Parse(c.Store); err != nil {
		return fmt.Errorf("--store: %w", err) // never quotes the URL: it may hold a password
	}
	if c.PruneInterval < 0 || (c.PruneInterval > 0 && c.PruneInterval < time.Second) {
		return fmt.Errorf("--prune-interval must be 0 (off) or at least 1s, not %s", c.PruneInterval)
	}
	if _, unix := endpoint.SocketPath(c.Listen); !unix && c.ListenMode != 0 {
		return fmt.Errorf("--listen-mode is the file mode of a Unix socket: it applies to --listen unix:PATH only, not to %q", c.Listen)
	}
	if _, err := NewHostPolicy(c.Listen, c.AllowHosts); err != nil {
		return err
	}
	if c.TokenFile != "" && c.CredentialsFile != "" {
		return errors.New("--token-file and --credentials-file are exclusive: a credentials file can hold the token file's token as one credential (leasehold credentials hash)")
	}
	if err := checkProbeListen(c.ProbeListen); err != nil {
		return err
	}
	return CheckListen(c.Listen, c.TokenFile != "" || c.CredentialsFile != "")
}

// checkProbeListen checks --probe-listen: empty (no probe listener) or a
// TCP host:port. Any host is allowed, with or without a token: the probe
// listener's answers change nothing and need none (probe.go). A Unix
// socket is refused: the kubelet probes over TCP.
func checkProbeListen(addr string) error {
	if addr == "" {
		return nil
	}
	if _, ok := endpoint.SocketPath(addr); ok {
		return fmt.Errorf("--probe-listen %q: must be host:port, as in 0.0.0.0:7412: the kubelet probes over TCP, not a Unix socket", addr)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--probe-listen %q: must be host:port, as in 0.0.0.0:7412: %w", addr, err)
	}
	return nil
}

// hostList is --allow-host: each use (or LEASEHOLD_ALLOW_HOST) adds its
// comma-separated names.
type hostList []string

func (h *hostList) String() string { return strings.Join(*h, ",") }

func (h *hostList) Set(v string) error {
	for name := range strings.SplitSeq(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			*h = append(*h, name)
		}
	}
	return nil
}

// CheckListen refuses to serve without authentication on anything but a
// loopback address: 127.0.0.0/8, ::1 or localhost. An empty host means every
// interface, so it needs a token too. A Unix socket (unix:PATH) needs none:
// the socket file's mode and its directory decide who may connect, and no
// browser can; its path must fit a socket address.
func CheckListen(addr string, hasToken bool) error {
	if path, ok := endpoint.SocketPath(addr); ok {
		return checkSocketPath(addr, path)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: must be host:port, as in %s, or unix:PATH: %w", addr, cli.DefaultListen, err)
	}
	if hasToken || isLoopback(host) {
		return nil
	}
	shown := host
	if shown == "" {
		shown = "every interface"
	}
	return fmt.Errorf("refusing to listen on %s (--listen %q) without a token file: anyone who can reach it could claim and release leases; "+
		"pass --token-file PATH or --credentials-file PATH (or LEASEHOLD_TOKEN_FILE, LEASEHOLD_CREDENTIALS_FILE), or listen on a loopback address such as %s or on a Unix socket (unix:PATH)", shown, addr, cli.DefaultListen)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ParseServeArgs reads `leasehold serve`'s command line into a Config: it
// defines Config's flags on fs (whose name, output and usage are the
// caller's) and parses args with cli.ParseArgs, as every verb of the
// binary does. It does not Validate. The binary's serve calls it, and so
// do the tests that check deploy/'s and examples/kubernetes/'s manifests,
// so that those are read by serve's own flags; fs then holds every flag.
func ParseServeArgs(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	cfg := DefaultConfig()
	cfg.RegisterFlags(fs)
	err := cli.ParseArgs(fs, args, getenv)
	return cfg, err
}
