// Command leasehold is the leasehold sidecar and its command-line tools:
//
//	leasehold serve   [--listen 127.0.0.1:7411 | --listen unix:PATH [--listen-mode 0660]]
//	                  [--store sqlite:./leasehold.db]
//	                  [--require-declared] [--prune-interval 10m]
//	                  [--token-file PATH] [--log-format text|json] [--allow-host NAME]
//	                  [--probe-listen 0.0.0.0:7412]
//	leasehold migrate [--store URL] [--grant-runtime ROLE,…] [--log-format text|json]
//	leasehold migrate --status [--json] [--store URL]
//	leasehold prune   [--store URL] [--log-format text|json]
//	leasehold run     [--addr URL | --store URL] --task T [--ttl 30s] [--owner O]
//	                  [--wait 0s] [--grace 10s] -- COMMAND [ARG...]
//	leasehold fence sql --dialect postgres|sqlite
//	leasehold fence install --db URL
//	leasehold status | get TASK | list | history TASK | claim TASK | renew TASK | release TASK | watch
//	                  [--addr URL | --store URL] [--token-file PATH] [--json]
//	leasehold version [--json]
//
// --addr is the sidecar's base URL (http://127.0.0.1:7411 by default), or
// unix:PATH for a sidecar serving on a Unix socket (serve --listen unix:PATH).
//
// Every flag is also read from LEASEHOLD_<FLAG> (LEASEHOLD_LISTEN,
// LEASEHOLD_STORE, LEASEHOLD_TOKEN_FILE, LEASEHOLD_LOG_FORMAT); the command
// line wins over the environment. Every verb exits with a status of the one
// table in internal/exitcode (64 for a usage error, 69 for a store or
// sidecar that is unavailable, …), which the "Exit status" of docs/cli.md shows.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/client/leaserun"
	"github.com/leasehold/leasehold/client/opcli"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/fencecli"
	"github.com/leasehold/leasehold/internal/version"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar"
)

var usage = `leasehold hands named tasks to one owner at a time, for a TTL, with a fencing token.

Usage:
  leasehold serve   [--listen 127.0.0.1:7411 | --listen unix:PATH [--listen-mode 0660]]
                    [--store sqlite:./leasehold.db]
                    [--require-declared] [--prune-interval 10m]
                    [--token-file PATH] [--log-format text|json] [--max-streams 20000]
                    [--max-watchers 1000] [--allow-host NAME]
                    [--credentials-file PATH] [--token-grace 2m] [--probe-listen 0.0.0.0:7412]
                    serve the HTTP API and the web console at /ui/ (migrates the store at start);
                    on unix:PATH, a Unix socket whose file mode decides who may connect;
                    --probe-listen adds a listener for Kubernetes probes (no token):
                    /healthz, /readyz and /v1/leases/{task}/held-here only
  leasehold migrate [--store URL] [--grant-runtime ROLE,…] [--log-format text|json]
                    create or upgrade the store's schema, then exit; with --grant-runtime
                    (PostgreSQL, run as the owner) give those roles the runtime privileges
  leasehold migrate --status [--json] [--store URL]
                    show where the store's schema stands against this leasehold; change nothing
  leasehold prune   [--store URL] [--log-format text|json]
                    delete lease history beyond the retention policies (one pass), then exit;
                    refuses a store that does not exist (no SQLite file, no schema)
  leasehold run     [--addr URL | --store URL] --task T [--ttl 30s] [--owner O]
                    [--wait 0s] [--grace 10s] [--token-file PATH] -- COMMAND [ARG...]
                    run COMMAND while holding the lease on task T

Fencing at the resource, in the database your job writes to (docs/guarantees.md):
` + fencecli.Usage + `
Operator commands, against a sidecar (--addr, the default) or a store (--store);
human-readable, or the API's JSON with --json:
` + opcli.Usage + `
  leasehold credentials new --name N --prefix P --right read|hold|admin [--file PATH]
                    make a named, scoped token for --credentials-file (leasehold credentials -h)
  leasehold credentials revoke --name N --file PATH [--remove]
                    refuse the credential's token at once, and give it a new one (or remove it)
  leasehold version [--json]
                    print the version, commit, Go and API versions and the store schema
                    versions this build needs and knows (also leasehold --version)
  leasehold help    print this help

Stores: sqlite:PATH (the default, sqlite:./leasehold.db) or postgres://USER@HOST:PORT/DB.
Sidecars (--addr): http://HOST:PORT (the default, http://127.0.0.1:7411) or unix:PATH.
Every flag is also read from LEASEHOLD_<FLAG>, e.g. LEASEHOLD_STORE, LEASEHOLD_TOKEN_FILE;
the command line wins (the operator commands read only LEASEHOLD_ADDR, LEASEHOLD_STORE and
LEASEHOLD_TOKEN_FILE). Run 'leasehold COMMAND -h' for a command's flags.

Exit status, for every command:
` + exitcode.Help()

const programName = "leasehold"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole program, minus the process: it returns the exit status.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitcode.Usage
	}
	switch verb, rest := args[0], args[1:]; verb {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitcode.OK
	case "version", "--version", "-version":
		return printVersion(rest, stdout, stderr)
	case "serve":
		return serve(rest, getenv, stderr)
	case "migrate":
		return migrate(rest, getenv, stdout, stderr)
	case "prune":
		return storeCommand("prune", nil, cli.Prune, rest, getenv, stderr)
	case "credentials":
		return credentials(rest, os.Stdin, stdout, stderr)
	case "run":
		return leaserun.Main(context.Background(), rest, getenv, os.Stdin, stdout, stderr)
	case "fence":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return fencecli.Main(ctx, rest, getenv, stdout, stderr)
	case "status", "get", "list", "history", "claim", "renew", "release", "watch", "tasks", "policies":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return opcli.Main(ctx, verb, rest, getenv, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", programName, verb, usage)
		return exitcode.Usage
	}
}

