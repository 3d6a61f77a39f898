package api

import (
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
	}
}

// FromTask is a declaration on the wire; max_ttl_ms is left out when the
// task declares none.
func FromTask(d *leasecore.TaskDecl) TaskDeclaration {
	out := TaskDeclaration{
		Name:            d.Name,
		TtlMs:           d.TTL.Milliseconds(),
		Description:     d.Description,
		RetentionPolicy: d.RetentionPolicy,
		CreatedAt:       FormatTime(d.CreatedAt),
		UpdatedAt:       FormatTime(d.UpdatedAt),
	}
	if d.MaxTTL > 0 {
		ms := d.MaxTTL.Milliseconds()
		out.MaxTtlMs = &ms
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
		CreatedAt: FormatTime(p.CreatedAt),
		UpdatedAt: FormatTime(p.UpdatedAt),
	}
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
	}
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
	return leasecore.Lease{
		Task: a.Task, Owner: a.Owner, Token: a.Token,
		AcquiredAt: times[0], RenewedAt: times[1], ExpiresAt: times[2],
		TTL:          time.Duration(a.TtlMs) * time.Millisecond,
		TTLRemaining: time.Duration(a.TtlRemainingMs) * time.Millisecond,
		RenewCount:   a.RenewCount, Note: a.Note,
	}, nil
}

// ToHolder is the holder of a refused claim read from the wire.
func ToHolder(h *Holder) (leasecore.Holder, error) {
	expires, err := ParseTime(h.ExpiresAt)
	if err != nil {
		return leasecore.Holder{}, fmt.Errorf("holder: %w", err)
	}
	return leasecore.Holder{Owner: h.Owner, ExpiresAt: expires, TTLRemaining: time.Duration(h.TtlRemainingMs) * time.Millisecond}, nil
}

// ToEvent is a history event read from the wire.
func ToEvent(e *Event) (leasecore.Event, error) {
	at, err := ParseTime(e.At)
	if err != nil {
		return leasecore.Event{}, fmt.Errorf("event: %w", err)
	}
	return leasecore.Event{
		ID: e.Id, Task: e.Task, Kind: leasecore.EventKind(e.Kind), Owner: e.Owner,
		Token: e.Token, At: at, Detail: e.Detail, Credential: e.Credential,
	}, nil
}
