package api

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// The wire shapes of leasecore's values, written by hand beside the
// generated types: the sidecar answers with them, and the operator
// commands print them for a store they read directly, so both give the
// same JSON.

// TimestampLayout is RFC 3339 in UTC with exactly three fractional digits,
// as openapi.yaml's Timestamp requires.
const TimestampLayout = "2006-01-02T15:04:05.000Z"

// FormatTime formats t as a Timestamp.
func FormatTime(t time.Time) Timestamp { return t.UTC().Format(TimestampLayout) }

// Millis is d as a non-negative whole number of milliseconds.
func Millis(d time.Duration) int64 { return max(d.Milliseconds(), 0) }

// FromLease is a lease on the wire.
func FromLease(l *leasecore.Lease) Lease {
	return Lease{
		Task:           l.Task,
		Owner:          l.Owner,
		Token:          l.Token,
		AcquiredAt:     FormatTime(l.AcquiredAt),
		RenewedAt:      FormatTime(l.RenewedAt),
		ExpiresAt:      FormatTime(l.ExpiresAt),
		TtlMs:          l.TTL.Milliseconds(),
		TtlRemainingMs: Millis(l.TTLRemaining),
		RenewCount:     l.RenewCount,
		Note:           l.Note,
		HoldUntil:      optTime(l.HoldUntil),
	}
}

// optTime is t on the wire, or nil (absent) when it is zero.
func optTime(t time.Time) *Timestamp {
	if t.IsZero() {
		return nil
	}
	ts := FormatTime(t)
	return &ts
}

// FromHolder is the holder of a refused claim on the wire; resting is
// said only when true.
func FromHolder(h *leasecore.Holder) Holder {
	out := Holder{
		Owner:          h.Owner,
		ExpiresAt:      FormatTime(h.ExpiresAt),
		TtlRemainingMs: Millis(h.TTLRemaining),
		AcquiredAt:     optTime(h.AcquiredAt),
		HoldUntil:      optTime(h.HoldUntil),
	}
	if h.Resting {
		out.Resting = &h.Resting
	}
	return out
}

// FromTask is a declaration on the wire; max_ttl_ms is left out when the
// task declares none.
func FromTask(d *leasecore.TaskDecl) TaskDeclaration {
	out := TaskDeclaration{
		Name:            d.Name,
		TtlMs:           d.TTL.Milliseconds(),
		Description:     d.Description,
		RetentionPolicy: d.RetentionPolicy,
		ManagedBy:       managedBy(d.ManagedBy),
		CreatedAt:       FormatTime(d.CreatedAt),
		UpdatedAt:       FormatTime(d.UpdatedAt),
	}
	if d.MaxTTL > 0 {
		ms := d.MaxTTL.Milliseconds()
		out.MaxTtlMs = &ms
	}
	if d.MinHold > 0 {
		ms := d.MinHold.Milliseconds()
		out.MinHoldMs = &ms
	}
	if out.RetentionPolicy == "" {
		out.RetentionPolicy = leasecore.DefaultPolicy
	}
	return out
}

// FromPolicy is a retention policy on the wire.
func FromPolicy(p *leasecore.RetentionPolicy) RetentionPolicy {
	return RetentionPolicy{
		Name:      p.Name,
		KeepForMs: Millis(p.KeepFor),
		KeepLast:  max(p.KeepLast, 0),
		ManagedBy: managedBy(p.ManagedBy),
		CreatedAt: FormatTime(p.CreatedAt),
		UpdatedAt: FormatTime(p.UpdatedAt),
	}
}

// managedBy is a manager on the wire; a store always records one, and an
// empty one (a value made in Go, never stored) is the zero Writer's.
func managedBy(m leasecore.Manager) ManagedBy {
	if m == "" {
		return Operator
	}
	return ManagedBy(m)
}