func serve(args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := sidecar.ParseServeArgs(newFlagSet("serve", stderr), args, getenv)
	if err != nil {
		return parseFailed(err)
	}
	// A setting that breaks its rule (--listen off loopback without a
	// token, a --log-format it does not know) is a usage error, as a bad
	// flag value is for every verb. What serve finds only when it opens
	// files and the store (the token file, the store) is Of's to judge.
	if err := cfg.Validate(); err != nil {
		return fail(stderr, "serve", exitcode.With(exitcode.Usage, err))
	}
	log, err := cli.NewLogger(cfg.LogFormat, stderr)
	if err != nil {
		return fail(stderr, "serve", exitcode.With(exitcode.Usage, err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal kills the process the default way
	}()
	if err := sidecar.Serve(ctx, cfg, log); err != nil {
		return fail(stderr, "serve", err)
	}
	return exitcode.OK
}

// migrate runs `leasehold migrate`: storeCommand's flags, and
// --grant-runtime.
func migrate(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var (
		grant          string
		status, asJSON bool
	)
	return storeCommand("migrate", func(fs *flag.FlagSet) {
		fs.StringVar(&grant, "grant-runtime", "", "PostgreSQL: give these `roles` (comma-separated) exactly the privileges a runtime role needs "+
			"(read and write leasehold's rows, no DDL), in the migration's transaction; run as the owner of leasehold's tables (docs/store-roles.md)")
		fs.BoolVar(&status, "status", false, "show where the store's schema stands against this leasehold and change nothing "+
			"(exit 78 when this leasehold cannot serve it)")
		fs.BoolVar(&asJSON, "json", false, "with --status: print it as one JSON object")
	}, func(ctx context.Context, store string, log *slog.Logger) error {
		roles, err := cli.ParseRoles(grant)
		if err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		switch {
		case asJSON && !status:
			return exitcode.With(exitcode.Usage, errors.New("--json goes with --status"))
		case status && len(roles) > 0:
			return exitcode.With(exitcode.Usage, errors.New("--status changes nothing, so it takes no --grant-runtime"))
		case status:
			return printSchemaStatus(ctx, store, asJSON, stdout)
		}
		return cli.MigrateGranting(ctx, store, roles, log)
	}, args, getenv, stderr)
}

// printSchemaStatus prints `leasehold migrate --status`. Its error is the
// store's, or, for a store this build cannot serve, the refusal Migrate
// would give (exit 78), after the status is printed.
func printSchemaStatus(ctx context.Context, store string, asJSON bool, stdout io.Writer) error {
	st, err := cli.SchemaStatus(ctx, store)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
	} else {
		name := storeurl.MustParse(store)
		fmt.Fprintf(stdout, "store     %s\n", name)
		fmt.Fprintf(stdout, "schema    version %d, floor %d (binaries that know schema %d or newer may serve it)\n", st.Version, st.Floor, max(st.Floor, 1))
		fmt.Fprintf(stdout, "leasehold %s needs schema %d, knows up to %d\n", version.String(), st.Needs, st.Knows)
		fmt.Fprintf(stdout, "verdict   %s\n", st.Describe())
	}
	return st.Err()
}

// storeCommand runs a one-shot command on a store: migrate or prune.
// extra, when not nil, defines the verb's own flags.
func storeCommand(verb string, extra func(*flag.FlagSet), do func(context.Context, string, *slog.Logger) error, args []string, getenv func(string) string, stderr io.Writer) int {
	cfg := cli.DefaultStoreConfig()
	fs := newFlagSet(verb, stderr)
	cfg.RegisterFlags(fs)
	if extra != nil {
		extra(fs)
	}
	if err := cli.ParseArgs(fs, args, getenv); err != nil {
		return parseFailed(err)
	}
	// A store URL that does not parse (a raw '@' in a password) is a
	// usage error, as for every verb; its error never quotes the URL.
	if _, err := storeurl.Parse(cfg.Store); err != nil {
		return fail(stderr, verb, exitcode.With(exitcode.Usage, fmt.Errorf("--store: %w", err)))
	}
	log, err := cli.NewLogger(cfg.LogFormat, stderr)
	if err != nil {
		return fail(stderr, verb, exitcode.With(exitcode.Usage, err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := do(ctx, cfg.Store, log); err != nil {
		return fail(stderr, verb, err)
	}
	return exitcode.OK
}

func newFlagSet(verb string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(programName+" "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s %s [flags]\n\nFlags (each also read from LEASEHOLD_<FLAG>, e.g. %s):\n",
			programName, verb, cli.EnvName("store"))
		fs.PrintDefaults()
	}
	return fs
}

// parseFailed is the exit status of a command line cli.ParseArgs refused
// (it has said why): 0 for -h, else a usage error.
func parseFailed(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitcode.OK
	}
	return exitcode.Usage
}

// fail prints err, with any credential it quotes masked, and returns the
// exit status it calls for.
func fail(stderr io.Writer, verb string, err error) int {
	fmt.Fprintf(stderr, "%s %s: %s\n", programName, verb, storeurl.Redact(err.Error()))
	return exitcode.Of(err)
}
