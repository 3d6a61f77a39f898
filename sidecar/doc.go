// Package sidecar is the leasehold sidecar: an HTTP API over a lease store,
// for programs in any language, served by the `leasehold` binary
// (cmd/leasehold). Why it is built as it is (one place for errors,
// the migration gate, keepalive streams and their batched renewals) is in
// docs/design.md at the repository root, sections "The sidecar between HTTP
// and the model" and "The renewal coalescer and keepalive streams".
//
// # Contract
//
// openapi.yaml at the repository root is the source of truth. Types and the
// route registration are generated from it into sidecar/api; each request
// that matches one of its operations is validated against it (kin-openapi's
// openapi3filter, spec loaded once) before a handler runs, and the tests
// check every response the server gives against it.
//
// # Request pipeline
//
//	metrics      counts and times every request; renders its error first
//	recover      a panic becomes a 500 problem; the stack goes to the log
//	bearer       when a token is configured, /v1/* needs it (401 otherwise)
//	validate     the operation from echo's route; 413 body over 64 KiB,
//	             415 not JSON, 400 not decodable, 422 breaks a rule (fields
//	             named in invalid_params); the body is decoded once
//	handler      refuse leasehold's own tasks (403, claim/renew/release/
//	             keepalive only), read the decoded body, call
//	             leasecore.Service, hand the outcome to problem.go
//
// The reserved-task refusal lives in the handlers, not in leasecore or the
// stores, because leasehold's own code (the pruner) claims leasehold:prune
// through the same Service: only requests from clients are refused.
// Lists answer pages (leasecore.ListParams: 100 rows by default, 1000 at
// most), which the stores read by key range, never the whole table.
//
// problem.go is the one place where outcomes become HTTP: acquired / held /
// unavailable for claims, renewed / lost / unavailable for renewals, and
// every error (validation, echo's 404 and 405, panics) as an RFC 9457
// application/problem+json body. Nothing else chooses a status code for a
// domain error, and no error reaches a client as HTML or with a stack trace.
//
// # Store
//
// Every store operation is timed (leasehold_store_operation_duration_seconds)
// and its failures logged; until the start-up migration has succeeded, lease
// operations answer unavailable without reaching the store, so a lease is
// never read or written under an old or half-made schema. Serve
// migrates once before it listens, so a store that answers is ready from the
// first request; an SQLite file that waiting cannot fix ends Serve with the
// reason; a store that is down is migrated in the background, retrying,
// while readyz answers 503. Readiness is the store's Ping, which means "can
// grant leases": a read-only PostgreSQL, or an SQLite file that is read-only
// or was deleted or replaced under the sidecar, is not ready.
//
// The store URL is parsed once, into a storeurl.URL, which masks its
// password wherever it is logged or printed; only the driver sees the
// connection string. Every log line still goes through storeurl.RedactAttr,
// and every store error through the drivers' redaction, as the last net for
// texts no type guards (a driver error quoting a connection string), so no
// credential of the store URL reaches a log or an answer.
//
// # Security
//
// With a token file, every /v1/* request needs Authorization: Bearer
// <token>, compared in constant time; health, readiness, metrics and the
// OpenAPI document stay open. Without one, Serve refuses any listen address
// that is not loopback. The probe listener (serve --probe-listen) is the
// exception, by design: it answers only /healthz, /readyz and
// /v1/leases/{task}/held-here, which change nothing, so it needs no token
// on any address (probe.go).
package sidecar