// ToTask is a declaration read from the wire.
func ToTask(d *TaskDeclaration) (leasecore.TaskDecl, error) {
	created, err1 := ParseTime(d.CreatedAt)
	updated, err2 := ParseTime(d.UpdatedAt)
	if err := errors.Join(err1, err2); err != nil {
		return leasecore.TaskDecl{}, fmt.Errorf("task declaration: %w", err)
	}
	out := leasecore.TaskDecl{
		Name: d.Name, TTL: time.Duration(d.TtlMs) * time.Millisecond, Description: d.Description,
		RetentionPolicy: d.RetentionPolicy, ManagedBy: leasecore.Manager(d.ManagedBy), CreatedAt: created, UpdatedAt: updated,
	}
	if d.MaxTtlMs != nil {
		out.MaxTTL = time.Duration(*d.MaxTtlMs) * time.Millisecond
	}
	if d.MinHoldMs != nil {
		out.MinHold = time.Duration(*d.MinHoldMs) * time.Millisecond
	}
	return out, nil
}

// ToPolicy is a retention policy read from the wire.
func ToPolicy(p *RetentionPolicy) (leasecore.RetentionPolicy, error) {
	created, err1 := ParseTime(p.CreatedAt)
	updated, err2 := ParseTime(p.UpdatedAt)
	if err := errors.Join(err1, err2); err != nil {
		return leasecore.RetentionPolicy{}, fmt.Errorf("retention policy: %w", err)
	}
	return leasecore.RetentionPolicy{
		Name: p.Name, KeepFor: time.Duration(p.KeepForMs) * time.Millisecond, KeepLast: p.KeepLast,
		ManagedBy: leasecore.Manager(p.ManagedBy), CreatedAt: created, UpdatedAt: updated,
	}, nil
}

// FromEvent is a history event on the wire.
func FromEvent(e *leasecore.Event) Event {
	return Event{
		Id:         e.ID,
		Task:       e.Task,
		Kind:       EventKind(e.Kind),
		Owner:      e.Owner,
		Token:      e.Token,
		At:         FormatTime(e.At),
		Detail:     e.Detail,
		Credential: e.Credential,
		HoldUntil:  optTime(e.HoldUntil),
		Run:        FromRun(e.Run),
	}
}

// FromRun is a run's outcome as an event carries it; nil for none.
func FromRun(r *leasecore.RunOutcome) *RunResult {
	if r == nil {
		return nil
	}
	out := &RunResult{Outcome: RunResultOutcome(r.Result()), Error: r.Error, DurationMs: Millis(r.Duration), Lost: r.Lost}
	if r.ExitCode != leasecore.NoExitCode {
		out.ExitCode = new(r.ExitCode)
	}
	return out
}

// ToRunOutcome is a release's run read from the wire.
func ToRunOutcome(r *RunOutcome) *leasecore.RunOutcome {
	if r == nil {
		return nil
	}
	out := &leasecore.RunOutcome{ExitCode: leasecore.NoExitCode, Duration: time.Duration(r.DurationMs) * time.Millisecond}
	if r.ExitCode != nil {
		out.ExitCode = *r.ExitCode
	}
	if r.Error != nil {
		out.Error = *r.Error
	}
	if r.Lost != nil {
		out.Lost = *r.Lost
	}
	return out
}

// FromRunOutcome is a run's outcome as a release sends it; nil for none.
func FromRunOutcome(r *leasecore.RunOutcome) *RunOutcome {
	if r == nil {
		return nil
	}
	out := &RunOutcome{DurationMs: Millis(r.Duration)}
	if r.ExitCode != leasecore.NoExitCode {
		out.ExitCode = new(r.ExitCode)
	}
	if r.Error != "" {
		out.Error = new(r.Error)
	}
	if r.Lost {
		out.Lost = new(true)
	}
	return out
}

// The other way: a client reads the wire shapes back into leasecore's
// values. Each fails on a timestamp that is not RFC 3339.

