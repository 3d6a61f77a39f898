package opcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leasehold/leasehold/client/leaserun"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar/api"
)

// Usage is the synopsis of the operator commands, for leasehold's help.
const Usage = `  leasehold status  [CONN]            the sidecar's build, store, streams and batching;
                                      with --store: the store's kind, readiness and schema
  leasehold get     TASK [CONN]       the task's live lease (exit 1 when there is none)
  leasehold list    [--prefix P] [CONN]
                                      the live leases, by task
  leasehold history TASK [--limit N] [CONN]
                                      the task's events, newest first
  leasehold claim   TASK [--ttl 30s] [--owner O] [--note N] [CONN]
                                      claim once and print the lease (75 when held)
  leasehold renew   TASK --owner O [--ttl D] [--token N] [--note N] [CONN]
                                      renew once and print the lease (70 when lost);
                                      --note replaces the lease's note, omitted keeps it
  leasehold release TASK --owner O [--token N] [CONN]
                                      release (70 when O did not hold it)
  leasehold release TASK --force [--token N] [CONN]
                                      end whoever holds it, as an operator (admin
                                      right; 70 when nothing was live, 77 refused)
  leasehold watch   [--prefix P] [--since N] [CONN]
                                      every change of holder as it happens, until interrupted
  leasehold tasks   list | show NAME | remove NAME [--take-over] [CONN]
  leasehold tasks   declare NAME --ttl D [--max-ttl D] [--policy P] [--description S] [--take-over] [CONN]
                                      task declarations; declare creates or replaces the whole
                                      declaration (a flag left out takes its default)
  leasehold policies list | show NAME | remove NAME [--take-over] [CONN]
  leasehold policies declare NAME [--keep-for D] [--keep-last N] [--take-over] [CONN]
                                      retention policies of the history, as for tasks; what
                                      Terraform manages is refused (77) unless --take-over
                    CONN: [--addr http://127.0.0.1:7411 | --addr unix:PATH | --store URL]
                          [--token-file PATH] [--json]
`

// requestTimeout bounds each request of a verb other than watch.
const requestTimeout = 15 * time.Second

// options are what every verb is given: where to ask, and how to print.
type options struct {
	addr, store, tokenFile string
	json                   bool
	stdout, stderr         io.Writer
}

