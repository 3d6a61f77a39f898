// Package fencecli is `leasehold fence`, the command line of the
// resource's half of fencing (package client/fence):
//
//	leasehold fence sql --dialect postgres|sqlite   print the fence's DDL
//	leasehold fence install --db URL                apply it to a database, idempotently
//
// The database is the user's own, the one a job writes to, never
// leasehold's store: install opens it with a plain database/sql driver
// (pgx's for postgres://, modernc.org/sqlite for sqlite:PATH), applies
// fence.Install and nothing else, and refuses an SQLite file that does not
// exist rather than create an empty database beside the real one. The URL
// forms, and how a password in one is kept out of every message, are the
// store URL's (leasecore/storeurl), so one rule holds for every URL the
// binary takes. --dialect and --db are also read from LEASEHOLD_DIALECT and
// LEASEHOLD_DB, as every verb's flags are.
//
// It is internal, beside internal/cli, rather than a package under
// client/fence: a command line is the binary's, not an API a program
// imports, and client/fence must stay free of drivers.
package fencecli

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx", for postgres:// URLs
	_ "modernc.org/sqlite"             // database/sql's "sqlite", for sqlite: URLs

	"github.com/leasehold/leasehold/client/fence"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// Usage is the fence commands' part of `leasehold --help`.
const Usage = `  leasehold fence sql --dialect postgres|sqlite
                    print the DDL of the fence: the table (on PostgreSQL also the function) with
                    which a database refuses a stale fencing token, for your migration tool
  leasehold fence install --db postgres://USER@HOST:PORT/DB | --db sqlite:PATH
                    apply it to that database (yours, not leasehold's store), idempotently
`

// timeout bounds reaching the database and installing.
const timeout = 30 * time.Second

// Main runs `leasehold fence` with args (after "fence") and returns the
// exit status.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "leasehold fence: a command is needed\n\nUsage:\n"+Usage)
		return exitcode.Usage
	}
	switch verb, rest := args[0], args[1:]; verb {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, "Usage:\n"+Usage)
		return exitcode.OK
	case "sql":
		return printSQL(rest, getenv, stdout, stderr)
	case "install":
		return install(ctx, rest, getenv, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "leasehold fence: unknown command %q\n\nUsage:\n%s", verb, Usage)
		return exitcode.Usage
	}
}

func newFlagSet(verb, args string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("leasehold fence "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: leasehold fence %s %s\n\nFlags (each also read from LEASEHOLD_<FLAG>):\n", verb, args)
		fs.PrintDefaults()
	}
	return fs
}

// parsed is the exit status of a command line cli.ParseArgs refused (it
// has said why): 0 for -h, else a usage error.
func parsed(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitcode.OK
	}
	return exitcode.Usage
}

func printSQL(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sql", "--dialect postgres|sqlite", stderr)
	dialect := fs.String("dialect", "", "the resource database's SQL: `postgres` (PostgreSQL 14 or later) or sqlite")
	if err := cli.ParseArgs(fs, args, getenv); err != nil {
		return parsed(err)
	}
	d, err := parseDialect(*dialect)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold fence sql: %v\n", err)
		return exitcode.Usage
	}
	fmt.Fprint(stdout, fence.SQL(d))
	return exitcode.OK
}

func parseDialect(s string) (fence.Dialect, error) {
	if s == "" {
		return "", errors.New("--dialect is required: postgres or sqlite")
	}
	d, err := fence.ParseDialect(s)
	if err != nil {
		return "", fmt.Errorf("--dialect must be postgres or sqlite, not %q", s)
	}
	return d, nil
}

