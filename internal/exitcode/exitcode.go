// Package exitcode is the one table of leasehold's exit statuses, for every
// verb of the binary (serve, migrate, prune, run, the operator commands),
// and the one function from an error to its status. The statuses follow
// sysexits(3) where one fits. The "Exit status" section of docs/cli.md shows the
// same table (a test holds the two together).
//
// Outcomes of the lease model (leasecore's sentinel errors) and of the Go
// client (client.ErrUnauthorized, *client.NotSidecarError, a
// *client.ProblemError the client's table left as it is) map here; a
// command that means a status of its own for an error (a usage error, a
// release that released nothing) says so with With.
package exitcode

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	lhclient "github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/migration"
	"github.com/leasehold/leasehold/sidecar/api"
)

// The exit statuses. A status not listed here is leasehold run's command's
// own (0-255, or 128+N for a signal N).
const (
	// OK: the verb did what it was asked.
	OK = 0
	// Failure: any failure no other status names; `get`: the task has no
	// live lease.
	Failure = 1
	// Usage: a bad command line or environment (an unknown verb or flag,
	// a value that breaks its rule, an unreadable --token-file), or input
	// the sidecar or store refused as invalid (EX_USAGE).
	Usage = 64
	// Unavailable: the store or sidecar could not answer, or the server at
	// --addr is not a leasehold sidecar (EX_UNAVAILABLE).
	Unavailable = 69
	// Lost: `run`: the lease was lost while the command ran; `renew`: the
	// owner held no live lease, so nothing was renewed; `release`: the
	// owner held no live lease, so nothing was released (EX_SOFTWARE).
	Lost = 70
	// Held: another owner holds the task (EX_TEMPFAIL).
	Held = 75
	// NoPerm: the sidecar refused the credentials, or the caller may not
	// act on the task (a reserved task, a scope that does not cover it)
	// (EX_NOPERM).
	NoPerm = 77
	// Undeclared: the task is not declared and the sidecar requires
	// declared tasks (EX_CONFIG).
	Undeclared = 78
	// SchemaTooNew: the store's schema is newer than this leasehold can
	// serve; a newer leasehold is needed (EX_CONFIG, as Undeclared: the
	// deployment pairs this binary with the wrong store).
	SchemaTooNew = 78
	// Skipped: `run --once-per`: another replica ran this period's job,
	// or is running it; the command did not run. Not a failure: a cron
	// entry tells it from one by this status.
	Skipped = 79
	// CannotExec: `run`: the command was found but could not be executed.
	CannotExec = 126
	// NotFound: `run`: the command was not found.
	NotFound = 127
	// Signal is added to a signal's number: `run`'s command was killed by
	// it, or run got it before the command started.
	Signal = 128
)

// Row is one line of the table: a status as docs/cli.md writes it, and
// what it means.
type Row struct {
	Status  string
	Meaning string
}

// Table is every exit status with its meaning, in docs/cli.md's words and
// order.
var Table = []Row{
	{"0", "done (`get`: the task has a live lease; `release`: released it)"},
	{"1", "any other failure; `get`: the task has no live lease (as `grep`'s 1 for no match)"},
	{"64", "usage error, for every verb: an unknown verb or flag, a stray argument, a value that breaks its rule (a bad `--addr` or `--ttl`, `serve --listen` off loopback without a token); `run` and the operator commands: an unreadable `--token-file`; or input the sidecar or store refused as invalid (400, 422)"},
	{"69", "the store or sidecar is unavailable (`serve`, `migrate`: the store cannot be opened; `status`: its store is not ready), or the server at `--addr` did not answer like a leasehold sidecar; `run`: the lease could not be claimed, and the command did not run"},
	{"70", "`run`: the lease was lost while the command ran, and it was stopped; `renew`: that owner (and token) held no live lease, so nothing was renewed; `release`: that owner (and token) held no live lease, so nothing was released (`release --force`: no live lease, or none under `--token`)"},
	{"75", "`run`, `claim`: another owner holds the task (`run`: after `--wait`; the command did not run)"},
	{"77", "the sidecar refused the credentials, or the caller may not act on the task (reserved `leasehold:…`, or outside its scope; `release --force`: no admin right); `tasks`, `policies`: Terraform manages the declaration"},
	{"78", "`run`, `claim`: the task is not declared and the sidecar requires declared tasks (`serve --require-declared`); `serve`, `migrate` and the verbs with `--store`: the store's schema is newer than this leasehold can serve (`migrate --status`: it says so)"},
	{"79", "`run --once-per`: skipped: another replica ran this period's job, or is running it (one line says who and when); the command did not run"},
	{"126 / 127", "`run`: the command could not be executed / was not found (looked up before the lease is claimed: no fencing token is taken, no history written)"},
	{"128+N", "`run`: the command was killed by signal N, or `run` got signal N before the command started"},
	{"the command's", "`run`: the command ran to the end, and this is its own status"},
}

