package leasecore

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Lease is a grant of a task to an owner, as the store recorded it.
type Lease struct {
	Task  string
	Owner string
	// Token is the fencing token: it rises each time the task is granted to an
	// owner who did not hold it live, and never goes down or repeats.
	Token      int64
	AcquiredAt time.Time
	RenewedAt  time.Time
	ExpiresAt  time.Time
	// TTL is the lease's time to live as last claimed or renewed.
	TTL time.Duration
	// TTLRemaining is ExpiresAt minus the store's clock when the store answered.
	// Clients keep their own deadline as (local monotonic now + TTLRemaining),
	// never by comparing ExpiresAt with their wall clock.
	TTLRemaining time.Duration
	// RenewCount counts renewals and same-owner refresh claims since acquisition.
	RenewCount int64
	Note       string
	// HoldUntil, when not zero, is the end of the lease's minimum hold
	// (ClaimParams.MinHold): the task is not granted to anyone before it,
	// even after the lease is released or expires.
	HoldUntil time.Time
}

// Bounds of the lease model (docs/design.md, "Input rules").
const (
	MinTTL       = 100 * time.Millisecond
	MaxTTL       = 24 * time.Hour
	DefaultTTL   = 30 * time.Second
	MaxTaskLen   = 200
	MaxOwnerLen  = 256
	MaxNoteBytes = 1024
	// MaxMinHold bounds a minimum hold: a monthly job's period.
	MaxMinHold     = 31 * 24 * time.Hour
	taskCharsetMsg = "A-Z a-z 0-9 . _ : / @ -"
)

// ClaimParams are the inputs of a claim.
type ClaimParams struct {
	Task  string
	Owner string
	// TTL of the lease; zero means DefaultTTL. Whole milliseconds are kept.
	TTL  time.Duration
	Note string
	// MinHold, when not zero, is the claim's minimum hold: a grant keeps
	// the task from every claimant, its own owner included, until
	// AcquiredAt + MinHold, even when the lease is released or expires
	// before then (the task "rests"). A job that runs once per period
	// claims with one, so that the replicas whose schedulers fire a little
	// later in the same period are refused although the job took a second.
	// A refresh of the owner's live lease keeps the later of the two
	// ends. Zero: the task's declared MinHold (TaskDecl), else none. Whole
	// milliseconds are kept; at most MaxMinHold. A store that keeps
	// minimum holds implements HoldReleaser.
	MinHold time.Duration
	// Credential names the credential the claim acts for (a sidecar's
	// named credential; see ValidateCredential). The history events the
	// claim records carry it. Empty: none, as for a Go program calling
	// leasecore directly, the pruner, or the Terraform provider.
	Credential string
}

// RenewParams are the inputs of a renewal.
type RenewParams struct {
	Task  string
	Owner string
	// TTL of the renewed lease; zero keeps the lease's current TTL.
	TTL time.Duration
	// Token, when non-zero, must equal the lease's token.
	Token int64
	// Credential names the credential the renewal acts for, as
	// ClaimParams.Credential does: a refused renewal's "lost" event carries
	// it.
	Credential string
	// Note, when not nil, replaces the lease's note, as a refresh claim's
	// does (a pointer to "" clears it); nil keeps the lease's note. Valid
	// UTF-8 without NUL, of at most MaxNoteBytes bytes, as ClaimParams.Note.
	Note *string
}

// ReleaseParams are the inputs of a release.
type ReleaseParams struct {
	Task  string
	Owner string
	// Token, when non-zero, must equal the lease's token.
	Token int64
	// Credential names the credential the release acts for, as
	// ClaimParams.Credential does: the "released" event carries it.
	Credential string
	// Detail, when not empty, is kept as the "released" event's Detail:
	// why the lease was ended, when its owner is not the one who ended it
	// (Service.Revoke sets RevokedDetail). Valid UTF-8 without NUL, of at
	// most MaxNoteBytes bytes.
	Detail string
	// Run, when not nil, is what the job run under the lease did
	// (leasehold run, the clients' run helpers): the released event keeps
	// it. A release that ends no lease records nothing.
	Run *RunOutcome
}

