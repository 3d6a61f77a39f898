package leaserun

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/leasecore"
)

// pipeDelay bounds how long the command's output is still copied after it
// exited, when a stream is not a file and a process it left behind holds the
// pipe open.
const pipeDelay = time.Second

// child is the command, started in a process group of its own.
type child struct {
	pid  int
	done chan struct{} // closed when the command has exited and was reaped
	// state is set before done is closed.
	state *os.ProcessState
}

// The variables the command gets: outputs of leasehold run, which it never
// reads itself.
const (
	outputTask  = "LEASEHOLD_TASK"
	outputOwner = "LEASEHOLD_OWNER"
	outputToken = "LEASEHOLD_TOKEN"
)

// startChild starts the command with the lease in its environment.
func startChild(cfg *Config, lease leasecore.Lease) (*child, error) {
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	// Later entries win over inherited ones of the same name.
	cmd.Env = append(slices.Clip(env),
		outputTask+"="+lease.Task,
		outputOwner+"="+lease.Owner,
		outputToken+"="+strconv.FormatInt(lease.Token, 10),
	)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = cfg.Stdin, cfg.Stdout, cfg.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	cmd.WaitDelay = pipeDelay

	c := &child{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that started the
		// command exits, not the process: keep this goroutine on its thread
		// until the command is gone. The thread ends with the goroutine.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		c.pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait() // the status is in ProcessState
		c.state = cmd.ProcessState
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// signal sends sig to the command's process group; a group that is gone is
// not an error. After done is closed it reaches what the command left
// behind: the group's id is not reused while the group has members, so call
// it then only at once, never later.
func (c *child) signal(sig syscall.Signal) {
	_ = syscall.Kill(-c.pid, sig)
}

// exitCode is the command's status as a shell reports it: its exit status,
// or 128+N when signal N killed it.
func (c *child) exitCode() int {
	if c.state == nil {
		return 1
	}
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitcode.Signal + int(ws.Signal())
	}
	return c.state.ExitCode()
}

// outcome is the run's outcome once the command has exited: its exit
// status, or, when a signal killed it, no status and the signal named;
// the time since start; whether the lease was lost.
func (c *child) outcome(start time.Time, lost bool) *leasecore.RunOutcome {
	run := &leasecore.RunOutcome{ExitCode: c.exitCode(), Duration: time.Since(start).Truncate(time.Millisecond), Lost: lost}
	if c.state == nil {
		return run
	}
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		run.ExitCode, run.Error = leasecore.NoExitCode, fmt.Sprintf("killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return run
}

// startFailure is the status for a command that could not start, as shells
// report it: 127 when it does not exist, 126 otherwise.
func startFailure(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitcode.NotFound
	}
	return exitcode.CannotExec
}
