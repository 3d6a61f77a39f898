// Package leaserun is `leasehold run`: it holds the lease on one task while
// a command runs, and stops the command when the lease is lost.
//
//	leasehold run [--addr URL | --store URL] --task T [--ttl 30s] [--owner O]
//	              [--wait 0s] [--grace 10s] [--token-file PATH] -- COMMAND [ARG...]
//
// # Two ways to hold a lease
//
// With --addr (the default, http://127.0.0.1:7411; unix:PATH for a sidecar
// serving on a Unix socket) it asks a sidecar: it opens
// the keepalive stream GET /v1/leases/{task}/keepalive?owner=O&ttl_ms=N and
// holds it open while the command runs. The sidecar renews the lease and
// reports each renewal as an `event: renewed`; closing the connection is the
// release. leaserun keeps its own local deadline, from a monotonic clock,
// that errs early (the Go client's Holder.Deadline): the send time of the
// keepalive request, and after each renewal of a GET /v1/leases/{task}
// confirming it, plus the ttl_remaining_ms answered to it. The lease counts
// as lost when that deadline nears with no newer renewal confirmed (the
// sidecar froze, or the network did), when the stream ends or fails, or
// when the sidecar sends `lost` or `released` (it is shutting down and
// released first). `: ping` comments keep the connection alive but prove
// nothing, so they never move the deadline.
//
// With --store it needs no sidecar: it claims through leasecore directly and
// a leasecore.Keeper renews the lease every ttl × 0.4 and reports its loss.
// It migrates the store first, as a sidecar does at start, so a new SQLite
// file works at once.
//
// Over a sidecar it holds the lease with the Go client's keepalive Holder
// (package client), which reads the stream and keeps the local deadline.
//
// --addr (or LEASEHOLD_ADDR) is checked by endpoint.ParseAddr, as the operator
// commands check theirs: http:// or https://, a host, a port from 1 to
// 65535 when given, no path, query or fragment; anything else is a usage
// error (64) naming it. A password in it is masked wherever it is printed.
// --token-file names the sidecar's bearer token file, as for
// `leasehold serve`. What the sidecar answers (a holder's owner, a refusal's
// detail) is logged as a quoted value, so an escape sequence or a newline
// in it prints as \x1b or \n.
//
// With --wait a held task is claimed again (the sidecar waits on its side
// first, with wait_ms) until the wait runs out, paced as leasecore.ClaimWait
// paces any claim of a held task: a backoff from 50 ms doubling to 1 s, never
// past the holder's expiry.
//
// # The command
//
// The command gets LEASEHOLD_TASK, LEASEHOLD_OWNER and LEASEHOLD_TOKEN (the
// fencing token, to hand to whatever the command writes to) on top of
// leasehold run's own environment; its standard streams are leasehold run's.
// It runs in a process group of its own, so that a signal reaches the
// processes it starts too. (So it is not the terminal's foreground group: a
// command that reads from a terminal is stopped. leasehold run is for jobs.)
// On Linux it is killed if leasehold run itself dies (it could no longer be
// stopped when the lease is lost).
//
// SIGINT, SIGTERM and SIGHUP sent to leasehold run are forwarded to the
// command's process group; leasehold run waits for the command, releases the
// lease, and exits with the command's status.
//
// The command is dead before the store could grant its task to anyone
// else: its process group gets SIGKILL at the local deadline less a margin
// (ttl/10, from 10 ms to 2 s), and SIGTERM a grace before that (--grace,
// default 10 s, cut to a quarter of the ttl). When the lease is reported
// lost sooner (a refused renewal, the stream's end), the group gets SIGTERM
// at once and SIGKILL after --grace or at the deadline less the margin,
// whichever comes first. Once the command has exited, whatever is left of its group
// gets SIGKILL: nothing started under a lost lease outlives leasehold run.
// The exit status is then 70, whatever the command returned: its work may
// have overlapped another holder's.
//
// # Exit status
//
// The command's own status when it ran to the end (128+N when signal N
// killed it), else a status of leasehold's one table (package
// internal/exitcode, shown in the "Exit status" of docs/cli.md and by
// `leasehold run -h`): 64 usage, 69 no lease to be had (unavailable),
// 70 lost, 75 held, 77 refused credentials, 78 undeclared, 126 or 127 for
// a command that cannot be executed or is not found.
//
// The command is looked up in PATH (as exec does) before the lease is
// claimed, so a command that is missing or not executable takes no fencing
// token and writes no lease history.
//
// A command may itself exit with 64, 69, 70, 75, 77 or 78; the log on stderr
// tells the cases apart.
package leaserun
