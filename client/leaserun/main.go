package leaserun

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/internal/exitcode"
)

const name = "leasehold run"

const synopsis = `Usage: leasehold run [--addr URL | --store URL] --task T [--ttl 30s] [--owner O]
                     [--wait 0s | --once-per PERIOD] [--min-hold D] [--grace 10s]
                     [--token-file PATH] -- COMMAND [ARG...]
`

const usageHead = synopsis + `
Holds the lease on task T while COMMAND runs, and stops COMMAND when the lease is lost:
SIGTERM to its process group, SIGKILL after --grace. COMMAND gets LEASEHOLD_TASK,
LEASEHOLD_OWNER and LEASEHOLD_TOKEN (the fencing token) in its environment. SIGINT,
SIGTERM and SIGHUP are forwarded to COMMAND; the lease is released when it exits.

A scheduled job (every replica's cron fires it; one should run it) takes --once-per PERIOD:
the lease is claimed with a minimum hold of half the period, so the replicas that fire
within half a period of the one that ran are skipped, with status 79 and one line saying
who ran it and when, even when the job took a second; the next period finds the task free.

With --addr (the default; http://HOST:PORT, or unix:PATH for a sidecar on a Unix socket)
a sidecar holds the lease over a keepalive stream; with --store (sqlite:PATH or
postgres://...) leasehold run holds it itself, with no sidecar.

Flags (each also read from LEASEHOLD_<FLAG>, e.g. LEASEHOLD_STORE; the command line wins),
except --task and --owner: LEASEHOLD_TASK and LEASEHOLD_OWNER are what leasehold run gives
COMMAND, never read, so a leasehold run inside COMMAND does not take over its parent's lease.
`

var usageTail = `
Exit status (leasehold's one table, for every command):
` + exitcode.Help() + `A command may itself exit with one of these; the log on stderr tells the cases apart.
`

// Main is `leasehold run ARGS...` as a function: it reads the flags from args
// and, for flags the command line does not set, from getenv
// (LEASEHOLD_<FLAG>); it runs the command with stdin, stdout and stderr,
// forwards SIGINT, SIGTERM and SIGHUP to it, and returns the exit status.
// Cancelling ctx acts as a SIGTERM.
func Main(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg, code, ok := parse(args, getenv, stdout, stderr)
	if !ok {
		return code
	}
	cfg.Stdin, cfg.Stdout, cfg.Stderr = stdin, stdout, stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	cfg.Signals = sigs
	return Run(ctx, cfg)
}

// parse turns the command line and the environment into a checked Config, or
// says with which status to stop.
func parse(args []string, getenv func(string) string, stdout, stderr io.Writer) (Config, int, bool) {
	cfg := Config{Addr: DefaultAddr, Grace: DefaultGrace}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below, to stdout for -h
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "sidecar base `URL`, or unix:PATH for its Unix socket; exclusive with --store")
	fs.StringVar(&cfg.Store, "store", "", "store `URL` (sqlite:PATH or postgres://USER@HOST:PORT/DB) to hold the lease with no sidecar; exclusive with --addr")
	fs.StringVar(&cfg.Task, "task", "", "`task` to hold (required)")
	fs.DurationVar(&cfg.TTL, "ttl", 0, "lease `ttl`, from 100ms to 24h; renewed every ttl × 0.4 (default: the task's declared ttl, else 30s)")
	fs.StringVar(&cfg.Owner, "owner", "", "`owner` to claim as (default <hostname>#<pid>#<12 random hex digits>)")
	fs.DurationVar(&cfg.Wait, "wait", 0, "how long (a `duration`) to wait for a held task before giving up with status 75")
	fs.DurationVar(&cfg.OncePer, "once-per", 0, "scheduled-job mode: run at most once per `period` across replicas; the others exit 79 (skipped)")
	fs.DurationVar(&cfg.MinHold, "min-hold", 0, "keep the task from every claimant for at least this `duration` after the lease's acquisition, even once the command has ended")
	fs.DurationVar(&cfg.Grace, "grace", cfg.Grace, "after SIGTERM on a lost lease, how long (a `duration`, at most a quarter of the ttl) before SIGKILL; SIGKILL comes at the local deadline less ttl/10 in any case")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "`path` of a file holding the sidecar's bearer token (--addr only)")
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, usageHead)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
		fmt.Fprint(w, usageTail)
	}
	shortUsage := func() {
		fmt.Fprint(stderr, "\n"+synopsis+"Run 'leasehold run -h' for the flags and the exit statuses.\n")
	}
	usageError := func(format string, a ...any) (Config, int, bool) {
		fmt.Fprintf(stderr, name+": "+format+"\n", a...)
		shortUsage()
		return cfg, exitcode.Usage, false
	}

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return cfg, 0, false
		}
		shortUsage() // after the flag package's message
		return cfg, exitcode.Usage, false
	}
	// The command line chooses the mode for good: an --addr given there is
	// not overruled by LEASEHOLD_STORE, nor --store by LEASEHOLD_ADDR.
	onLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onLine[f.Name] = true })
	if onLine["addr"] && onLine["store"] {
		return usageError("--addr and --store are exclusive: a sidecar holds the lease, or leasehold run does")
	}
	// LEASEHOLD_TASK and LEASEHOLD_OWNER are outputs (what the command
	// gets), never inputs: a leasehold run inside the command must not claim
	// its parent's task as its parent's owner, which would be a refresh of
	// the parent's lease rather than a lease of its own.
	ignored := map[string]bool{outputTask: true, outputOwner: true}
	if onLine["addr"] || onLine["store"] {
		ignored[cli.EnvName("addr")] = true
		ignored[cli.EnvName("store")] = true
	}
	env := func(k string) string {
		if ignored[k] {
			return ""
		}
		return getenv(k)
	}
	if err := cli.ApplyEnv(fs, env); err != nil {
		return usageError("%v", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["addr"] && set["store"] {
		return usageError("%s and %s are exclusive: a sidecar holds the lease, or leasehold run does", cli.EnvName("addr"), cli.EnvName("store"))
	}
	if cfg.Store == "" && !onLine["addr"] {
		// Checked here only to name the variable it came from; check()
		// names --addr.
		if _, err := endpoint.ParseAddr(cfg.Addr); err != nil {
			return usageError("%s=%q: %v", cli.EnvName("addr"), cli.RedactAddr(cfg.Addr), err)
		}
	}
	if set["ttl"] && cfg.TTL == 0 { // zero in Config means "not given"
		return usageError("%v", flagError("ttl", cfg.TTL, ttlRule))
	}
	if set["min-hold"] && cfg.MinHold == 0 {
		return usageError("%v", flagError("min-hold", cfg.MinHold, minHoldRule))
	}
	if set["once-per"] && cfg.OncePer == 0 {
		return usageError("%v", flagError("once-per", cfg.OncePer, oncePerRule))
	}
	cfg.Command = fs.Args()
	if err := cfg.check(); err != nil {
		return usageError("%v", err)
	}
	if cfg.TokenFile != "" {
		if cfg.Store != "" {
			return usageError("--token-file is for a sidecar (--addr), not with --store")
		}
		tok, err := endpoint.ReadTokenFile(cfg.TokenFile)
		if err != nil {
			return usageError("--token-file: %v", err)
		}
		cfg.BearerToken = string(tok)
	}
	return cfg, 0, true
}

// flagError names the flag a Config field comes from.
func flagError(flagName string, value any, rule string) error {
	v := fmt.Sprint(value)
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("--%s is required: %s", flagName, rule)
	}
	return fmt.Errorf("--%s %q: %s", flagName, v, rule)
}
