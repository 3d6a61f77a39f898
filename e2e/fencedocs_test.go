package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/pgtest"
)

// TestDocsFencePsql runs docs/cli.md's fencing example as written: the
// ```sql block saved as write.sql, run by the page's `leasehold run … psql`
// command line against a database `leasehold fence install` fenced. The
// first run writes its row under its token; once a newer holder has
// written (the fence holds a higher token), the next run's transaction is
// refused with the page's error and writes nothing.
func TestDocsFencePsql(t *testing.T) {
	t.Parallel()
	psql, err := exec.LookPath("psql")
	if err != nil {
		missingTool(t, "psql not found; CI needs it for docs/cli.md's fencing example", "psql not found (outside CI this skips)")
	}
	text, err := os.ReadFile(filepath.Join("..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	fencing := section(t, "docs/cli.md", string(text), "## Fencing: `leasehold fence`")
	_, sqlBlock, ok := strings.Cut(fencing, "```sql\n")
	if !ok {
		t.Fatal("docs/cli.md's fencing section has no sql block")
	}
	sqlBlock, _, _ = strings.Cut(sqlBlock, "```")
	_, command, ok := strings.Cut(fencing, "run as `")
	if !ok {
		t.Fatal("docs/cli.md's fencing section shows no `run as` command")
	}
	command, _, _ = strings.Cut(command, "`")
	command = strings.Join(strings.Fields(command), " ") // the page wraps it
	if !strings.HasPrefix(command, "leasehold run ") {
		t.Fatalf("the page's command %q is not a leasehold run", command)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "write.sql"), []byte(sqlBlock), 0o600); err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewDatabase(t)
	fenceInstall(t, db)
	conn, err := pgx.Connect(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), `CREATE TABLE report (day date NOT NULL, token bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s := startSidecar(t, "sqlite:"+filepath.Join(t.TempDir(), "leasehold.db"))
	s.waitReady()

	run := func() (string, error) {
		cmd := exec.Command("sh", "-c", command)
		cmd.Dir = dir
		cmd.Env = append(cleanEnv(),
			"PATH="+filepath.Dir(leaseholdBin)+string(os.PathListSeparator)+filepath.Dir(psql)+string(os.PathListSeparator)+os.Getenv("PATH"),
			"LEASEHOLD_ADDR="+s.base,
			"APP_DB="+db,
		)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	rows := func() (n, highest int64) {
		t.Helper()
		if err := conn.QueryRow(t.Context(), `SELECT count(*), coalesce(max(token), 0) FROM report`).Scan(&n, &highest); err != nil {
			t.Fatal(err)
		}
		return n, highest
	}

	if out, err := run(); err != nil {
		t.Fatalf("the page's command: %v\n%s", err, out)
	}
	if n, token := rows(); n != 1 || token != 1 {
		t.Fatalf("report holds %d rows, the highest under token %d; want 1 row under the first lease's token 1", n, token)
	}

	// A newer holder has written since (the fence holds token 5): the next
	// run, under token 2, is refused.
	if _, err := conn.Exec(t.Context(), `UPDATE leasehold_fence SET token = 5 WHERE task = 'nightly'`); err != nil {
		t.Fatal(err)
	}
	out, err := run()
	if err == nil {
		t.Fatalf("the page's command under a stale token succeeded:\n%s", out)
	}
	if !strings.Contains(out, "ERROR:  leasehold_fence: stale token 2") {
		t.Errorf("the stale run printed no `ERROR: leasehold_fence: stale token …` as the page says:\n%s", out)
	}
	if n, _ := rows(); n != 1 {
		t.Errorf("report holds %d rows after the refused run; want the first run's 1", n)
	}
}
