package leasecore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The catalog: task declarations, retention policies and lease history.
// Infra teams declare (in Terraform, through this package) which tasks
// exist, their ttls and how long their history is kept; every sidecar reads
// the declarations, and the pruner applies the policies.

// TaskDecl declares a task.
type TaskDecl struct {
	// Name is the task's name, by the rules of ValidateTask.
	Name string
	// TTL is the ttl of a claim of the task that gives none.
	TTL time.Duration
	// MaxTTL bounds the ttl a claim or renewal of the task may ask for.
	// Zero means no bound beyond the model's MaxTTL. When set, TTL ≤ MaxTTL.
	MaxTTL time.Duration
	// Description is free text for people, at most MaxDescriptionLen bytes.
	Description string
	// RetentionPolicy names the policy for the task's history. Empty means
	// DefaultPolicy. The policy must exist.
	RetentionPolicy string
	// TTLSpelling and MaxTTLSpelling are TTL and MaxTTL as the declaration's
	// author wrote them ("90s" where Go prints 1m30s). The store keeps
	// them so that a tool that reads the declaration back, such as the
	// Terraform provider's import, can give the same text. Empty: none
	// kept. See ValidateSpelling.
	TTLSpelling, MaxTTLSpelling string
	// MinHold is the minimum hold of a claim of the task that asks for
	// none (ClaimParams.MinHold): a task that runs once per period declares
	// one, so that every replica's claims rest the task whatever they ask.
	// Zero: none. At most MaxMinHold.
	MinHold time.Duration
	// MinHoldSpelling is MinHold as the declaration's author wrote it, as
	// TTLSpelling is for TTL.
	MinHoldSpelling string
	// ManagedBy is who manages the declaration: the Writer.By of its last
	// write. Set by the store; ignored when writing.
	ManagedBy Manager
	// CreatedAt and UpdatedAt are set by the store.
	CreatedAt, UpdatedAt time.Time
}

// RetentionPolicy says how much lease history of a task the pruner keeps.
// An event is deleted when it is older than KeepFor or not among the task's
// newest KeepLast events; a zero bound does not apply.
type RetentionPolicy struct {
	// Name by the rules of ValidatePolicyName.
	Name     string
	KeepFor  time.Duration
	KeepLast int64
	// KeepForSpelling is KeepFor as the policy's author wrote it, as
	// TaskDecl.TTLSpelling is for a ttl.
	KeepForSpelling string
	// ManagedBy is who manages the policy, as TaskDecl.ManagedBy.
	ManagedBy Manager
	// CreatedAt and UpdatedAt are set by the store.
	CreatedAt, UpdatedAt time.Time
}

// Manager names who manages a declaration or a retention policy: who wrote
// it last, and so who may change or remove it (Writer.May).
type Manager string

// The managers of declarations and policies.
const (
	// ManagedByTerraform: the Terraform provider declared it (or adopted it
	// by an import). Only Terraform changes or removes it, so that Terraform
	// never finds its resources changed under it; an operator's write is
	// refused with *ManagedError unless it takes the declaration over.
	ManagedByTerraform Manager = "terraform"
	// ManagedByOperator: an operator declared it (the CLI, the HTTP API, or
	// a Go program through a Service). Anyone may change or remove it.
	// Declarations and policies written before the store recorded managers
	// are ManagedByTerraform, since only the provider wrote them; the
	// default policy is ManagedByOperator until Terraform adopts it.
	ManagedByOperator Manager = "operator"
)

// Writer is who writes a declaration or a retention policy. The zero Writer
// is an operator that takes nothing over.
type Writer struct {
	// By is recorded as the ManagedBy of what it writes: ManagedByTerraform
	// or ManagedByOperator; empty means ManagedByOperator.
	By Manager
	// TakeOver lets an operator change or remove what Terraform manages,
	// making it the operator's: for a declaration that was removed from
	// Terraform's state (terraform state rm) and is the operator's now.
	TakeOver bool
}

// Manager is the manager w writes as: By, or ManagedByOperator when empty.
func (w Writer) Manager() Manager {
	if w.By == "" {
		return ManagedByOperator
	}
	return w.By
}

// May reports whether w may change or remove a declaration or policy that
// m manages: Terraform may change anything (an import adopts an operator's
// declaration), an operator only what operators manage, unless it takes
// the declaration over.
func (w Writer) May(m Manager) bool {
	return m != ManagedByTerraform || w.Manager() == ManagedByTerraform || w.TakeOver
}

// Validate checks By.
func (w Writer) Validate() error {
	switch w.By {
	case "", ManagedByTerraform, ManagedByOperator:
		return nil
	}
	return &ValidationError{Field: "ManagedBy", Rule: fmt.Sprintf("must be %q or %q", ManagedByTerraform, ManagedByOperator)}
}