// Main runs the operator command verb with args, reading --addr, --store
// and --token-file from getenv (LEASEHOLD_<FLAG>) when the command line does
// not choose a mode, and returns the exit status. Cancelling ctx (a signal)
// ends a watch with status 0.
func Main(ctx context.Context, verb string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	verb, args, group := subcommand(verb, args)
	if group && catalogGroups[verb] {
		fmt.Fprintf(stderr, "leasehold %s: needs a subcommand: list, show NAME, declare NAME or remove NAME (leasehold %s declare -h for its flags)\n", verb, verb)
		return exitcode.Usage
	}
	name := "leasehold " + verb
	argName := map[bool]string{true: "NAME", false: "TASK"}[group]
	o := options{addr: leaserun.DefaultAddr, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", o.addr, "sidecar base `URL`, or unix:PATH for its Unix socket; exclusive with --store")
	fs.StringVar(&o.store, "store", "", "store `URL` (sqlite:PATH or postgres://USER@HOST:PORT/DB) to use with no sidecar; exclusive with --addr")
	fs.StringVar(&o.tokenFile, "token-file", "", "`path` of a file holding the sidecar's bearer token (--addr only)")
	fs.BoolVar(&o.json, "json", false, "print the API's JSON (watch: one event per line)")
	var v verbFlags
	run, positional, ok := v.register(verb, fs)
	if !ok {
		fmt.Fprintf(stderr, "leasehold: unknown command %q\n", verb)
		return exitcode.Usage
	}
	printUsage := func(w io.Writer) {
		fs.SetOutput(w)
		fmt.Fprintf(w, "Usage: %s%s [flags]\n\nFlags (--addr, --store and --token-file also from LEASEHOLD_ADDR, LEASEHOLD_STORE, LEASEHOLD_TOKEN_FILE):\n",
			name, map[bool]string{true: " " + argName}[positional])
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	// The flag package prints the usage itself, on stderr, before Parse
	// returns; it is printed below instead, once: on stdout for -h, on
	// stderr after a flag's error.
	fs.Usage = func() {}
	usageError := func(format string, a ...any) int {
		fmt.Fprintf(stderr, name+": "+format+"\n", a...)
		fmt.Fprintf(stderr, "Run '%s -h' for its flags.\n", name)
		return exitcode.Usage
	}

	// Flags may come before or after TASK: parse, take one argument, go on.
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printUsage(stdout)
				return exitcode.OK
			}
			printUsage(stderr)
			return exitcode.Usage
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case positional && len(rest) != 1:
		return usageError("needs one %s, not %d arguments", argName, len(rest))
	case !positional && len(rest) > 0:
		return usageError("unexpected argument %q", rest[0])
	}
	if positional {
		v.task = rest[0]
		if err := checkName(verb, v.task); err != nil {
			return usageError("%v", err)
		}
	}

	onLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onLine[f.Name] = true })
	if onLine["addr"] && onLine["store"] {
		return usageError("--addr and --store are exclusive: ask a sidecar, or the store itself")
	}
	// Only the connection flags come from the environment, and, as for
	// leasehold run, a mode chosen on the command line is kept.
	fromEnv := map[string]bool{cli.EnvName("token-file"): true}
	if !onLine["addr"] && !onLine["store"] {
		fromEnv[cli.EnvName("addr")], fromEnv[cli.EnvName("store")] = true, true
	}
	if err := cli.ApplyEnv(fs, func(k string) string {
		if fromEnv[k] {
			return getenv(k)
		}
		return ""
	}); err != nil {
		return usageError("%v", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// renew: a --note given (even --note "") replaces the lease's note;
	// none keeps it.
	v.noteGiven = set["note"]
	if set["addr"] && set["store"] {
		return usageError("%s and %s are exclusive: ask a sidecar, or the store itself", cli.EnvName("addr"), cli.EnvName("store"))
	}
	if err := v.check(set); err != nil {
		return usageError("%v", err)
	}
	if err := v.checkCatalog(verb, set); err != nil {
		return usageError("%v", err)
	}

	var b backend
	if o.store != "" {
		// A LEASEHOLD_TOKEN_FILE set for a sidecar does not stop a --store.
		if onLine["token-file"] {
			return usageError("--token-file is for a sidecar (--addr), not with --store")
		}
		// A URL that does not parse (a raw '@' in a password, say) is the
		// operator's to fix: a usage error, not an unavailable store.
		if _, err := storeurl.Parse(o.store); err != nil {
			return usageError("--store: %v", err) // the value is not quoted: it may hold a password
		}
		write := verb == "claim" || verb == "renew" || verb == "release" || strings.HasSuffix(verb, " declare") || strings.HasSuffix(verb, " remove")
		sb, err := openStore(ctx, o.store, write)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %s\n", name, message(storeWords(err)))
			return exitcode.Of(err)
		}
		defer sb.close()
		b = sb
	} else {
		ep, err := endpoint.ParseAddr(o.addr)
		if err != nil {
			if !onLine["addr"] {
				return usageError("%s=%q: %v", cli.EnvName("addr"), cli.RedactAddr(o.addr), err)
			}
			return usageError("--addr %q: %v", cli.RedactAddr(o.addr), err)
		}
		var token string
		if o.tokenFile != "" {
			tok, err := endpoint.ReadTokenFile(o.tokenFile)
			if err != nil {
				return usageError("--token-file: %v", err)
			}
			token = string(tok)
		}
		b = newClient(ep, token, stderr)
	}
	err := run(ctx, b, &o, &v)
	if o.store != "" {
		err = storeWords(err)
	}
	if err != nil && !isTold(err) {
		fmt.Fprintf(stderr, "%s: %s\n", name, message(err))
	}
	return exitcode.Of(err)
}

// verbFlags are the verbs' own flags and argument.
type verbFlags struct {
	task    string
	prefix  string
	limit   int
	ttl     time.Duration
	minHold time.Duration // claim, tasks declare: --min-hold
	owner   string
	note    string
	// noteGiven: --note was on the command line (renew sends it only then).
	noteGiven bool
	token     int64
	since     int64
	force     bool
	// release: the verb is release, which needs --owner or --force.
	release bool
	// renew: the verb is renew, which needs --owner.
	renew bool
	cat   catalogFlags // tasks and policies
}

// defaultHistoryLimit is how many events history prints without --limit,
// as GET …/history answers without one.
const defaultHistoryLimit = 100

// register defines verb's flags on fs and returns what runs it and whether
// it takes a TASK; false for a verb it does not know.
func (v *verbFlags) register(verb string, fs *flag.FlagSet) (func(context.Context, backend, *options, *verbFlags) error, bool, bool) {
	switch verb {
	case "status":
		return runStatus, false, true
	case "get":
		return runGet, true, true
	case "list":
		fs.StringVar(&v.prefix, "prefix", "", "only tasks whose names start with `P`")
		return runList, false, true
	case "history":
		fs.IntVar(&v.limit, "limit", defaultHistoryLimit, "at most `N` events, 1 to 1000")
		return runHistory, true, true
	case "claim":
		fs.DurationVar(&v.ttl, "ttl", 0, "lease `ttl`, from 100ms to 24h (default: the task's declared ttl, else 30s)")
		fs.StringVar(&v.owner, "owner", "", "`owner` to claim as (default <hostname>#<pid>#<12 random hex digits>, printed)")
		fs.StringVar(&v.note, "note", "", "a `note` kept with the lease")
		fs.DurationVar(&v.minHold, "min-hold", 0, "keep the task from every claimant for at least this `duration` after acquisition, even once released (default: the task's declared hold, else none)")
		return runClaim, true, true
	case "renew":
		fs.StringVar(&v.owner, "owner", "", "`owner` that holds the lease (required; `leasehold get TASK` shows it)")
		fs.DurationVar(&v.ttl, "ttl", 0, "the lease's new `ttl`, from 100ms to 24h (default: the lease's current ttl)")
		fs.Int64Var(&v.token, "token", 0, "fencing `token` the lease must have (default: any)")
		fs.StringVar(&v.note, "note", "", "a `note` that replaces the lease's (--note \"\" clears it; default: the lease's note is kept)")
		v.renew = true
		return runRenew, true, true
	case "release":
		fs.StringVar(&v.owner, "owner", "", "`owner` that holds the lease (required without --force; `leasehold get TASK` shows it)")
		fs.Int64Var(&v.token, "token", 0, "fencing `token` the lease must have (default: any)")
		fs.BoolVar(&v.force, "force", false, "end the task's live lease whoever holds it, recorded in the history as an operator's (needs the admin right; exclusive with --owner)")
		v.release = true
		return runRelease, true, true
	case "watch":
		fs.StringVar(&v.prefix, "prefix", "", "only tasks whose names start with `P`")
		fs.Int64Var(&v.since, "since", -1, "start after event `N` (replaying what the history still holds); default: from now")
		return runWatch, false, true
	default:
		return v.registerCatalog(verb, fs)
	}
}

