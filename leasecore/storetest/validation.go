package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// mustInvalid fails t unless err refuses input, naming field.
func mustInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if !errors.Is(err, leasecore.ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid naming %s", err, field)
	}
	if errors.Is(err, leasecore.ErrUnavailable) || errors.Is(err, leasecore.ErrHeld) || errors.Is(err, leasecore.ErrLost) {
		t.Errorf("%v matches another sentinel besides ErrInvalid", err)
	}
	var ve *leasecore.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("%v (%T) is ErrInvalid but no *ValidationError", err, err)
	}
	if ve.Field != field || ve.Rule == "" {
		t.Errorf("ValidationError{Field: %q, Rule: %q}, want field %q and a rule", ve.Field, ve.Rule, field)
	}
}

// op is one Service call on a task with otherwise valid input.
type op struct {
	name string
	call func(ctx context.Context, svc *leasecore.Service, task string) error
}

var taskOps = []op{
	{"claim", func(ctx context.Context, svc *leasecore.Service, task string) error {
		return errOf(svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute}))
	}},
	{"renew", func(ctx context.Context, svc *leasecore.Service, task string) error {
		return errOf(svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "a"}))
	}},
	{"release", func(ctx context.Context, svc *leasecore.Service, task string) error {
		return errOf(svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "a"}))
	}},
	{"get", func(ctx context.Context, svc *leasecore.Service, task string) error {
		return errOf(svc.Get(ctx, task))
	}},
}

func claimWith(p leasecore.ClaimParams) func(context.Context, *leasecore.Service, string) error {
	return func(ctx context.Context, svc *leasecore.Service, task string) error {
		p.Task = task
		return errOf(svc.Claim(ctx, p))
	}
}

func renewWith(p leasecore.RenewParams) func(context.Context, *leasecore.Service, string) error {
	return func(ctx context.Context, svc *leasecore.Service, task string) error {
		p.Task = task
		return errOf(svc.Renew(ctx, p))
	}
}

func releaseWith(p leasecore.ReleaseParams) func(context.Context, *leasecore.Service, string) error {
	return func(ctx context.Context, svc *leasecore.Service, task string) error {
		p.Task = task
		return errOf(svc.Release(ctx, p))
	}
}

// badFields are calls on a valid task that break one rule of another field.
func badFields() []struct {
	name, field string
	call        func(context.Context, *leasecore.Service, string) error
} {
	type row = struct {
		name, field string
		call        func(context.Context, *leasecore.Service, string) error
	}
	owners := []struct{ name, owner string }{
		{"empty", ""},
		{"257 runes", strings.Repeat("é", leasecore.MaxOwnerLen+1)},
		{"newline", "host\n1"},
		{"NUL", "host\x001"},
		{"DEL", "host\x7f"},
		{"invalid UTF-8", "host\xff"},
	}
	var rows []row
	for _, o := range owners {
		rows = append(rows,
			row{"claim owner " + o.name, "Owner", claimWith(leasecore.ClaimParams{Owner: o.owner, TTL: time.Minute})},
			row{"renew owner " + o.name, "Owner", renewWith(leasecore.RenewParams{Owner: o.owner})},
			row{"release owner " + o.name, "Owner", releaseWith(leasecore.ReleaseParams{Owner: o.owner})},
		)
	}
	for _, ttl := range []time.Duration{leasecore.MinTTL - time.Millisecond, leasecore.MaxTTL + time.Millisecond, -time.Second} {
		rows = append(rows,
			row{fmt.Sprintf("claim ttl %v", ttl), "TTL", claimWith(leasecore.ClaimParams{Owner: "a", TTL: ttl})},
			row{fmt.Sprintf("renew ttl %v", ttl), "TTL", renewWith(leasecore.RenewParams{Owner: "a", TTL: ttl})},
		)
	}
	rows = append(rows,
		row{"note 1025 bytes", "Note", claimWith(leasecore.ClaimParams{Owner: "a", TTL: time.Minute, Note: strings.Repeat("n", leasecore.MaxNoteBytes+1)})},
		row{"note invalid UTF-8", "Note", claimWith(leasecore.ClaimParams{Owner: "a", TTL: time.Minute, Note: "bad \xc3\x28"})},
		row{"renew note 1025 bytes", "Note", renewWith(leasecore.RenewParams{Owner: "a", Note: new(strings.Repeat("n", leasecore.MaxNoteBytes+1))})},
		row{"renew note invalid UTF-8", "Note", renewWith(leasecore.RenewParams{Owner: "a", Note: new("bad \xc3\x28")})},
		row{"renew note NUL", "Note", renewWith(leasecore.RenewParams{Owner: "a", Note: new("before\x00after")})},
		row{"renew token -1", "Token", renewWith(leasecore.RenewParams{Owner: "a", Token: -1})},
		row{"release token -1", "Token", releaseWith(leasecore.ReleaseParams{Owner: "a", Token: -1})},
	)
	for _, c := range badCredentials {
		rows = append(rows,
			row{"claim credential " + c.name, "Credential", claimWith(leasecore.ClaimParams{Owner: "a", TTL: time.Minute, Credential: c.credential})},
			row{"renew credential " + c.name, "Credential", renewWith(leasecore.RenewParams{Owner: "a", Credential: c.credential})},
			row{"release credential " + c.name, "Credential", releaseWith(leasecore.ReleaseParams{Owner: "a", Credential: c.credential})},
		)
	}
	return rows
}

