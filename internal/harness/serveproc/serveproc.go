// Package serveproc starts a `leasehold serve` process the way every test
// and benchmark that needs a real one does: with the arguments given, its
// output collected, and its address learnt from the line it logs when it
// listens (127.0.0.1:PORT, or unix:PATH). It is the one place that knows
// that line's shape.
package serveproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/endpoint"
)

// Options say how to run the process.
type Options struct {
	// Bin is the leasehold binary.
	Bin string
	// Args follow `serve`; a `--listen` among them chooses the address
	// (Start adds `--listen 127.0.0.1:0` before them).
	Args []string
	// Wrapper, when set, is a command and its first arguments that run
	// the binary (say, after setting a limit): the binary's path and
	// arguments are appended to it.
	Wrapper []string
	// Env is the process's environment; nil inherits this one.
	Env []string
	// Output receives everything the process prints (stdout and stderr),
	// as it prints it. Nil discards it.
	Output io.Writer
	// Wait bounds how long Start waits for the listening line; zero is a
	// minute.
	Wait time.Duration
}

// Process is a running `leasehold serve`.
type Process struct {
	// Endpoint is where it listens, as clients take it (--addr).
	Endpoint endpoint.Endpoint
	cmd      *exec.Cmd
	done     chan struct{}
	err      error
}

// listenRE finds the address in the line the sidecar logs when it listens.
var listenRE = regexp.MustCompile(`127\.0\.0\.1:(\d+)|unix:\S+`)

// ErrExited: the process ended before it listened.
var ErrExited = errors.New("leasehold serve exited before listening")

// Start runs the process and returns once it has logged the address it
// listens on. On an error the process has been killed (or has exited), and
// the error says what it printed only through Options.Output.
func Start(o Options) (*Process, error) {
	args := append([]string{"serve", "--listen", "127.0.0.1:0"}, o.Args...)
	argv := append(append(append([]string(nil), o.Wrapper...), o.Bin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = o.Env
	out := o.Output
	if out == nil {
		out = io.Discard
	}
	pr, pw := io.Pipe()
	cmd.Stdout = out
	cmd.Stderr = io.MultiWriter(out, pw)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start leasehold serve: %w", err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(strings.ToLower(line), "listen") {
				if m := listenRE.FindString(line); m != "" {
					addr <- m
					break
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	wait := o.Wait
	if wait <= 0 {
		wait = time.Minute
	}
	select {
	case a := <-addr:
		if _, unix := endpoint.SocketPath(a); !unix {
			a = "http://" + a
		}
		ep, err := endpoint.Parse(a)
		if err != nil {
			p.Kill()
			return nil, fmt.Errorf("leasehold serve listens on %q: %w", a, err)
		}
		p.Endpoint = ep
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%w (%v)", ErrExited, p.err)
	case <-time.After(wait):
		p.Kill()
		return nil, fmt.Errorf("leasehold serve logged no listening address within %s", wait)
	}
}

// PID is the process's.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error (nil for status 0), once Done is closed.
func (p *Process) Err() error { return p.err }

// ExitCode is the process's exit status once Done is closed (-1 when a
// signal ended it).
func (p *Process) ExitCode() int { return p.cmd.ProcessState.ExitCode() }

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill ends the process with SIGKILL and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends SIGTERM and waits up to grace for the process to exit, then
// kills it. It reports whether the process exited on its own.
func (p *Process) Stop(grace time.Duration) bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(grace):
		p.Kill()
		return false
	}
}
