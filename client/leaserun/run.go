package leaserun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	lhclient "github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/migration"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// Defaults of the flags.
const (
	// DefaultAddr is the sidecar asked when neither --addr nor --store is given.
	DefaultAddr = "http://" + cli.DefaultListen
	// DefaultTTL is the lease's TTL when --ttl is not given and the task
	// declares none.
	DefaultTTL = leasecore.DefaultTTL
	// DefaultGrace is how long a command may take to exit after SIGTERM on a
	// lost lease before it gets SIGKILL.
	DefaultGrace = 10 * time.Second
)

// Config is what Run needs: where the lease lives, which lease, and the
// command to run under it.
type Config struct {
	// Addr is the sidecar's base URL, as in http://127.0.0.1:7411, or
	// unix:PATH for a sidecar serving on a Unix socket; used when Store is
	// empty.
	Addr string
	// Store, when set, is the store URL (sqlite:PATH or postgres://…):
	// leasehold run holds the lease itself, with no sidecar.
	Store string
	// TokenFile is the --token-file flag; Main reads it into BearerToken.
	TokenFile string
	// BearerToken, when set, is sent to the sidecar as Authorization: Bearer.
	BearerToken string
	// Task is the task to hold.
	Task string
	// Owner to claim as; empty means a fresh one from leasecore.NewOwner.
	Owner string
	// TTL of the lease, from leasecore.MinTTL to leasecore.MaxTTL; zero
	// means the task's declared ttl, else DefaultTTL, as for any claim.
	TTL time.Duration
	// Wait is how long to keep trying while the task is held; 0 gives up at
	// once.
	Wait time.Duration
	// MinHold, when not zero, is the lease's minimum hold
	// (leasecore.ClaimParams.MinHold): once the command ends, the task
	// rests until the lease's acquisition plus MinHold.
	MinHold time.Duration
	// OncePer, when not zero, is the scheduled-job mode: the job runs at
	// most once per OncePer across the replicas whose schedulers fire it.
	// The lease is claimed with a minimum hold of half the period, so the
	// replicas that fire within half a period after the one that ran are
	// refused, and exit with exitcode.Skipped and one line saying who ran
	// it and when; the next period's fires find the task free. Exclusive
	// with MinHold and Wait.
	OncePer time.Duration
	// Grace is the time between SIGTERM and SIGKILL when the lease is lost,
	// at most a quarter of the ttl (see stopTimes).
	Grace time.Duration
	// Command is the program and its arguments; a name without a slash is
	// looked up in PATH.
	Command []string
	// Env is the command's environment before LEASEHOLD_TASK, LEASEHOLD_OWNER
	// and LEASEHOLD_TOKEN are added; nil means os.Environ().
	Env []string
	// Stdin, Stdout and Stderr are the command's standard streams; nil is the
	// null device. Stderr also gets leasehold run's log (unless Logger is
	// set), so a writer that is not an *os.File must be safe for concurrent
	// use.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Logger receives the log lines (acquired, held, lost, released); nil
	// means text lines on Stderr.
	Logger *slog.Logger
	// Signals, when not nil, delivers signals to forward to the command
	// (Main feeds it SIGINT, SIGTERM and SIGHUP). Before the command
	// starts, a signal N ends the run with status 128+N.
	Signals <-chan os.Signal

	// onHeld, when set, is called each time a claim found the task held
	// and the wait goes on. Tests use it to learn that the wait has begun.
	onHeld func()
}

// ttlRule is what --ttl must be, when given.
var ttlRule = fmt.Sprintf("must be between %s and %s", leasecore.MinTTL, leasecore.MaxTTL)

// minHoldRule and oncePerRule are what --min-hold and --once-per must be,
// when given.
var (
	minHoldRule = fmt.Sprintf("must be between 1ms and %s", leasecore.MaxMinHold)
	oncePerRule = fmt.Sprintf("must be between 2ms and %s (the minimum hold is half the period)", 2*leasecore.MaxMinHold)
)

// minHold is the minimum hold the claim asks for: --min-hold, or half of
// --once-per's period.
func (c *Config) minHold() time.Duration {
	if c.OncePer != 0 {
		return (c.OncePer / 2).Truncate(time.Millisecond)
	}
	return c.MinHold
}

