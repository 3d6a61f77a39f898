// Package procstat reads what the tests and benchmarks measure about a
// process on this machine from /proc: its CPU time (its own, its waited-for
// children's, a server's whole process tree) and its parent. It is the one
// reader of /proc/PID/stat and /proc/PID/schedstat in the module.
package procstat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ClockTick is the unit of /proc/PID/stat's times: USER_HZ, which Linux
// fixes at 100 for user space on every architecture Go runs on (sysconf
// would need cgo to ask).
const ClockTick = 10 * time.Millisecond

// ProcStat is what the benchmarks read from /proc/PID/stat.
type ProcStat struct {
	PPID           int
	UTime, STime   int64 // this process's CPU, in clock ticks
	CUTime, CSTime int64 // its exited, waited-for children's
}

// ParseProcStat reads a /proc/PID/stat line. The command name (field 2)
// is in parentheses and may hold spaces or parentheses itself, so the
// fields are counted from the last ')'.
func ParseProcStat(s string) (ProcStat, error) {
	var st ProcStat
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return st, errors.New("proc stat: no ')' after the command name")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15,
	// cutime 16, cstime 17.
	if len(f) < 15 {
		return st, fmt.Errorf("proc stat: %d fields after the command name, want at least 15", len(f))
	}
	var err error
	num := func(k int) int64 {
		n, e := strconv.ParseInt(f[k], 10, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("proc stat: field %d: %w", k+3, e)
		}
		return n
	}
	st.PPID = int(num(1))
	st.UTime, st.STime, st.CUTime, st.CSTime = num(11), num(12), num(13), num(14)
	return st, err
}

// ReadProcStat reads and parses /proc/PID/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcStat{}, err
	}
	return ParseProcStat(string(b))
}

// ProcessCPU is a process's own CPU time so far (all its threads, user and
// system).
func ProcessCPU(pid int) (time.Duration, error) {
	st, err := ReadProcStat(pid)
	if err != nil {
		return 0, err
	}
	return time.Duration(st.UTime+st.STime) * ClockTick, nil
}

// TreeCPU is the CPU time of a server made of a parent and its child
// processes, such as PostgreSQL's postmaster and backends: the parent's
// own, its exited children's (which it has waited for), and its live
// children's.
func TreeCPU(parent int) (time.Duration, error) {
	d, _, err := TreeCPUChildren(parent)
	return d, err
}

// TreeCPUChildren is TreeCPU and the PIDs of the live children counted.
func TreeCPUChildren(parent int) (time.Duration, map[int]bool, error) {
	children := map[int]bool{}
	st, err := ReadProcStat(parent)
	if err != nil {
		return 0, nil, err
	}
	ticks := st.UTime + st.STime + st.CUTime + st.CSTime
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, nil, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		child, err := ReadProcStat(pid)
		if err != nil || child.PPID != parent {
			continue // gone since the listing, or not a child
		}
		ticks += child.UTime + child.STime
		children[pid] = true
	}
	return time.Duration(ticks) * ClockTick, children, nil
}

// SchedCPU is the CPU time the process (its main thread) has run, in
// nanoseconds, from /proc/PID/schedstat: finer than ProcessCPU's clock
// ticks, for a single-threaded process such as a PostgreSQL backend.
func SchedCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0, errors.New("schedstat: empty")
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schedstat: %w", err)
	}
	return time.Duration(ns), nil
}
