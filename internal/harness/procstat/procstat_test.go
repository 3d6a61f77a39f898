package procstat

import (
	"os"
	"testing"
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

func TestSchedCPU(t *testing.T) {
	t.Parallel()
	before, err := SchedCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 20_000_000 { // burn some CPU on this goroutine
		x += i % 7
	}
	after, err := SchedCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after < before {
		t.Errorf("schedstat went back: %v then %v (x=%d)", before, after, x)
	}
	if _, err := SchedCPU(-1); err == nil {
		t.Error("a process that does not exist has a CPU time")
	}
}