// check validates the configuration and fills the owner when none is set.
func (c *Config) check() error {
	if err := leasecore.ValidateTask(c.Task); err != nil {
		return flagError("task", c.Task, cli.Rule(err))
	}
	// With --store, leasehold run talks to the store directly: refuse
	// leasehold's own tasks here as a sidecar would (403), whichever mode.
	if leasecore.IsReserved(c.Task) {
		return flagError("task", c.Task, leasecore.ReservedRule+" (such as the pruner's lease "+leasecore.PruneTask+"); pick another name")
	}
	if c.Owner == "" {
		c.Owner = leasecore.NewOwner()
	}
	if err := leasecore.ValidateOwner(c.Owner); err != nil {
		return flagError("owner", c.Owner, cli.Rule(err))
	}
	if c.TTL != 0 && (c.TTL < leasecore.MinTTL || c.TTL > leasecore.MaxTTL) {
		return flagError("ttl", c.TTL, ttlRule)
	}
	if c.Wait < 0 {
		return flagError("wait", c.Wait, "must not be negative")
	}
	if err := leasecore.ValidateMinHold(c.MinHold); err != nil || c.MinHold < 0 {
		return flagError("min-hold", c.MinHold, minHoldRule)
	}
	if c.OncePer != 0 {
		switch {
		case c.OncePer < 2*time.Millisecond || c.OncePer > 2*leasecore.MaxMinHold:
			return flagError("once-per", c.OncePer, oncePerRule)
		case c.MinHold != 0:
			return errors.New("--once-per and --min-hold are exclusive: --once-per holds the task for half the period")
		case c.Wait != 0:
			return errors.New("--once-per and --wait are exclusive: a replica that finds this period's job taken is skipped, not kept waiting")
		}
	}
	if c.Grace < 0 {
		return flagError("grace", c.Grace, "must not be negative")
	}
	if c.Store == "" {
		if _, err := endpoint.ParseAddr(c.Addr); err != nil {
			return flagError("addr", cli.RedactAddr(c.Addr), err.Error())
		}
	} else if _, err := storeurl.Parse(c.Store); err != nil {
		return fmt.Errorf("--store: %w", err) // not flagError: the value may hold a password
	}
	if len(c.Command) == 0 {
		return errors.New("no command to run: put it after --, as in leasehold run --task nightly -- ./report.sh")
	}
	return nil
}

// hold is a lease being kept in the background, by a Keeper or a cli.
type hold interface {
	// lease is the lease as acquired.
	lease() leasecore.Lease
	// lost is closed when the lease is lost; cause then says why.
	lost() <-chan struct{}
	cause() error
	// deadline is the local deadline: the store cannot grant the task to
	// anyone else before it (it errs early). It only moves later.
	deadline() time.Time
	// release stops keeping the lease and gives it back (unless it was
	// lost) with the run's outcome (nil: none, the command never ran),
	// releasing every resource of the hold. It reports false when the
	// lease turned out to have ended already.
	release(run *leasecore.RunOutcome) (bool, error)
}

// Run holds the lease cfg names while cfg.Command runs and returns the exit
// status (see the package documentation). Cancelling ctx acts as a SIGTERM:
// before the command starts it ends the run; after, it is forwarded.
func Run(ctx context.Context, cfg Config) int {
	if cfg.Logger == nil {
		w := cfg.Stderr
		if w == nil {
			w = io.Discard
		}
		cfg.Logger, _ = cli.NewLogger("text", w) // text is a format it knows
	}
	log := cfg.Logger
	if err := cfg.check(); err != nil {
		log.Error("usage", "err", err)
		return exitcode.Usage
	}
	// Found before claiming, as exec will look it up: a typo must not take
	// a fencing token and write lease history.
	if _, err := exec.LookPath(cfg.Command[0]); err != nil {
		code := startFailure(err)
		msg := "command not found"
		if code == exitcode.CannotExec {
			msg = "command cannot be executed"
		}
		log.Error(msg+"; the lease was not claimed", "command", cfg.Command[0], "err", err)
		return code
	}
	h, code := acquire(ctx, &cfg, log)
	if h == nil {
		return code
	}
	return supervise(ctx, &cfg, h, log)
}