// badCredentials break the credential rule (leasecore.ValidateCredential).
var badCredentials = []struct{ name, credential string }{
	{"65 bytes", strings.Repeat("c", leasecore.MaxCredentialLen+1)},
	{"space", "deploy bot"},
	{"newline", "ci\n"},
	{"NUL", "ci\x00"},
	{"non-ASCII", "crédit"},
	{"question mark", "ci?x=1"},
	{"quote", `ci"x`},
}

// Every input that breaks a rule of the model is refused with ErrInvalid and
// a *ValidationError naming the field, and nothing is written.
func (s *suite) testValidationRefused(t *testing.T) {
	badTasks := []struct{ name, task string }{
		{"empty", ""},
		{"201 chars", strings.Repeat("t", leasecore.MaxTaskLen+1)},
		{"space", "nightly report"},
		{"non-ASCII", "tâche"},
		{"newline", "nightly\nreport"},
		{"question mark", "nightly?x=1"},
		{"hash", "nightly#1"},
		{"percent", "nightly%2F1"},
		{"backslash", `nightly\1`},
		{"NUL", "nightly\x00"},
		// Names a client or proxy that normalises paths cannot reach.
		{"dot", "."},
		{"dot dot", ".."},
		{"dot dot segment", "a/../b"},
		{"leading dot segment", "./a"},
		{"trailing dot segment", "a/."},
		{"trailing dot dot segment", "a/.."},
		{"empty segment", "a//b"},
		{"leading slash", "/a"},
		{"trailing slash", "a/"},
		{"slash", "/"},
	}
	for _, bt := range badTasks {
		for _, o := range taskOps {
			t.Run(o.name+" task "+bt.name, func(t *testing.T) {
				t.Parallel()
				mustInvalid(t, o.call(t.Context(), s.svc, bt.task), "Task")
				all, _, err := s.svc.List(t.Context(), leasecore.ListParams{})
				if err != nil {
					t.Fatalf("list: %v", err)
				}
				for _, l := range all {
					if l.Task == bt.task {
						t.Errorf("refused task name %q was written: %s", bt.task, show(&l))
					}
				}
			})
		}
	}
	for _, r := range badFields() {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			task := uniqueTask(t)
			mustInvalid(t, r.call(t.Context(), s.svc, task), r.field)
			mustGone(t, s.svc, task)
		})
	}
}

