package opcli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

func runStatus(ctx context.Context, b backend, o *options, _ *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return b.status(ctx, o)
}

func runGet(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	lease, err := b.get(ctx, v.task)
	if err != nil {
		return err
	}
	if o.json {
		if err := printJSON(o.stdout, api.LeaseState{Held: lease != nil, Lease: lease}); err != nil {
			return err
		}
	} else if lease != nil {
		printLease(o.stdout, lease)
	} else {
		fmt.Fprintf(o.stdout, "%s: no live lease\n", v.task)
	}
	if lease == nil {
		return told(exitcode.Failure, fmt.Errorf("task %q has no live lease", v.task))
	}
	return nil
}

// listPage is the page size list asks for.
const listPage = 1000

func runList(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	leases := []api.Lease{}
	// Tasks are ordered byte by byte, so those with the prefix are one run:
	// start before it and stop after it.
	after := ""
	if v.prefix != "" {
		after = beforePrefix(v.prefix)
	}
	for {
		page, next, err := b.list(ctx, after)
		if err != nil {
			return err
		}
		done := next == ""
		for _, l := range page {
			if strings.HasPrefix(l.Task, v.prefix) {
				leases = append(leases, l)
			} else if l.Task > v.prefix {
				done = true
				break
			}
		}
		if done {
			break
		}
		after = next
	}
	if o.json {
		return printJSON(o.stdout, api.LeaseList{Leases: leases})
	}
	if len(leases) == 0 {
		fmt.Fprintln(o.stdout, "no live leases")
		return nil
	}
	w := tabwriter.NewWriter(o.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "TASK\tOWNER\tTOKEN\tEXPIRES\tNOTE")
	for _, l := range leases {
		fmt.Fprintf(w, "%s\t%s\t%d\tin %s (%s)\t%s\n", display(l.Task), display(l.Owner), l.Token, millisText(l.TtlRemainingMs), display(l.ExpiresAt), display(l.Note))
	}
	return w.Flush()
}

// beforePrefix returns a name that sorts before every task starting with
// prefix and is none of them: the prefix without its last character ("",
// the beginning, for a prefix of one).
func beforePrefix(prefix string) string { return prefix[:len(prefix)-1] }

func runHistory(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	events, err := b.history(ctx, v.task, v.limit)
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(o.stdout, api.EventList{Events: events})
	}
	if len(events) == 0 {
		fmt.Fprintf(o.stdout, "%s: no history\n", v.task)
		return nil
	}
	w := tabwriter.NewWriter(o.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tAT\tKIND\tOWNER\tTOKEN\tCREDENTIAL\tDETAIL")
	for _, e := range events {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", e.Id, display(e.At), display(string(e.Kind)), display(e.Owner), e.Token, display(orDash(e.Credential)), display(eventDetail(e)))
	}
	return w.Flush()
}

// eventDetail is what `history` and `watch` say of an event beyond its
// columns: its detail, then, on a released event, the run's outcome and the
// hold that rests the task, each only when there is one.
func eventDetail(e api.Event) string {
	var parts []string
	if e.Detail != "" {
		parts = append(parts, e.Detail)
	}
	if r := e.Run; r != nil {
		run := "run " + string(r.Outcome)
		switch {
		case r.ExitCode != nil && r.Error != "":
			run += fmt.Sprintf(" (exit %d: %s)", *r.ExitCode, r.Error)
		case r.ExitCode != nil && (*r.ExitCode != 0 || r.Lost):
			run += fmt.Sprintf(" (exit %d)", *r.ExitCode)
		case r.Error != "":
			run += " (" + r.Error + ")"
		}
		parts = append(parts, run+" in "+millisText(r.DurationMs))
	}
	if e.HoldUntil != nil {
		parts = append(parts, "rests until "+*e.HoldUntil)
	}
	return strings.Join(parts, "; ")
}