// acquire gets the lease, or says with which status to stop. A signal (or
// the end of ctx) gives up the attempt.
func acquire(ctx context.Context, cfg *Config, log *slog.Logger) (hold, int) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		h   hold
		err error
	}
	results := make(chan result, 1)
	go func() {
		var r result
		if cfg.Store != "" {
			r.h, r.err = acquireStore(actx, cfg, log)
		} else {
			r.h, r.err = acquireSidecar(actx, cfg, log)
		}
		results <- r
	}()
	var r result
	var interrupted os.Signal
	select {
	case r = <-results:
	case sig := <-cfg.Signals:
		interrupted = sig
	case <-ctx.Done():
		interrupted = syscall.SIGTERM
	}
	if interrupted != nil {
		cancel()
		r = <-results
		if r.h != nil {
			_, _ = r.h.release(nil)
		}
		log.Warn("interrupted before the command started", "task", cfg.Task, "signal", interrupted.String())
		return nil, exitcode.Signal + signalNumber(interrupted)
	}

	if r.err == nil {
		return r.h, 0
	}
	err := r.err
	code := exitcode.Of(err)
	var held *leasecore.HeldError
	switch {
	case errors.As(err, &held) && cfg.OncePer != 0:
		logSkipped(log, cfg, held)
		code = exitcode.Skipped
	case errors.As(err, &held):
		log.Warn("held", "task", cfg.Task, "holder", held.Holder.Owner,
			"expires_in", held.Holder.TTLRemaining.Round(time.Millisecond).String())
	case code == exitcode.Usage:
		log.Error("refused", "task", cfg.Task, "err", err)
	case errors.As(err, new(*migration.TooNewError)):
		log.Error("store too new", "task", cfg.Task, "err", err)
	case errors.Is(err, leasecore.ErrUndeclared):
		log.Error("undeclared", "task", cfg.Task, "err", err)
	case errors.Is(err, lhclient.ErrUnauthorized):
		log.Error("unauthorized", "addr", cli.RedactAddr(cfg.Addr), "err", err, "hint", cli.TokenHint(cfg.BearerToken != ""))
	case code == exitcode.NoPerm:
		log.Error("forbidden", "task", cfg.Task, "err", err)
	default:
		// A claim that failed for no outcome of the model (an answer no
		// sidecar gives, a store that cannot be opened) got no lease
		// either: the command did not run for want of a lease to be had.
		log.Error("unavailable", "task", cfg.Task, "err", err)
		code = exitcode.Unavailable
	}
	return nil, code
}

// logSkipped says, in one line, that this replica's run of the scheduled
// job is skipped, who ran it (or runs it) and when, and when the task is
// free again.
func logSkipped(log *slog.Logger, cfg *Config, held *leasecore.HeldError) {
	h := held.Holder
	state := "running" // a live lease: the job is running now
	if h.Resting {
		state = "done" // the lease ended inside its hold: the job ran
	}
	attrs := []any{"task", cfg.Task, "period", cfg.OncePer.String(), "run_by", h.Owner, "state", state}
	if !h.AcquiredAt.IsZero() {
		attrs = append(attrs, "started_at", h.AcquiredAt.UTC().Format(time.RFC3339Nano))
	}
	attrs = append(attrs, "free_at", h.ExpiresAt.UTC().Format(time.RFC3339Nano))
	log.Info("skipped: this period's job is another replica's", attrs...)
}

// claimWaiting calls try until it acquires, fails for another reason than
// held, or cfg.Wait runs out, paced by leasecore.ClaimWait. try gets the time
// left to wait (the sidecar waits on its side for that long).
func claimWaiting(ctx context.Context, cfg *Config, log *slog.Logger, try func(ctx context.Context, wait time.Duration) (hold, error)) (hold, error) {
	first := true
	onHeld := func(held *leasecore.HeldError, left time.Duration) {
		if first {
			first = false
			log.Info("waiting", "task", cfg.Task, "holder", held.Holder.Owner, "wait", left.Round(time.Millisecond).String())
		}
		if cfg.onHeld != nil {
			cfg.onHeld()
		}
	}
	return leasecore.ClaimWait(ctx, leasecore.WaitOptions{Wait: cfg.Wait, OnHeld: onHeld}, try)
}