// DefaultPolicy is the policy of tasks that name none, and of tasks that
// are not declared. The store creates it with DefaultKeepFor and
// DefaultKeepLast; it can be changed but never deleted.
const DefaultPolicy = "default"

// The default policy's bounds, as created by the first migration.
const (
	DefaultKeepFor  = 30 * 24 * time.Hour
	DefaultKeepLast = 1000
)

// Catalog bounds.
const (
	MaxPolicyNameLen  = 64
	MaxDescriptionLen = 1024
	MaxKeepFor        = 100 * 365 * 24 * time.Hour
	MaxKeepLast       = 1_000_000_000
	MaxHistoryLimit   = 1000
	MaxSpellingLen    = 32
)

// EventKind is what happened to a task's lease.
type EventKind string

// The kinds of history events. Renewals are not recorded: a lease's history
// is one row when it is acquired and one when it ends (released or
// expired), and one more when its owner renewed it too late (lost). The
// history holds the same events whether or not anyone watched
// (docs/design.md, "History").
const (
	// EventAcquired: a claim granted a new lease (a new token). A same-owner
	// refresh of a live lease is not an event.
	EventAcquired EventKind = "acquired"
	// EventReleased: the owner released its live lease.
	EventReleased EventKind = "released"
	// EventExpired: the lease ran out unreleased. At is its expiry, and it
	// names no credential: it is recorded once, the same way, by whichever
	// the store sees first of the expiry sweep (HistoryFeed.RecordExpiries),
	// a claim of the task by any owner, and the owner's refused late
	// renewal. Its id is where it was noticed: after the events the history
	// held then, before the next grant's acquired.
	EventExpired EventKind = "expired"
	// EventTakenOver is a legacy kind: leasehold v0.1 (before schema
	// SQLite 8 and PostgreSQL 11) recorded it instead of expired when
	// another owner's claim was the first to notice that a lease ran out
	// (Owner and Token the expired lease's, Detail naming the new owner). A
	// history may still hold it; no store records it now.
	EventTakenOver EventKind = "taken_over"
	// EventLost: the owner tried to renew its lease after it had expired,
	// and the renewal was refused. It is recorded once per lease, at the
	// first such renewal, after the lease's expired.
	EventLost EventKind = "lost"
)

// Event is one entry of a task's lease history.
type Event struct {
	ID     int64 // increases with every event of the store
	Task   string
	Kind   EventKind
	Owner  string
	Token  int64
	At     time.Time // the store's clock
	Detail string
	// Credential names the credential of the operation that recorded the
	// event (ClaimParams.Credential and its like): the claimer's for
	// acquired; the refused renewer's for lost; the releaser's for
	// released. Empty when that operation acted for none, for expired,
	// which nobody did (whoever noticed it), and for events recorded
	// before the store kept credentials. (A legacy taken_over names the
	// claimer's.)
	Credential string
	// HoldUntil, on a released event, is the end of the lease's minimum
	// hold when it had not passed: the task rested until then. Zero
	// otherwise.
	HoldUntil time.Time
	// Run, on a released event, is what the job run under the lease did,
	// when the release said (ReleaseParams.Run). Nil otherwise.
	Run *RunOutcome
}

// Catalog outcomes: what a catalog operation may answer besides success,
// ErrInvalid and ErrUnavailable.
var (
	// ErrNotFound: the declaration or policy does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: a create named a declaration or policy that exists.
	ErrExists = errors.New("already exists")
	// ErrInUse: a policy still used by tasks cannot be deleted.
	ErrInUse = errors.New("in use")
	// ErrUndeclared: the task is not declared and declarations are
	// required.
	ErrUndeclared = errors.New("task not declared")
	// ErrManaged: an operator's write of a declaration or policy that
	// Terraform manages, refused (*ManagedError).
	ErrManaged = errors.New("managed by terraform")
)

// ManagedError refuses an operator's change or removal of a declaration or
// policy that Terraform manages (see Writer.May). Nothing is written.
type ManagedError struct {
	Kind string // "task" or "retention policy"
	Name string
	By   Manager // the declaration's manager: ManagedByTerraform
}

func (e *ManagedError) Error() string {
	return fmt.Sprintf("%s %q is managed by Terraform: change it in the configuration, or remove it from the Terraform state first (terraform state rm) and then take it over", e.Kind, e.Name)
}

// Unwrap makes errors.Is(err, ErrManaged) true.
func (e *ManagedError) Unwrap() error { return ErrManaged }