// orDash is s, or "-" for an empty column (an event recorded for no
// credential), so that the table's columns stay aligned.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runClaim(ctx context.Context, b backend, o *options, v *verbFlags) error {
	if v.owner == "" {
		v.owner = leasecore.NewOwner()
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	lease, held, err := b.claim(ctx, v)
	if err != nil {
		return err
	}
	if held != nil {
		if o.json {
			if err := printJSON(o.stdout, held); err != nil {
				return err
			}
		} else {
			if held.Holder.Resting != nil && *held.Holder.Resting && held.Holder.AcquiredAt != nil {
				fmt.Fprintf(o.stdout, "%s rests after %s's lease (acquired %s), free in %s (%s)\n", v.task, display(held.Holder.Owner),
					display(*held.Holder.AcquiredAt), millisText(held.Holder.TtlRemainingMs), display(held.Holder.ExpiresAt))
			} else {
				fmt.Fprintf(o.stdout, "%s is held by %s, expires in %s (%s)\n", v.task, display(held.Holder.Owner),
					millisText(held.Holder.TtlRemainingMs), display(held.Holder.ExpiresAt))
			}
		}
		return told(exitcode.Held, fmt.Errorf("task %q is held by %q", v.task, held.Holder.Owner))
	}
	if o.json {
		return printJSON(o.stdout, api.ClaimAcquired{Acquired: true, Lease: *lease})
	}
	printLease(o.stdout, lease)
	return nil
}

func runRenew(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	lease, lost, err := b.renew(ctx, v)
	if err != nil {
		return err
	}
	if lost != nil {
		if o.json {
			if err := printJSON(o.stdout, lost); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(o.stdout, "%s: not renewed: %s (%s)\n", v.task, display(lost.Detail), lost.Reason)
		}
		return told(exitcode.Lost, fmt.Errorf("task %q not renewed: %s", v.task, lost.Reason))
	}
	if o.json {
		return printJSON(o.stdout, api.Renewed{Renewed: true, Lease: *lease})
	}
	printLease(o.stdout, lease)
	return nil
}

// renewNote is the note a renew sends: --note's when given, else none
// (the lease keeps its note).
func renewNote(v *verbFlags) *string {
	if !v.noteGiven {
		return nil
	}
	return new(v.note)
}

// renewLost is the API's answer to a renewal refused with le.
func renewLost(le *leasecore.LostError) *api.RenewLost {
	return &api.RenewLost{Renewed: api.RenewLostRenewedFalse, Reason: api.RenewLostReason(le.Reason), Detail: le.Error()}
}

func runRelease(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if v.force {
		return runRevoke(ctx, b, o, v)
	}
	released, err := b.release(ctx, v)
	if err != nil {
		return err
	}
	if o.json {
		if err := printJSON(o.stdout, api.ReleaseResult{Released: released}); err != nil {
			return err
		}
	} else if released {
		fmt.Fprintf(o.stdout, "released %s\n", v.task)
	} else {
		fmt.Fprintf(o.stdout, "%s: not released: %s\n", v.task, notHeld(v))
	}
	if !released {
		return told(exitcode.Lost, fmt.Errorf("nothing released: %s", notHeld(v)))
	}
	return nil
}

// runRevoke is release --force: an operator's end of whoever's lease.
func runRevoke(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ended, err := b.revoke(ctx, v)
	if err != nil {
		return err
	}
	if o.json {
		if err := printJSON(o.stdout, api.RevokeResult{Released: ended != nil, Lease: ended}); err != nil {
			return err
		}
	} else if ended != nil {
		fmt.Fprintf(o.stdout, "released %s: ended the lease of %s (token %d)\n", v.task, display(ended.Owner), ended.Token)
	} else {
		fmt.Fprintf(o.stdout, "%s: not released: %s\n", v.task, noLiveLease(v))
	}
	if ended == nil {
		return told(exitcode.Lost, fmt.Errorf("nothing released: %s", noLiveLease(v)))
	}
	return nil
}

// noLiveLease is why a forced release ended nothing.
func noLiveLease(v *verbFlags) string {
	if v.token != 0 {
		return fmt.Sprintf("no live lease with token %d", v.token)
	}
	return "no live lease"
}

func notHeld(v *verbFlags) string {
	if v.token != 0 {
		return fmt.Sprintf("%s holds no live lease on it with token %d", v.owner, v.token)
	}
	return v.owner + " holds no live lease on it"
}

