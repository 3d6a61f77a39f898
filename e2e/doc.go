// Package e2e holds leasehold's end-to-end tests: the real leasehold binary
// as separate processes, on a real SQLite file and a real PostgreSQL server,
// spoken to over loopback HTTP by Go and by non-Go clients (python3 stdlib).
// Nothing here imports the sidecar's packages: the tests see only what an
// operator sees.
package e2e