// ParseTime reads a Timestamp.
func ParseTime(ts Timestamp) (time.Time, error) { return time.Parse(time.RFC3339Nano, ts) }

// ToLease is a lease read from the wire.
func ToLease(a *Lease) (leasecore.Lease, error) {
	var times [3]time.Time
	for i, ts := range []Timestamp{a.AcquiredAt, a.RenewedAt, a.ExpiresAt} {
		t, err := ParseTime(ts)
		if err != nil {
			return leasecore.Lease{}, fmt.Errorf("lease: %w", err)
		}
		times[i] = t
	}
	hold, err := parseOptTime(a.HoldUntil)
	if err != nil {
		return leasecore.Lease{}, fmt.Errorf("lease: %w", err)
	}
	return leasecore.Lease{
		Task: a.Task, Owner: a.Owner, Token: a.Token,
		AcquiredAt: times[0], RenewedAt: times[1], ExpiresAt: times[2],
		TTL:          time.Duration(a.TtlMs) * time.Millisecond,
		TTLRemaining: time.Duration(a.TtlRemainingMs) * time.Millisecond,
		RenewCount:   a.RenewCount, Note: a.Note, HoldUntil: hold,
	}, nil
}

// parseOptTime reads an optional Timestamp: zero when absent.
func parseOptTime(ts *Timestamp) (time.Time, error) {
	if ts == nil {
		return time.Time{}, nil
	}
	return ParseTime(*ts)
}

// ToHolder is the holder of a refused claim read from the wire.
func ToHolder(h *Holder) (leasecore.Holder, error) {
	expires, err1 := ParseTime(h.ExpiresAt)
	acquired, err2 := parseOptTime(h.AcquiredAt)
	hold, err3 := parseOptTime(h.HoldUntil)
	if err := errors.Join(err1, err2, err3); err != nil {
		return leasecore.Holder{}, fmt.Errorf("holder: %w", err)
	}
	return leasecore.Holder{
		Owner: h.Owner, ExpiresAt: expires, TTLRemaining: time.Duration(h.TtlRemainingMs) * time.Millisecond,
		AcquiredAt: acquired, HoldUntil: hold, Resting: h.Resting != nil && *h.Resting,
	}, nil
}

// ToRelease is a release's answer read from the wire.
func ToRelease(r *ReleaseResult) (leasecore.ReleaseResult, error) {
	hold, err := parseOptTime(r.HoldUntil)
	if err != nil {
		return leasecore.ReleaseResult{}, fmt.Errorf("release: %w", err)
	}
	return leasecore.ReleaseResult{Released: r.Released, HoldUntil: hold}, nil
}

// FromRelease is a release's answer on the wire.
func FromRelease(r leasecore.ReleaseResult) ReleaseResult {
	return ReleaseResult{Released: r.Released, HoldUntil: optTime(r.HoldUntil)}
}

// ToEvent is a history event read from the wire.
func ToEvent(e *Event) (leasecore.Event, error) {
	at, err := ParseTime(e.At)
	if err != nil {
		return leasecore.Event{}, fmt.Errorf("event: %w", err)
	}
	hold, err := parseOptTime(e.HoldUntil)
	if err != nil {
		return leasecore.Event{}, fmt.Errorf("event: %w", err)
	}
	out := leasecore.Event{
		ID: e.Id, Task: e.Task, Kind: leasecore.EventKind(e.Kind), Owner: e.Owner,
		Token: e.Token, At: at, Detail: e.Detail, Credential: e.Credential, HoldUntil: hold,
	}
	if r := e.Run; r != nil {
		out.Run = &leasecore.RunOutcome{ExitCode: leasecore.NoExitCode, Error: r.Error, Duration: time.Duration(r.DurationMs) * time.Millisecond, Lost: r.Lost}
		if r.ExitCode != nil {
			out.Run.ExitCode = *r.ExitCode
		}
	}
	return out, nil
}