func runWatch(ctx context.Context, b backend, o *options, v *verbFlags) error {
	// A watch prints each event as it comes, so no table can be measured
	// first: each column is as wide as its widest value so far, and at
	// least as wide as a usual one.
	cols := columns{min: []int{6, len("2006-01-02T15:04:05.000Z"), len(leasecore.EventTakenOver), 16, 16, len("token 1")}}
	emit := func(e api.Event) error {
		if o.json {
			return printJSONLine(o.stdout, e)
		}
		_, err := io.WriteString(o.stdout, cols.line(strconv.FormatInt(e.Id, 10), display(e.At), display(string(e.Kind)),
			display(e.Task), display(e.Owner), "token "+strconv.FormatInt(e.Token, 10), display(eventDetail(e))))
		return err
	}
	ready := func(pos int64) {
		if !o.json {
			fmt.Fprintf(o.stderr, "watching (caught up at event %d)\n", pos)
		}
	}
	reset := func(pos, newest int64) {
		fmt.Fprintf(o.stderr, "watch: the store's history went back (restored from an older copy, or failed over): "+
			"it has no events after %d, yet this watch was at %d; starting over from its oldest event\n", newest, pos)
	}
	err := b.watch(ctx, v, emit, ready, reset)
	if ctx.Err() != nil {
		return nil // interrupted: the watch's normal end
	}
	return err
}

// columns lays out lines of cells whose widths are not known in advance:
// each column but the last is padded to the widest cell it has had (and
// at least to its min), with two spaces between columns, so that lines
// line up as long as no cell is wider than those before it.
type columns struct {
	min, width []int
}

// line is cells as one line, ending in a newline, its columns padded.
func (c *columns) line(cells ...string) string {
	if len(c.width) < len(cells) {
		c.width = append(c.width, make([]int, len(cells)-len(c.width))...)
	}
	var b strings.Builder
	for i, cell := range cells {
		if i == len(cells)-1 {
			b.WriteString(cell)
			break
		}
		n := utf8.RuneCountInString(cell)
		if i < len(c.min) {
			c.width[i] = max(c.width[i], c.min[i])
		}
		c.width[i] = max(c.width[i], n)
		b.WriteString(cell)
		b.WriteString(strings.Repeat(" ", c.width[i]-n+2))
	}
	return strings.TrimRight(b.String(), " ") + "\n"
}

// printLease prints a lease as label and value lines, its strings escaped
// for a terminal (display).
func printLease(w io.Writer, l *api.Lease) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "task\t%s\n", display(l.Task))
	fmt.Fprintf(tw, "owner\t%s\n", display(l.Owner))
	fmt.Fprintf(tw, "token\t%d\n", l.Token)
	fmt.Fprintf(tw, "expires\tin %s (%s)\n", millisText(l.TtlRemainingMs), display(l.ExpiresAt))
	fmt.Fprintf(tw, "ttl\t%s\n", millisText(l.TtlMs))
	fmt.Fprintf(tw, "acquired\t%s\n", display(l.AcquiredAt))
	fmt.Fprintf(tw, "renewed\t%s (%d renewals)\n", display(l.RenewedAt), l.RenewCount)
	if l.Note != "" {
		fmt.Fprintf(tw, "note\t%s\n", display(l.Note))
	}
	if l.HoldUntil != nil {
		fmt.Fprintf(tw, "hold until\t%s (a release before then rests the task)\n", display(*l.HoldUntil))
	}
	_ = tw.Flush()
}

// millisText is a duration for people: whole seconds from 10 s up, tenths
// from 1 s, whole milliseconds below.
func millisText(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.String() // whole milliseconds: a 12 ms run is not "0s"
}

// printJSON prints v as one indented JSON document, with no character a
// terminal would act on (jsonText).
func printJSON(w io.Writer, v any) error {
	return writeJSON(w, v, "  ")
}

// printJSONLine prints v as one line of JSON, with no character a terminal
// would act on (jsonText).
func printJSONLine(w io.Writer, v any) error {
	return writeJSON(w, v, "")
}

func writeJSON(w io.Writer, v any, indent string) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", indent)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(jsonText(b.Bytes()))
	return err
}