// RunOutcome is what a job run under a lease did, as its release reports it.
type RunOutcome struct {
	// ExitCode is the command's exit status, 0 to 255, or NoExitCode
	// when it has none (it could not start, a signal killed it, a Go
	// body returned an error): Error says why then.
	ExitCode int
	// Error says why the run failed other than by its exit status; empty
	// when it did not. Valid UTF-8 without NUL, at most MaxNoteBytes bytes.
	Error string
	// Duration is how long the run took under the lease, whole
	// milliseconds, at most MaxRunDuration.
	Duration time.Duration
	// Lost: the lease was lost while the job ran, and the job was stopped.
	Lost bool
}

// NoExitCode is RunOutcome.ExitCode for a run without an exit status.
const NoExitCode = -1

// MaxRunDuration bounds RunOutcome.Duration.
const MaxRunDuration = 365 * 24 * time.Hour

// RunResult is a run's outcome in one word.
type RunResult string

// The results of a run, in RunOutcome.Result's order of precedence.
const (
	RunLost      RunResult = "lost"      // the lease was lost while the job ran
	RunSucceeded RunResult = "succeeded" // exit status 0, no error
	RunFailed    RunResult = "failed"    // any other end
)

// Result is the run's outcome in one word: lost when the lease was lost,
// else succeeded for exit status 0 with no error, else failed.
func (o RunOutcome) Result() RunResult {
	switch {
	case o.Lost:
		return RunLost
	case o.ExitCode == 0 && o.Error == "":
		return RunSucceeded
	}
	return RunFailed
}

// Validate checks a run's outcome: an exit status of 0 to 255 or
// NoExitCode, an error text as a note's, a duration of 0 to MaxRunDuration.
// A refusal names the field as RunOutcome's with a "Run." prefix.
func (o RunOutcome) Validate() error {
	if o.ExitCode < NoExitCode || o.ExitCode > 255 {
		return &ValidationError{Field: "Run.ExitCode", Rule: "must be 0 to 255, or -1 for none"}
	}
	if err := validateText("Run.Error", o.Error); err != nil {
		return err
	}
	if o.Duration < 0 || o.Duration > MaxRunDuration {
		return &ValidationError{Field: "Run.Duration", Rule: fmt.Sprintf("must be between 0 and %d milliseconds", MaxRunDuration.Milliseconds())}
	}
	return nil
}

// ValidateTask checks a task name: 1–200 characters of A–Z a–z 0–9 . _ : / @ -,
// with no empty, "." or ".." segment between slashes ("a//b", "/a", "a/",
// ".", "a/../b" are refused). Such names are not reachable over HTTP: a
// client or proxy that normalises the path (RFC 3986 dot-segment removal,
// merged slashes) would address another task, or none. This is the one task
// name rule: the stores rely on it, the Terraform provider checks it at
// plan time, and openapi.yaml's TaskName pattern encodes it (a test keeps
// the two in step).
func ValidateTask(task string) error {
	if task == "" || len(task) > MaxTaskLen {
		return &ValidationError{Field: "Task", Rule: taskRule}
	}
	for i := 0; i < len(task); i++ {
		if !isTaskChar(task[i]) {
			return &ValidationError{Field: "Task", Rule: fmt.Sprintf("%s; %q at position %d is not", taskRule, rune(task[i]), i+1)}
		}
	}
	for i, rest := 1, task; ; i++ {
		seg, after, more := strings.Cut(rest, "/")
		if seg == "" || seg == "." || seg == ".." {
			return &ValidationError{Field: "Task", Rule: fmt.Sprintf("%s; segment %d is %q", taskRule, i, seg)}
		}
		if !more {
			return nil
		}
		rest = after
	}
}

// taskRule is the task name rule as ValidateTask states it.
var taskRule = fmt.Sprintf("must be 1 to %d characters of %s, with no empty, \".\" or \"..\" segment between slashes", MaxTaskLen, taskCharsetMsg)

func isTaskChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '.', '_', ':', '/', '@', '-':
		return true
	}
	return false
}

// ValidateOwner checks an owner: 1–256 printable characters of valid UTF-8.
func ValidateOwner(owner string) error {
	if owner == "" || !utf8.ValidString(owner) || utf8.RuneCountInString(owner) > MaxOwnerLen {
		return &ValidationError{Field: "Owner", Rule: ownerRule}
	}
	for _, r := range owner {
		if !unicode.IsPrint(r) {
			return &ValidationError{Field: "Owner", Rule: ownerRule + fmt.Sprintf("; %U is not printable", r)}
		}
	}
	return nil
}

// ownerRule is the owner rule as ValidateOwner states it.
var ownerRule = fmt.Sprintf("must be 1 to %d printable characters", MaxOwnerLen)