// Every input at the edge of a rule is accepted and stored as given.
func (s *suite) testValidationAccepted(t *testing.T) {
	rows := []struct {
		name string
		p    func(task string) leasecore.ClaimParams
	}{
		{"dots that are not dot segments", func(task string) leasecore.ClaimParams {
			return leasecore.ClaimParams{Task: "..." + task + "/.a/a./..b/.../a..b", Owner: "a", TTL: time.Minute}
		}},
		{"every task special char", func(task string) leasecore.ClaimParams {
			return leasecore.ClaimParams{Task: task + "/a.b_c:d/e@f-g", Owner: "a", TTL: time.Minute}
		}},
		{"task of 200 chars", func(task string) leasecore.ClaimParams {
			return leasecore.ClaimParams{Task: task + strings.Repeat("x", leasecore.MaxTaskLen-len(task)), Owner: "a", TTL: time.Minute}
		}},
		{"owner of 256 runes", func(task string) leasecore.ClaimParams {
			return leasecore.ClaimParams{Task: task, Owner: strings.Repeat("é", leasecore.MaxOwnerLen), TTL: time.Minute}
		}},
		{"owner of 1 char", func(task string) leasecore.ClaimParams {
			return leasecore.ClaimParams{Task: task, Owner: "x", TTL: time.Minute}
		}},
		{"note of 1024 bytes", func(task string) leasecore.ClaimParams {
			return leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, Note: strings.Repeat("é", leasecore.MaxNoteBytes/2)}
		}},
		{"ttl 100ms", func(task string) leasecore.ClaimParams {
			return leasecore.ClaimParams{Task: task, Owner: "a", TTL: leasecore.MinTTL}
		}},
		{"ttl 24h", func(task string) leasecore.ClaimParams {
			return leasecore.ClaimParams{Task: task, Owner: "a", TTL: leasecore.MaxTTL}
		}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			p := r.p(uniqueTask(t))
			l := claimOK(t, s.svc, p)
			if got := l.ExpiresAt.Sub(l.AcquiredAt); !near(got, p.TTL) {
				t.Errorf("expires_at − acquired_at = %v, want %v", got, p.TTL)
			}
			if p.TTL > leasecore.MinTTL { // a 100 ms lease may be gone by now
				checkSame(t, "get", get(t, s.svc, p.Task), l)
				renewOK(t, s.svc, leasecore.RenewParams{Task: p.Task, Owner: p.Owner, TTL: p.TTL, Token: l.Token})
			}
			if rel := release(t, s.svc, p.Task, p.Owner, l.Token); !rel && p.TTL > leasecore.MinTTL {
				t.Error("release of the accepted lease = false, want true")
			}
		})
	}
}

// Refused input leaves an existing task as it was: a live lease unchanged,
// and the token counter of a released task not moved.
func (s *suite) testValidationNothingWritten(t *testing.T) {
	task := uniqueTask(t)
	ctx := t.Context()

	a := claim(t, s.svc, task, "a", time.Minute)
	mustInvalid(t, errOf(s.svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "b\n", TTL: time.Minute})), "Owner")
	mustInvalid(t, errOf(s.svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "a", TTL: leasecore.MaxTTL + time.Millisecond})), "TTL")
	mustInvalid(t, errOf(s.svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "a", TTL: leasecore.MaxTTL + time.Millisecond})), "TTL")
	mustInvalid(t, errOf(s.svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "a", Token: -a.Token})), "Token")
	mustInvalid(t, errOf(s.svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "a", Note: new(strings.Repeat("n", leasecore.MaxNoteBytes+1))})), "Note")
	mustInvalid(t, errOf(s.svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "a", Token: -a.Token})), "Token")
	mustInvalid(t, errOf(s.svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: ""})), "Owner")
	for _, c := range badCredentials {
		mustInvalid(t, errOf(s.svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "a", TTL: 2 * time.Minute, Credential: c.credential})), "Credential")
		mustInvalid(t, errOf(s.svc.Renew(ctx, leasecore.RenewParams{Task: task, Owner: "a", TTL: 2 * time.Minute, Credential: c.credential})), "Credential")
		mustInvalid(t, errOf(s.svc.Release(ctx, leasecore.ReleaseParams{Task: task, Owner: "a", Token: a.Token, Credential: c.credential})), "Credential")
	}
	checkSame(t, "live lease after refused input", get(t, s.svc, task), a)
	mustHistory(t, s.svc, task, acquired("a", a.Token))

	releaseOK(t, s.svc, task, "a", a.Token)
	mustInvalid(t, errOf(s.svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, Note: strings.Repeat("n", leasecore.MaxNoteBytes+1)})), "Note")
	mustInvalid(t, errOf(s.svc.Claim(ctx, leasecore.ClaimParams{Task: task, Owner: "a", TTL: leasecore.MinTTL - time.Millisecond})), "TTL")
	mustGone(t, s.svc, task)
	if l := claim(t, s.svc, task, "a", time.Minute); l.Token != a.Token+1 {
		t.Errorf("first grant after refused claims: token %d, want %d (refused input moved the counter)", l.Token, a.Token+1)
	}
}

// A note is UTF-8 of up to 1 KiB without NUL (PostgreSQL text cannot hold
// NUL): one holding a NUL byte is refused as invalid, naming the note, before
// the store is asked, so bad input never becomes "unavailable".
func (s *suite) testValidationNoteWithNUL(t *testing.T) {
	task := uniqueTask(t)
	p := leasecore.ClaimParams{Task: task, Owner: "a", TTL: time.Minute, Note: "before\x00after"}
	_, err := s.svc.Claim(t.Context(), p)
	mustInvalid(t, err, "Note")
	mustGone(t, s.svc, task)
}