// NotFoundError says which declaration or policy does not exist.
type NotFoundError struct {
	Kind string // "task" or "retention policy"
	Name string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %q does not exist", e.Kind, e.Name) }
func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// ExistsError says which declaration or policy exists already.
type ExistsError struct {
	Kind string
	Name string
}

func (e *ExistsError) Error() string { return fmt.Sprintf("%s %q already exists", e.Kind, e.Name) }
func (e *ExistsError) Unwrap() error { return ErrExists }

// InUseError refuses to delete a policy that tasks still name, or the
// default policy (Tasks empty).
type InUseError struct {
	Policy string
	Tasks  []string
}

func (e *InUseError) Error() string {
	if len(e.Tasks) == 0 {
		return fmt.Sprintf("retention policy %q cannot be deleted: it is the default for undeclared tasks and tasks that name no policy", e.Policy)
	}
	return fmt.Sprintf("retention policy %q is used by tasks %s: point them at another policy first", e.Policy, strings.Join(e.Tasks, ", "))
}
func (e *InUseError) Unwrap() error { return ErrInUse }

// UndeclaredError refuses a claim of a task that is not declared, when
// declarations are required.
type UndeclaredError struct{ Task string }

func (e *UndeclaredError) Error() string {
	return fmt.Sprintf("task %q is not declared, and declarations are required", e.Task)
}
func (e *UndeclaredError) Unwrap() error { return ErrUndeclared }

// CatalogStore is the part of a Store that keeps declarations, policies and
// history. Every Store is one (see Store, and its validation stance: inputs
// have passed Validate, which the Service checks). A
// task's history is written by the lease operations themselves, in the same
// transaction as the change it records.
type CatalogStore interface {
	// CreateTask stores a new declaration, managed by w.Manager():
	// *ExistsError when the name is taken, *NotFoundError when its policy
	// does not exist.
	CreateTask(ctx context.Context, d TaskDecl, w Writer) (*TaskDecl, error)
	// UpdateTask replaces a declaration (CreatedAt kept), which w.Manager()
	// manages from then on: *NotFoundError when the task or its policy does
	// not exist, *ManagedError when w may not change it (Writer.May). The
	// check and the write are one atomic step.
	UpdateTask(ctx context.Context, d TaskDecl, w Writer) (*TaskDecl, error)
	// GetTask returns a declaration, or nil when there is none.
	GetTask(ctx context.Context, name string) (*TaskDecl, error)
	// ListTasks returns the declarations whose name sorts after p.After,
	// ordered by name, at most p.Limit of them (every one when 0), paged
	// in the database as List is.
	ListTasks(ctx context.Context, p ListParams) ([]TaskDecl, error)
	// DeleteTask removes a declaration and reports whether there was one;
	// *ManagedError when w may not remove it, atomically with the delete.
	// The task's lease and history are left alone.
	DeleteTask(ctx context.Context, name string, w Writer) (bool, error)

	// CreatePolicy, UpdatePolicy, GetPolicy, ListPolicies as for tasks.
	CreatePolicy(ctx context.Context, p RetentionPolicy, w Writer) (*RetentionPolicy, error)
	UpdatePolicy(ctx context.Context, p RetentionPolicy, w Writer) (*RetentionPolicy, error)
	GetPolicy(ctx context.Context, name string) (*RetentionPolicy, error)
	ListPolicies(ctx context.Context) ([]RetentionPolicy, error)
	// DeletePolicy removes a policy and reports whether there was one. It
	// returns *InUseError for the default policy, *ManagedError when w may
	// not remove it, and *InUseError for a policy that declarations name
	// (listing them, by name), in that order.
	DeletePolicy(ctx context.Context, name string, w Writer) (bool, error)

	// History returns the task's newest events, newest first, at most
	// limit (1 ≤ limit ≤ MaxHistoryLimit).
	History(ctx context.Context, task string, limit int) ([]Event, error)
	// PruneHistory deletes, for every task with history, the events its
	// policy does not keep (undeclared tasks: the default policy), by the
	// store's clock, and returns how many it deleted.
	PruneHistory(ctx context.Context) (int64, error)
}

// ValidatePolicyName checks a retention policy's name: the task charset,
// 1 to MaxPolicyNameLen characters. field is the Go name a refusal names
// (ValidationError.Field): "Name" for a policy's own, "RetentionPolicy" for
// a declaration's.
func ValidatePolicyName(field, name string) error {
	if name == "" || len(name) > MaxPolicyNameLen {
		return &ValidationError{Field: field, Rule: fmt.Sprintf("must be 1 to %d characters of %s", MaxPolicyNameLen, taskCharsetMsg)}
	}
	for i := 0; i < len(name); i++ {
		if !isTaskChar(name[i]) {
			return &ValidationError{Field: field, Rule: fmt.Sprintf("must be 1 to %d characters of %s; %q at position %d is not", MaxPolicyNameLen, taskCharsetMsg, rune(name[i]), i+1)}
		}
	}
	return nil
}

// Validate checks a declaration, and fills the default policy name.
// Durations are kept to whole milliseconds.
func (d *TaskDecl) Validate() error {
	if err := ValidateTask(d.Name); err != nil {
		return &ValidationError{Field: "Name", Rule: err.(*ValidationError).Rule}
	}
	d.TTL = d.TTL.Truncate(time.Millisecond)
	d.MaxTTL = d.MaxTTL.Truncate(time.Millisecond)
	if d.TTL < MinTTL || d.TTL > MaxTTL {
		return &ValidationError{Field: "TTL", Rule: fmt.Sprintf("must be between %s and %s", MinTTL, MaxTTL)}
	}
	if d.MaxTTL != 0 && (d.MaxTTL < MinTTL || d.MaxTTL > MaxTTL) {
		return &ValidationError{Field: "MaxTTL", Rule: fmt.Sprintf("must be between %s and %s, or unset", MinTTL, MaxTTL)}
	}
	if d.MaxTTL != 0 && d.TTL > d.MaxTTL {
		return &ValidationError{Field: "TTL", Rule: fmt.Sprintf("must be at most max_ttl (%s), is %s", d.MaxTTL, d.TTL)}
	}
	if err := ValidateSpelling("TTLSpelling", d.TTLSpelling, d.TTL); err != nil {
		return err
	}
	if err := ValidateSpelling("MaxTTLSpelling", d.MaxTTLSpelling, d.MaxTTL); err != nil {
		return err
	}
	d.MinHold = d.MinHold.Truncate(time.Millisecond)
	if d.MinHold < 0 || d.MinHold > MaxMinHold {
		return &ValidationError{Field: "MinHold", Rule: fmt.Sprintf("must be between 0 (none) and %s", MaxMinHold)}
	}
	if err := ValidateSpelling("MinHoldSpelling", d.MinHoldSpelling, d.MinHold); err != nil {
		return err
	}
	if len(d.Description) > MaxDescriptionLen || !utf8.ValidString(d.Description) || strings.ContainsRune(d.Description, 0) {
		return &ValidationError{Field: "Description", Rule: fmt.Sprintf("must be valid UTF-8 without NUL, at most %d bytes", MaxDescriptionLen)}
	}
	if d.RetentionPolicy == "" {
		d.RetentionPolicy = DefaultPolicy
	}
	return ValidatePolicyName("RetentionPolicy", d.RetentionPolicy)
}

// Validate checks a policy. KeepFor is kept to whole seconds.
func (p *RetentionPolicy) Validate() error {
	if err := ValidatePolicyName("Name", p.Name); err != nil {
		return err
	}
	p.KeepFor = p.KeepFor.Truncate(time.Second)
	if p.KeepFor < 0 || p.KeepFor > MaxKeepFor {
		return &ValidationError{Field: "KeepFor", Rule: fmt.Sprintf("must be between 0 (no age limit) and %s", MaxKeepFor)}
	}
	if p.KeepLast < 0 || p.KeepLast > MaxKeepLast {
		return &ValidationError{Field: "KeepLast", Rule: fmt.Sprintf("must be between 0 (no count limit) and %d", MaxKeepLast)}
	}
	return ValidateSpelling("KeepForSpelling", p.KeepForSpelling, p.KeepFor)
}

// ValidateSpelling checks the spelling of a duration d (after d was
// truncated to the precision the store keeps): empty, or a Go duration of
// at most MaxSpellingLen bytes that is exactly d. field is the Go name a
// refusal names.
func ValidateSpelling(field, spelling string, d time.Duration) error {
	if spelling == "" {
		return nil
	}
	if len(spelling) > MaxSpellingLen {
		return &ValidationError{Field: field, Rule: fmt.Sprintf("must be at most %d bytes", MaxSpellingLen)}
	}
	got, err := time.ParseDuration(spelling)
	if err != nil || got != d {
		return &ValidationError{Field: field, Rule: fmt.Sprintf("must be empty or a Go duration equal to %s", d)}
	}
	return nil
}

// ValidateHistoryLimit checks the number of events asked for.
func ValidateHistoryLimit(limit int) error {
	if limit < 1 || limit > MaxHistoryLimit {
		return &ValidationError{Field: "Limit", Rule: fmt.Sprintf("must be between 1 and %d", MaxHistoryLimit)}
	}
	return nil
}