// ValidateMinHold checks a minimum hold: zero (none, or the task's
// declared one), or 1 ms to MaxMinHold.
func ValidateMinHold(d time.Duration) error {
	if d != 0 && (d < time.Millisecond || d > MaxMinHold) {
		return &ValidationError{Field: "MinHold", Rule: fmt.Sprintf("must be between 1 and %d milliseconds when given", MaxMinHold.Milliseconds())}
	}
	return nil
}

// ValidateTTL checks a TTL against the model's bounds (100 ms to 24 h).
// Zero is allowed: it stands for the default.
func ValidateTTL(ttl time.Duration) error {
	if ttl == 0 {
		return nil
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return &ValidationError{Field: "TTL", Rule: fmt.Sprintf("must be between %d and %d milliseconds", MinTTL.Milliseconds(), MaxTTL.Milliseconds())}
	}
	return nil
}

// ValidateNote checks a note (a claim's, a renewal's): valid UTF-8 without
// NUL, of at most MaxNoteBytes bytes. A refusal names the field "Note".
func ValidateNote(note string) error { return validateText("Note", note) }

func validateNote(note string) error { return ValidateNote(note) }

// validateText checks field's free text (a note, a release's detail):
// valid UTF-8 without NUL, of at most MaxNoteBytes bytes.
func validateText(field, text string) error {
	if len(text) > MaxNoteBytes || !utf8.ValidString(text) || strings.IndexByte(text, 0) >= 0 {
		return &ValidationError{Field: field, Rule: fmt.Sprintf("must be valid UTF-8 without NUL, of at most %d bytes", MaxNoteBytes)}
	}
	return nil
}

// MaxCredentialLen bounds a credential's name, in bytes.
const MaxCredentialLen = 64

// CredentialRule is the rule of a credential's name, as ValidateCredential
// states it: 1 to MaxCredentialLen characters of the task names' charset.
// A name of that charset needs no escaping in a log line, a terminal, an
// HTTP header or a problem's detail.
const CredentialRule = "must be 1 to 64 characters of " + taskCharsetMsg

// ValidateCredential checks the name of a credential: 1 to
// MaxCredentialLen characters of A–Z a–z 0–9 . _ : / @ - (CredentialRule).
// It is the one rule for credential names: the parameters' Validate
// applies it to a Credential that is not empty (empty means none), and a
// sidecar's credential file, whose credentials must have names, applies it
// as it is. A refusal names the field "Credential".
func ValidateCredential(name string) error {
	if name == "" || len(name) > MaxCredentialLen {
		return &ValidationError{Field: "Credential", Rule: CredentialRule}
	}
	for i := 0; i < len(name); i++ {
		if !isTaskChar(name[i]) {
			return &ValidationError{Field: "Credential", Rule: fmt.Sprintf("%s; %q at position %d is not", CredentialRule, rune(name[i]), i+1)}
		}
	}
	return nil
}

// validateActor checks the Credential of an operation's parameters: none
// (empty), or a name by ValidateCredential.
func validateActor(credential string) error {
	if credential == "" {
		return nil
	}
	return ValidateCredential(credential)
}

func validateToken(token int64) error {
	if token < 0 {
		return &ValidationError{Field: "Token", Rule: "must be a positive integer when given"}
	}
	return nil
}

// Validate checks every input rule of a claim; nil means the store may be asked.
func (p ClaimParams) Validate() error {
	return firstError(ValidateTask(p.Task), ValidateOwner(p.Owner), ValidateTTL(p.TTL), validateNote(p.Note), ValidateMinHold(p.MinHold), validateActor(p.Credential))
}

// Validate checks every input rule of a renewal.
func (p RenewParams) Validate() error {
	return firstError(ValidateTask(p.Task), ValidateOwner(p.Owner), ValidateTTL(p.TTL), validateToken(p.Token), validateOptNote(p.Note), validateActor(p.Credential))
}

// validateOptNote checks a note that may be absent (nil), by the note's rule.
func validateOptNote(note *string) error {
	if note == nil {
		return nil
	}
	return validateNote(*note)
}

// Validate checks every input rule of a release.
func (p ReleaseParams) Validate() error {
	if err := firstError(ValidateTask(p.Task), ValidateOwner(p.Owner), validateToken(p.Token), validateActor(p.Credential), validateText("Detail", p.Detail)); err != nil {
		return err
	}
	if p.Run != nil {
		return p.Run.Validate()
	}
	return nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
