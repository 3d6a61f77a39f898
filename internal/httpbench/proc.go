package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc/PID/stat's times: USER_HZ, which Linux
// fixes at 100 for user space on every architecture Go runs on (sysconf
// would need cgo to ask).
const clockTick = 10 * time.Millisecond

// procStat is what httpbench reads from /proc/PID/stat.
type procStat struct {
	PPID           int
	UTime, STime   int64 // this process's CPU, in clock ticks
	CUTime, CSTime int64 // its exited, waited-for children's
}

// parseProcStat reads a /proc/PID/stat line. The command name (field 2)
// is in parentheses and may hold spaces or parentheses itself, so the
// fields are counted from the last ')'.
func parseProcStat(s string) (procStat, error) {
	var st procStat
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

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(b))
}

// processCPU is a process's own CPU time so far (all its threads).
func processCPU(pid int) (time.Duration, error) {
	st, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	return time.Duration(st.UTime+st.STime) * clockTick, nil
}

// treeCPU is the CPU time of a server made of a parent and its child
// processes, such as PostgreSQL's postmaster and backends: the parent's
// own, its exited children's (which it has waited for), and its live
// children's.
func treeCPU(parent int) (time.Duration, error) {
	d, _, err := treeCPUChildren(parent)
	return d, err
}

// treeCPUChildren is treeCPU and the PIDs of the live children counted.
func treeCPUChildren(parent int) (time.Duration, map[int]bool, error) {
	children := map[int]bool{}
	st, err := readProcStat(parent)
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
		child, err := readProcStat(pid)
		if err != nil || child.PPID != parent {
			continue // gone since the listing, or not a child
		}
		ticks += child.UTime + child.STime
		children[pid] = true
	}
	return time.Duration(ticks) * clockTick, children, nil
}

// freePort is a loopback port nobody listened on a moment ago. A server
// started on it may still lose a race for it; the callers retry then.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