// check validates the verb's flags before anything is asked.
func (v *verbFlags) check(set map[string]bool) error {
	if err := checkPrefix(v.prefix); err != nil {
		return err
	}
	if set["limit"] && (v.limit < 1 || v.limit > leasecore.MaxListLimit) {
		return fmt.Errorf("--limit %d: must be between 1 and %d", v.limit, leasecore.MaxListLimit)
	}
	if set["ttl"] && (v.ttl < leasecore.MinTTL || v.ttl > leasecore.MaxTTL) {
		return fmt.Errorf("--ttl %s: must be between %s and %s", v.ttl, leasecore.MinTTL, leasecore.MaxTTL)
	}
	if set["min-hold"] && (v.minHold < time.Millisecond || v.minHold > leasecore.MaxMinHold) {
		return fmt.Errorf("--min-hold %s: must be between 1ms and %s", v.minHold, leasecore.MaxMinHold)
	}
	if set["owner"] {
		if err := leasecore.ValidateOwner(v.owner); err != nil {
			return fmt.Errorf("--owner %q: %s", v.owner, cli.Rule(err))
		}
	}
	if set["force"] && set["owner"] {
		return errors.New("--force and --owner are exclusive: --owner releases that owner's lease, --force ends whoever's")
	}
	if v.release && !v.force && v.owner == "" {
		return fmt.Errorf("--owner is required: the owner that holds the lease (`leasehold get %s` shows it); "+
			"or --force to end whoever holds it (needs the admin right)", v.task)
	}
	if set["note"] {
		if err := leasecore.ValidateNote(v.note); err != nil {
			return fmt.Errorf("--note: %s", cli.Rule(err))
		}
	}
	if v.renew && v.owner == "" {
		return fmt.Errorf("--owner is required: the owner that holds the lease (`leasehold get %s` shows it)", v.task)
	}
	if set["token"] && v.token < 1 {
		return fmt.Errorf("--token %d: must be a fencing token, 1 or more", v.token)
	}
	if set["since"] && v.since < 0 {
		return fmt.Errorf("--since %d: must be an event id, 0 or more (0 replays the whole history)", v.since)
	}
	return nil
}

// checkPrefix checks a --prefix by the watch's rule: the start of a task
// name, so at most as long as one and of its characters.
func checkPrefix(p string) error {
	if err := leasecore.ValidateTaskPrefix(p); err != nil {
		return fmt.Errorf("--prefix %q: %s", p, cli.Rule(err))
	}
	return nil
}

// backend is where the verbs ask: a sidecar (client) or a store (storeBackend).
type backend interface {
	// status prints the sidecar's or the store's status; an error when the
	// store is not ready.
	status(ctx context.Context, o *options) error
	// get returns the task's live lease, nil when there is none.
	get(ctx context.Context, task string) (*api.Lease, error)
	// list returns one page of live leases after the task after, and the
	// task to continue after ("" on the last page).
	list(ctx context.Context, after string) ([]api.Lease, string, error)
	history(ctx context.Context, task string, limit int) ([]api.Event, error)
	// claim returns the lease, or (for a held task) what the API answers.
	claim(ctx context.Context, v *verbFlags) (*api.Lease, *api.ClaimHeld, error)
	// renew returns the renewed lease, or (for a lease not held) what the
	// API answers.
	renew(ctx context.Context, v *verbFlags) (*api.Lease, *api.RenewLost, error)
	release(ctx context.Context, v *verbFlags) (bool, error)
	// revoke ends the task's live lease whoever holds it (under v.token
	// when given), as an operator, and returns the lease it ended, nil
	// when there was none.
	revoke(ctx context.Context, v *verbFlags) (*api.Lease, error)
	// watch calls emit with each event and ready once caught up, until ctx
	// ends (nil) or the watch fails; reset when the watch's position was
	// ahead of the store's history (it was restored or failed over): the
	// watch then starts over from the oldest event the history holds, and
	// is ready again once it has replayed it.
	watch(ctx context.Context, v *verbFlags, emit func(api.Event) error, ready func(position int64), reset func(position, newest int64)) error
}