// coded is an error with the status a command chose for it.
type coded struct {
	code int
	err  error
}

func (e *coded) Error() string { return e.err.Error() }
func (e *coded) Unwrap() error { return e.err }

// With is err carrying code: Of(With(code, err)) is code, and err's
// message and chain are kept. With of a nil error is nil.
func With(code int, err error) error {
	if err == nil {
		return nil
	}
	return &coded{code: code, err: err}
}

// Of is the exit status err calls for: OK for nil, the status given with
// With, else the one its outcome maps to (Failure for an error of no
// outcome).
func Of(err error) int {
	var (
		c      *coded
		ns     *lhclient.NotSidecarError
		pe     *lhclient.ProblemError
		tooNew *migration.TooNewError
	)
	switch {
	case err == nil:
		return OK
	case errors.As(err, &c):
		return c.code
	case errors.As(err, &ns):
		return Unavailable
	case errors.Is(err, lhclient.ErrUnauthorized),
		errors.Is(err, leasecore.ErrForbidden), errors.Is(err, leasecore.ErrReserved),
		errors.Is(err, leasecore.ErrManaged): // Terraform's to change, not this caller's
		return NoPerm
	case errors.Is(err, leasecore.ErrHeld):
		return Held
	case errors.Is(err, leasecore.ErrUndeclared):
		return Undeclared
	case errors.As(err, &tooNew):
		return SchemaTooNew
	case errors.Is(err, leasecore.ErrLost):
		return Lost
	case errors.Is(err, leasecore.ErrInvalid):
		return Usage
	case errors.Is(err, leasecore.ErrUnavailable):
		return Unavailable
	case errors.As(err, &pe):
		return ofProblem(pe)
	default:
		return Failure
	}
}

// ofProblem is the status of a refusal the client's table (client/outcome.go)
// left as a problem, with no outcome of the model: by its type and status.
func ofProblem(pe *lhclient.ProblemError) int {
	switch s := pe.Status; {
	case pe.Type == api.ProblemUndeclared:
		return Undeclared
	case s == http.StatusUnauthorized, s == http.StatusForbidden:
		return NoPerm
	case s == http.StatusBadRequest, s == http.StatusUnprocessableEntity:
		return Usage
	case s >= 500:
		return Unavailable
	default:
		return Failure
	}
}

// Help is Table as a command's help prints it: one status a line, its
// meaning wrapped at about 92 columns, without docs/cli.md's markup.
func Help() string {
	const indent, width = "  ", 92
	col := 0
	for _, r := range Table {
		col = max(col, len(r.Status))
	}
	var b strings.Builder
	pad := strings.Repeat(" ", len(indent)+col+2)
	for _, r := range Table {
		line := fmt.Sprintf("%s%-*s  ", indent, col, r.Status)
		for i, word := range strings.Fields(strings.ReplaceAll(r.Meaning, "`", "")) {
			if i > 0 && len(line)+1+len(word) > width {
				b.WriteString(line + "\n")
				line = pad + word
				continue
			}
			if i > 0 {
				line += " "
			}
			line += word
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