func install(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet("install", "--db URL", stderr)
	raw := fs.String("db", "", "the resource database: `postgres://USER@HOST:PORT/DB` or sqlite:PATH (an existing file)")
	if err := cli.ParseArgs(fs, args, getenv); err != nil {
		return parsed(err)
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "leasehold fence install: %s\n", storeurl.Redact(err.Error()))
		return code
	}
	u, err := parseDB(*raw)
	if err != nil {
		return fail(exitcode.Usage, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db, d, err := open(ctx, u)
	if err != nil {
		return fail(exitcode.Unavailable, err)
	}
	defer db.Close()
	line, err := apply(ctx, db, d, u)
	if err != nil {
		return fail(exitcode.Failure, err)
	}
	fmt.Fprintln(stdout, line)
	return exitcode.OK
}

// parseDB reads --db: sqlite:PATH or a PostgreSQL URL, as a store URL is
// read (storeurl.Parse), with errors that name --db and never quote a
// password.
func parseDB(raw string) (storeurl.URL, error) {
	const forms = "postgres://USER@HOST:PORT/DB or sqlite:PATH"
	if raw == "" {
		return storeurl.URL{}, errors.New("--db is required: " + forms)
	}
	if err := storeurl.CheckScheme(raw); err != nil {
		what := ""
		if i := strings.Index(raw, "://"); i > 0 && !strings.ContainsAny(raw[:i], ":@/?#") {
			what = " (scheme " + raw[:i] + ")"
		}
		return storeurl.URL{}, fmt.Errorf("--db%s must be %s", what, forms)
	}
	u, err := storeurl.Parse(raw)
	if err != nil {
		return storeurl.URL{}, fmt.Errorf("--db: %w", err)
	}
	return u, nil
}

// open opens the database u names and makes sure it answers.
func open(ctx context.Context, u storeurl.URL) (*sql.DB, fence.Dialect, error) {
	var (
		db  *sql.DB
		d   fence.Dialect
		err error
	)
	switch u.Kind() {
	case "sqlite":
		path, _ := u.SQLitePath()
		if _, serr := os.Stat(path); errors.Is(serr, fs.ErrNotExist) {
			return nil, "", fmt.Errorf("%s: no such file (fence install adds the fence to an existing database, and creates none)", u)
		} else if serr != nil {
			return nil, "", fmt.Errorf("%s: %w", u, serr)
		}
		d = fence.SQLite
		db, err = sql.Open("sqlite", sqliteDSN(path))
	default:
		d = fence.Postgres
		db, err = sql.Open("pgx", u.Secret())
	}
	if err != nil {
		return nil, "", fmt.Errorf("cannot open %s: %w", u, err)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, "", fmt.Errorf("cannot reach %s: %w", u, err)
	}
	return db, d, nil
}

// sqliteDSN opens an existing file for reading and writing (mode=rw: never
// creating it), waiting up to 5 s for a writer that holds the file.
func sqliteDSN(path string) string {
	escaped := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	return "file:" + escaped + "?mode=rw&_pragma=busy_timeout(5000)"
}

// apply installs the fence on db and says what it did, in one line.
func apply(ctx context.Context, db *sql.DB, d fence.Dialect, u storeurl.URL) (string, error) {
	existsQuery := "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'leasehold_fence'"
	if d == fence.Postgres {
		existsQuery = "SELECT count(*) FROM (SELECT to_regclass('leasehold_fence') AS t) AS r WHERE t IS NOT NULL"
	}
	var existed int
	if err := db.QueryRowContext(ctx, existsQuery).Scan(&existed); err != nil {
		return "", fmt.Errorf("read %s: %w", u, err)
	}
	if err := fence.Install(ctx, db, d); err != nil {
		return "", fmt.Errorf("install in %s: %w", u, err)
	}
	if existed == 0 {
		if d == fence.Postgres {
			return fmt.Sprintf("installed the fence in %s: table leasehold_fence, its guard trigger and function leasehold_fence(task, token)", u), nil
		}
		return fmt.Sprintf("installed the fence in %s: table leasehold_fence and its guard trigger", u), nil
	}
	var tasks int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM leasehold_fence").Scan(&tasks); err != nil {
		return "", fmt.Errorf("read %s: %w", u, err)
	}
	kept := fmt.Sprintf("the fence was already in %s: kept table leasehold_fence (%d %s recorded)", u, tasks, plural(tasks, "task", "tasks"))
	if d == fence.Postgres {
		return kept + ", replaced its guard trigger and function leasehold_fence(task, token) with this version's", nil
	}
	return kept + " and its guard trigger", nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
