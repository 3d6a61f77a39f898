// Package opcli is leasehold's operator commands: the verbs an operator
// types to see and steer the fleet's leases,
//
//	leasehold status
//	leasehold get TASK
//	leasehold list [--prefix P]
//	leasehold history TASK [--limit N]
//	leasehold claim TASK [--ttl 30s] [--owner O] [--note N]
//	leasehold renew TASK --owner O [--ttl D] [--token N] [--note N]
//	leasehold release TASK --owner O [--token N]
//	leasehold release TASK --force [--token N]
//	leasehold watch [--prefix P] [--since N]
//	leasehold tasks list | show NAME | remove NAME [--take-over]
//	leasehold tasks declare NAME --ttl D [--max-ttl D] [--policy P] [--description S] [--take-over]
//	leasehold policies list | show NAME | remove NAME [--take-over]
//	leasehold policies declare NAME [--keep-for D] [--keep-last N] [--take-over]
//
// each against a sidecar (--addr URL, the default http://127.0.0.1:7411, or
// --addr unix:PATH for one serving on a Unix socket, with the bearer token
// read from --token-file) or straight against a store
// (--store URL, through a leasecore.Service), never both. --addr, --store
// and --token-file are also read from LEASEHOLD_ADDR, LEASEHOLD_STORE and
// LEASEHOLD_TOKEN_FILE, as `leasehold run` reads them: a mode chosen on the
// command line is not overruled by the environment. The verbs' own flags are
// read from the command line only (LEASEHOLD_OWNER and LEASEHOLD_TOKEN are
// what `leasehold run` hands its command, and must not turn an operator's
// release into its command's).
//
// --addr must be an http:// or https:// URL with a host, a port from 1 to
// 65535 when it has one, and no path, query or fragment (endpoint.ParseAddr, as
// for `leasehold run`); anything else is a usage error (64) naming --addr
// or LEASEHOLD_ADDR. A password in it is masked (xxxxx) wherever the
// address is printed.
//
// Output is for people by default: aligned columns, expiries both relative
// (by the store's clock, from ttl_remaining_ms) and absolute. With --json
// each verb prints the HTTP API's JSON shape (openapi.yaml) as one
// document, whichever mode it runs in; `watch --json` prints one event
// object per line.
//
// # What the server says is not trusted
//
// Every string a sidecar or a store answers (task, owner, note, detail,
// times, versions) is printed for people escaped as a Go string literal
// would write it, without the quotes: printable characters of any script
// as they are, a backslash doubled, and anything else as \n, \t, \x1b,
// \x7f, \u009b, \u202e (a note "\x1b]0;title\a" cannot retitle the
// terminal, nor a newline forge a line). Error messages escape the same
// characters, keeping their own backslashes (they quote values with %q).
// --json prints the same values, with every character that is not
// printable written as a \u escape (encoding/json leaves DEL, the C1
// controls and the bidirectional overrides raw).
//
// Over a sidecar, the verbs ask through the Go client (package client),
// which maps each answer to an outcome; this package maps outcomes to exit
// statuses. Each answer to status, get, list, history, claim, renew, release,
// tasks and policies must be one that openapi.yaml (as built into this binary)
// declares for the request: a declared status, Content-Type and a body
// matching the schema (but not its patterns: a task named under an older
// rule still reads); a refusal may also be any problem+json. Any other answer (200 with null or
// {}, an HTML page, another shape, another Content-Type) ends the verb
// with 69 and a message that the server at --addr did not answer like a
// leasehold sidecar; nothing is printed on stdout.
//
// # Force release
//
// release --force ends the task's live lease whoever holds it (under
// --token N when given, so that only that grant is ended): over a sidecar
// through POST /v1/leases/{task}/revoke, which needs the admin right on
// the task (docs/security.md); on a store through leasecore.Service.Revoke.
// The history records a released event with the holder as owner, the
// operator's credential (none on a store) and the detail "revoked by an
// operator"; the holder learns of it at its next renewal (lost, not_held).
// Without --owner and without --force, release says to find the owner
// with `leasehold get TASK`, or to use --force; --force with --owner is a
// usage error (64).
// # Declarations
//
// tasks and policies read and write the catalogue the Terraform provider
// writes: task declarations (the ttl a claim gets when it gives none, the
// longest it may ask for, the retention policy of its history) and
// retention policies. declare creates, or replaces the whole declaration
// (a flag left out takes its default, as a Terraform resource's attribute
// does); remove removes it, leaving the task's lease and history alone.
// Over a sidecar they need the admin right: on the task for tasks, on every
// task for policies, which apply to every task that names them.
//
// Each declaration and policy records who manages it (MANAGED BY):
// terraform or operator. These verbs write as an operator, and refuse to
// change or remove what Terraform manages (77, saying so), so that
// Terraform never finds its resources changed under it: change it in the
// configuration, or remove it from the Terraform state (terraform state rm)
// and repeat with --take-over, which makes it the operator's. Terraform
// adopts an operator's declaration with terraform import: the next apply
// makes it Terraform's.
//
// show of a task or policy that does not exist, and remove of one, exit
// 1; a --policy that does not exist is refused as input (64); a policy
// that tasks name, or the default policy, is not removed (1). --json prints
// the API's TaskDeclaration, TaskList, RetentionPolicy or PolicyList, and
// for remove {"removed": true|false}.
//
// # Watch
//
// Over a sidecar, watch reads the server-sent events of GET /v1/watch. When
// the stream ends (the sidecar cut a slow reader, shut down, or the
// connection broke) it connects again after a pause that doubles from
// 100 ms to 5 s, sending Last-Event-ID: the ID of the last event it printed,
// or the position the sidecar said it was ready at, so no event that the
// history still holds is missed or printed twice. Only the first connection
// failing ends the command (69); later ones are retried until interrupted.
// Each connection must be answered within 15 s, and a stream that says
// nothing, not even the ping the sidecar sends every 15 s, for 45 s is
// taken for dead. An answer that is not a sidecar's watch stream (404,
// another content type, events a watch does not send) ends the command (69)
// with what was wrong, whichever connection it comes on.
//
// When the store's history went back (it was restored from an older copy,
// or failed over to a replica without its newest events), the sidecar
// says reset: watch prints one line on stderr and starts over, printing
// the history the store holds from its oldest event, then what follows.
//
// On a store (--store), watch follows the history with package
// leasecore/watch, resumes after the last event printed when it is cut for
// falling behind, and starts over in the same way when its position is
// ahead of the store's history.
//
// # Exit status
//
// The statuses are leasehold's one table for every command (package
// internal/exitcode, shown in the "Exit status" of docs/cli.md): 0 done, 1 get
// found no live lease (or another failure), 64 usage or input refused,
// 69 unavailable or not a sidecar (watch included), 70 release released
// nothing (release --force: no live lease, or none under --token), 75
// claim found the task held, 77 credentials refused or not permitted
// (release --force by a credential without the admin right; tasks or
// policies: Terraform manages it), 78 claim of an undeclared task.
package opcli
