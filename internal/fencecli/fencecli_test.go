package fencecli_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/leasehold/leasehold/client/fence"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/fencecli"
	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

type result struct {
	code           int
	stdout, stderr string
}

func fenceCmd(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := fencecli.Main(t.Context(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// expect fails unless r exited code with stdout equal to out (when out is
// not "") and stderr holding errPart, and never a password.
func (r result) expect(t *testing.T, code int, out, errPart string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	if out != "" && r.stdout != out {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, out)
	}
	if !strings.Contains(r.stderr, errPart) {
		t.Errorf("stderr %q lacks %q", r.stderr, errPart)
	}
	if strings.Contains(r.stdout+r.stderr, "s3cr3t") {
		t.Errorf("the output holds the password:\n%s%s", r.stdout, r.stderr)
	}
}

func TestSQL(t *testing.T) {
	t.Parallel()
	fenceCmd(t, nil, "sql", "--dialect", "postgres").expect(t, 0, fence.SQL(fence.Postgres), "")
	fenceCmd(t, nil, "sql", "--dialect", "sqlite").expect(t, 0, fence.SQL(fence.SQLite), "")
	fenceCmd(t, map[string]string{"LEASEHOLD_DIALECT": "sqlite"}, "sql").expect(t, 0, fence.SQL(fence.SQLite), "")
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"sql"}, "--dialect is required: postgres or sqlite"},
		{[]string{"sql", "--dialect", "mysql"}, `--dialect must be postgres or sqlite, not "mysql"`},
		{[]string{"sql", "--dialect", "Postgres"}, `--dialect must be postgres or sqlite, not "Postgres"`},
		{[]string{"sql", "--dialect", "sqlite", "extra"}, `unexpected argument "extra"`},
		{[]string{"sql", "--bogus"}, "flag provided but not defined"},
		{nil, "a command is needed"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	} {
		r := fenceCmd(t, nil, c.args...)
		r.expect(t, exitcode.Usage, "", c.err)
		if r.stdout != "" {
			t.Errorf("%v printed on stdout: %s", c.args, r.stdout)
		}
	}
	fenceCmd(t, nil, "-h").expect(t, 0, "", "")
	fenceCmd(t, nil, "sql", "-h").expect(t, 0, "", "--dialect")
}

// install on a database of each kind: once installs, again keeps the
// records; the database is then fenced.
func TestInstall(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "app.db")
		if err := os.WriteFile(path, nil, 0o600); err != nil { // an empty file is an empty database
			t.Fatal(err)
		}
		url := "sqlite:" + path
		fenceCmd(t, nil, "install", "--db", url).expect(t, 0,
			"installed the fence in "+url+": table leasehold_fence and its guard trigger\n", "")
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		fenced(t, db, fence.SQLite)
		fenceCmd(t, map[string]string{"LEASEHOLD_DB": url}, "install").expect(t, 0,
			"the fence was already in "+url+": kept table leasehold_fence (1 task recorded) and its guard trigger\n", "")
		stale(t, db, fence.SQLite)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t)
		fenceCmd(t, nil, "install", "--db", url).expect(t, 0,
			"installed the fence in "+url+": table leasehold_fence, its guard trigger and function leasehold_fence(task, token)\n", "")
		db, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		fenced(t, db, fence.Postgres)
		fenceCmd(t, nil, "install", "--db", url).expect(t, 0,
			"the fence was already in "+url+": kept table leasehold_fence (1 task recorded), "+
				"replaced its guard trigger and function leasehold_fence(task, token) with this version's\n", "")
		stale(t, db, fence.Postgres)
	})
}

// fenced records token 5 for nightly on db.
func fenced(t *testing.T, db *sql.DB, d fence.Dialect) {
	t.Helper()
	if err := fence.Check(context.Background(), db, d, "nightly", 5); err != nil {
		t.Fatalf("Check after install: %v", err)
	}
}

// stale checks that db still refuses a token below 5.
func stale(t *testing.T, db *sql.DB, d fence.Dialect) {
	t.Helper()
	if err := fence.Check(context.Background(), db, d, "nightly", 4); !errors.Is(err, fence.ErrStale) {
		t.Errorf("token 4 after 5, after a second install: %v, want stale", err)
	}
}

// A database install cannot reach is 69, naming it with its password
// masked; a --db that is not a database URL is 64, naming --db.
func TestInstallRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	closed := strings.Replace(pgtest.ClosedURL(t), "leasehold@", "leasehold:s3cr3t@", 1)
	masked := strings.Replace(closed, "s3cr3t", "xxxxx", 1)
	for _, c := range []struct {
		name string
		db   string
		code int
		err  string
	}{
		{"postgres closed", closed, exitcode.Unavailable, "leasehold fence install: cannot reach " + masked + ": "},
		{"sqlite missing", "sqlite:" + filepath.Join(dir, "none.db"), exitcode.Unavailable,
			"sqlite:" + filepath.Join(dir, "none.db") + ": no such file (fence install adds the fence to an existing database, and creates none)"},
		{"sqlite in a missing directory", "sqlite:" + filepath.Join(dir, "no", "app.db"), exitcode.Unavailable, "no such file"},
		{"no --db", "", exitcode.Usage, "--db is required: postgres://USER@HOST:PORT/DB or sqlite:PATH"},
		{"another scheme", "mysql://u:s3cr3t@h/db", exitcode.Usage, "--db (scheme mysql) must be postgres://USER@HOST:PORT/DB or sqlite:PATH"},
		{"key=value", "host=h password=s3cr3t", exitcode.Usage, "--db must be postgres://USER@HOST:PORT/DB or sqlite:PATH"},
		{"sqlite without a path", "sqlite:", exitcode.Usage, "--db: "},
		{"raw @ in the password", "postgres://u:s3cr3t@pw@127.0.0.1:1/db", exitcode.Usage, "--db: postgres store URL: a raw '@'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"install"}
			if c.db != "" {
				args = append(args, "--db", c.db)
			}
			r := fenceCmd(t, nil, args...)
			r.expect(t, c.code, "", c.err)
			if r.stdout != "" {
				t.Errorf("printed on stdout: %s", r.stdout)
			}
			if path, ok := strings.CutPrefix(c.db, "sqlite:"); ok && path != "" {
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("install created the missing SQLite file: %v", err)
				}
			}
		})
	}
}
