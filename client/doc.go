// Package client is the Go client of a leasehold sidecar's HTTP API
// (openapi.yaml), built on the generated types of sidecar/api. It is the
// one place that turns a sidecar's answer into an outcome of the lease
// model, as leasecore names them, so that a Go program using a sidecar
// handles the same errors as one using leasecore directly:
//
//	answer                                      error
//	200                                         nil (the lease, the page, …)
//	409 held (claim, keepalive)                 *leasecore.HeldError, with the holder and its expiry
//	409 lost (renew)                            *leasecore.LostError: not_held, expired, held_by_other, token_mismatch
//	503, any 5xx, a transport failure or        *leasecore.UnavailableError (errors.Is ErrUnavailable);
//	  timeout, an answer no sidecar gives         never held. The last wraps a *NotSidecarError.
//	404 undeclared-task (claim, keepalive)      *leasecore.UndeclaredError
//	403 reserved-task                           *leasecore.ReservedError
//	403 forbidden, cross-site-request           leasecore.ErrForbidden
//	401                                         ErrUnauthorized
//	422 invalid-request, 400 malformed-request  *leasecore.ValidationError naming the field (the wire's name)
//	404 not-found, 409 exists / in-use          leasecore.ErrNotFound, ErrExists, ErrInUse
//	any other refusal (421, 404 of no route…)   *ProblemError
//
// Every refusal of the table also wraps the *ProblemError that said it
// (errors.As finds its status, type and detail). Answers are checked
// against openapi.yaml before they are believed: a proxy's error page or
// another service on the port is unavailable, not a lease.
//
// A Client is made with New (an address, as the binary's --addr:
// http://HOST:PORT, https://HOST:PORT or unix:PATH) or FromEnv
// (LEASEHOLD_ADDR and LEASEHOLD_TOKEN_FILE, as the binary reads them). The
// bearer token never appears in an error; the address appears with its
// password masked.
//
// It offers what the Python and TypeScript clients offer: Claim, Renew,
// Release, Get, List (by pages), History and Status; Keepalive, a Holder
// that keeps a lease over a keepalive stream, with a context cancelled when
// the lease is lost; Run, which holds a lease while a function runs; and
// Watch, which follows the store's history across reconnections (resuming
// with Last-Event-ID, told when it has caught up and when the history went
// back).
package client
