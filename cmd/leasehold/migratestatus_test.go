package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/version"
	"github.com/leasehold/leasehold/leasecore/migration"
	"github.com/leasehold/leasehold/leasecore/sqlite"
)

// TestMigrateStatus walks `leasehold migrate --status` through each
// verdict on an SQLite file, with the rows a later build's migrations
// would leave, and holds migrate and serve to it: they serve a store a later
// build expanded, and refuse (78) one it contracted past this build.
func TestMigrateStatus(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lh.db")
	store := "sqlite:" + path
	_, knows, err := sqlite.SchemaVersions()
	if err != nil {
		t.Fatal(err)
	}
	cmd := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(args, noEnv, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	status := func(t *testing.T, wantCode int, want migration.Verdict) migration.Status {
		t.Helper()
		code, out, errOut := cmd("migrate", "--status", "--json", "--store", store)
		var st migration.Status
		if err := json.Unmarshal([]byte(out), &st); code != wantCode || err != nil || st.Verdict != want || st.Knows != knows {
			t.Fatalf("migrate --status --json: exit %d (want %d), %+v (want %s, knows %d), %v\n%s", code, wantCode, st, want, knows, err, errOut)
		}
		return st
	}

	if code, _, errOut := cmd("migrate", "--status", "--store", store); code != exitcode.Unavailable || !strings.Contains(errOut, "no database file") {
		t.Fatalf("--status of a missing file: exit %d, %q; want 69, no database file", code, errOut)
	}
	if code, _, errOut := cmd("migrate", "--json", "--store", store); code != exitcode.Usage || !strings.Contains(errOut, "--json goes with --status") {
		t.Fatalf("--json without --status: exit %d, %q; want 64", code, errOut)
	}
	if code, _, errOut := cmd("migrate", "--store", store); code != exitcode.OK {
		t.Fatalf("migrate: exit %d: %s", code, errOut)
	}
	status(t, exitcode.OK, migration.Current)
	code, out, _ := cmd("migrate", "--status", "--store", store)
	if code != exitcode.OK || !strings.Contains(out, "verdict   current") || !strings.Contains(out, "version "+itoa(knows)) {
		t.Fatalf("migrate --status: exit %d\n%s", code, out)
	}
	// docs/cli.md shows this output for a current store, with its own path
	// and a release's version.
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	const prompt = "$ leasehold migrate --status --store sqlite:./leasehold.db\n"
	_, shown, ok := strings.Cut(string(doc), prompt)
	shown, _, _ = strings.Cut(shown, "```")
	got := strings.ReplaceAll(out, store, "sqlite:./leasehold.db")
	got = strings.Replace(got, "leasehold "+version.String()+" needs", "leasehold v0.1.0 needs", 1)
	if !ok || shown != got {
		t.Errorf("docs/cli.md shows (found: %v)\n%s\nleasehold migrate --status prints\n%s", ok, shown, got)
	}

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO leasehold_schema_migrations (version, name, applied_at) VALUES (?, 'future_expand', 0)`, knows+1)
	if st := status(t, exitcode.OK, migration.Newer); st.Version != knows+1 {
		t.Fatalf("after a later build's expand: %+v", st)
	}
	if code, _, errOut := cmd("migrate", "--store", store); code != exitcode.OK || !strings.Contains(errOut, "newer than this leasehold knows") {
		t.Fatalf("migrate of a store a later build expanded: exit %d, %q; want 0 and a line saying it is newer", code, errOut)
	}

	exec(`INSERT INTO leasehold_schema_migrations (version, name, applied_at, floor_version) VALUES (?, 'future_contract', 0, ?)`, knows+2, knows+2)
	status(t, exitcode.SchemaTooNew, migration.TooNew)
	code, out, _ = cmd("migrate", "--status", "--store", store)
	if code != exitcode.SchemaTooNew || !strings.Contains(out, "verdict   too new") {
		t.Fatalf("migrate --status of a store too new: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		{"migrate", "--store", store},
		{"serve", "--listen", "127.0.0.1:0", "--store", store},
		{"get", "t", "--store", store},
	} {
		code, _, errOut := cmd(args...)
		if code != exitcode.SchemaTooNew || !strings.Contains(errOut, "schema is version "+itoa(knows+2)) || !strings.Contains(errOut, "knows up to "+itoa(knows)) {
			t.Errorf("%s on a store too new: exit %d, %q; want 78 naming versions %d and %d", args[0], code, errOut, knows+2, knows)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
