package benchproc

import (
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/leasecore/postgres"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	// A command name with a space and a parenthesis, as a process may name itself.
	line := "4242 (post gres) x) S 17 4242 4242 0 -1 4194560 900 0 0 0 250 75 12 3 20 0 1 0 100 0 0\n"
	st, err := ParseProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ProcStat{PPID: 17, UTime: 250, STime: 75, CUTime: 12, CSTime: 3}); st != want {
		t.Errorf("ParseProcStat = %+v, want %+v", st, want)
	}
	if _, err := ParseProcStat("4242 (x) S 17 1 2"); err == nil {
		t.Error("a short line parsed")
	}
	if _, err := ParseProcStat("4242 x S 17"); err == nil {
		t.Error("a line without the command's parentheses parsed")
	}

	// This process's own line names its parent.
	self, err := ReadProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.PPID != os.Getppid() {
		t.Errorf("PPID = %d, want %d", self.PPID, os.Getppid())
	}
}

// The raw baseline sends the driver's own lone-claim statement: a grant
// with its history row, decided by the conflict clause.
func TestClaimStatement(t *testing.T) {
	t.Parallel()
	sql := postgres.LoneClaimSQL()
	for _, want := range []string{"INSERT INTO leasehold_leases", "ON CONFLICT (task) DO UPDATE", "INSERT INTO leasehold_history", "$1", "$5"} {
		if !strings.Contains(sql, want) {
			t.Errorf("claimSQL lacks %q:\n%s", want, sql)
		}
	}
}

func TestParseLoad(t *testing.T) {
	t.Parallel()
	lr, err := ParseLoad([]byte("{\"ops\":10,\"errors\":1,\"seconds\":2.5,\"keys\":10,\"error\":\"boom\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (LoadResult{Ops: 10, Errors: 1, Seconds: 2.5, Keys: 10, Error: "boom"}); lr != want {
		t.Errorf("ParseLoad = %+v, want %+v", lr, want)
	}
	if _, err := ParseLoad([]byte("panic: oops\n")); err == nil {
		t.Error("a crash's output parsed as a result")
	}
}
