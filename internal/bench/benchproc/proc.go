package benchproc

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/harness/procstat"
)

// FindPostmaster is the PID of the PostgreSQL server's postmaster when its
// processes run on this host (0 otherwise): the parent of conn's backend.
func FindPostmaster(ctx context.Context, conn *pgx.Conn) int {
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return 0
	}
	st, err := procstat.ReadProcStat(backend)
	if err != nil || !isPostgres(backend) || !isPostgres(st.PPID) {
		return 0
	}
	return st.PPID
}

func isPostgres(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.HasPrefix(string(comm), "postgres")
}

// AwaitBackendsGone waits (5 s at most) until the postmaster has no child
// that is not in before (procstat.TreeCPUChildren's set before a load): the load's
// backends have exited and been reaped, so that their CPU is in the
// postmaster's cutime and cstime. An exited backend not reaped yet would
// count neither there nor among the live children.
func AwaitBackendsGone(postmaster int, before map[int]bool) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		_, now, err := procstat.TreeCPUChildren(postmaster)
		if err != nil {
			return
		}
		gone := true
		for pid := range now {
			if !before[pid] {
				gone = false
				break
			}
		}
		if gone {
			return
		}
	}
}

// FreePort is a loopback port nobody listened on a moment ago. A server
// started on it may still lose a race for it; the callers retry then.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// PostmasterCPU is PostgreSQL's CPU so far (procstat.TreeCPU of its postmaster), and
// false when it is not measured: postmaster is 0 (FindPostmaster found
// PostgreSQL's processes elsewhere) or /proc could not be read.
func PostmasterCPU(postmaster int) (time.Duration, bool) {
	if postmaster == 0 {
		return 0, false
	}
	d, err := procstat.TreeCPU(postmaster)
	return d, err == nil
}