// supervise runs the command under the held lease and returns the status.
func supervise(ctx context.Context, cfg *Config, h hold, log *slog.Logger) int {
	lease := h.lease()
	log.Info("acquired", "task", lease.Task, "owner", lease.Owner, "token", lease.Token, "ttl", lease.TTL.String())
	start := time.Now()
	c, err := startChild(cfg, lease)
	if err != nil {
		log.Error("cannot start the command", "command", cfg.Command[0], "err", err)
		run := &leasecore.RunOutcome{ExitCode: leasecore.NoExitCode, Error: leasecore.TruncateText("cannot start: " + err.Error()),
			Duration: time.Since(start).Truncate(time.Millisecond)}
		released, rerr := h.release(run)
		logReleased(log, lease, released, rerr)
		return startFailure(err)
	}

	lost := h.lost()
	ctxDone := ctx.Done()
	// The command must be dead before the lease could be granted to anyone
	// else: SIGKILL at the local deadline less a margin, SIGTERM a grace
	// before that, whatever the sidecar says or fails to say. killAt is
	// fixed once the command is being stopped.
	margin, grace := stopTimes(lease.TTL, cfg.Grace)
	termAt := func() time.Time {
		if !deadlineKills {
			return time.Now().Add(time.Hour)
		}
		return h.deadline().Add(-margin - grace)
	}
	timer := time.NewTimer(time.Until(termAt()))
	defer timer.Stop()
	var killAt time.Time // zero until the command is being stopped
	killed, wasLost := false, false
	stop := func(kill time.Time) {
		wasLost, killAt = true, kill
		c.signal(syscall.SIGTERM)
		timer.Reset(time.Until(killAt))
	}
	for {
		select {
		case <-c.done:
			code := c.exitCode()
			if wasLost {
				// Whatever the command left behind in its group ran under
				// a lease that is gone.
				c.signal(syscall.SIGKILL)
				_, _ = h.release(c.outcome(start, true))
				log.Error("command stopped after the lease was lost", "task", lease.Task, "token", lease.Token, "exit", code)
				return exitcode.Lost
			}
			released, err := h.release(c.outcome(start, false))
			logReleased(log, lease, released, err, "exit", code)
			return code
		case <-timer.C:
			switch {
			case killAt.IsZero():
				if t := termAt(); time.Now().Before(t) {
					timer.Reset(time.Until(t)) // a renewal was confirmed meanwhile
					continue
				}
				kill := h.deadline().Add(-margin)
				log.Error("lost", "task", lease.Task, "token", lease.Token,
					"err", fmt.Errorf("lease on %q: %w (in %s): the command must be dead before it", lease.Task, leasecore.ErrLocalDeadline, time.Until(h.deadline()).Round(time.Millisecond)),
					"action", "SIGTERM to the command", "grace", time.Until(kill).Round(time.Millisecond).String())
				stop(kill)
			case !killed:
				killed = true
				log.Warn("command still running at the lease's deadline less its margin: SIGKILL", "task", lease.Task, "margin", margin.String())
				c.signal(syscall.SIGKILL)
			}
		case <-lost:
			lost = nil
			if !killAt.IsZero() {
				continue // already stopping, by the deadline
			}
			kill := time.Now().Add(cfg.Grace)
			if d := h.deadline().Add(-margin); deadlineKills && d.Before(kill) {
				kill = d
			}
			log.Error("lost", "task", lease.Task, "token", lease.Token, "err", h.cause(),
				"action", "SIGTERM to the command", "grace", max(time.Until(kill), 0).Round(time.Millisecond).String())
			stop(kill)
		case sig := <-cfg.Signals:
			log.Info("forwarding signal", "signal", sig.String())
			if s, ok := sig.(syscall.Signal); ok {
				c.signal(s)
			}
		case <-ctxDone:
			ctxDone = nil
			log.Info("cancelled: SIGTERM to the command", "task", lease.Task)
			c.signal(syscall.SIGTERM)
		}
	}
}

// deadlineKills is whether supervise stops the command by the lease's
// local deadline. Only the chaos checker's mutant build turns it off, to
// show that waiting for the sidecar's word lets a command outlive its
// lease.
var deadlineKills = true

// stopTimes are the margin before the local deadline at which a command
// still running gets SIGKILL, and the grace before that at which it gets
// SIGTERM: the margin is ttl/10, from 10 ms to 2 s (it covers the kill
// itself and the clocks' drift over a ttl); the grace is --grace, cut to a
// quarter of the ttl so that it fits inside the lease.
func stopTimes(ttl, grace time.Duration) (margin, fit time.Duration) {
	margin = min(max(ttl/10, 10*time.Millisecond), 2*time.Second)
	return margin, min(grace, ttl/4)
}

func logReleased(log *slog.Logger, lease leasecore.Lease, released bool, err error, attrs ...any) {
	attrs = append([]any{"task", lease.Task, "token", lease.Token}, attrs...)
	if !lease.HoldUntil.IsZero() {
		attrs = append(attrs, "rests_until", lease.HoldUntil.UTC().Format(time.RFC3339Nano))
	}
	if err != nil {
		log.Warn("release failed; the lease ends at its expiry", append(attrs, "err", err)...)
		return
	}
	if !released {
		log.Warn("nothing to release: the lease had already ended", attrs...)
		return
	}
	log.Info("released", attrs...)
}

// signalNumber is N of a signal, for the status 128+N.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return int(syscall.SIGTERM)
}
