// Package cli holds what leasehold's commands share on the command line:
// the environment that backs every flag (LEASEHOLD_<FLAG>, the command line
// winning), the log formats, the sidecar's default
// address, and the one-shot store verbs `leasehold migrate` and
// `leasehold prune`. `leasehold serve` (package sidecar) and `leasehold run`
// (package leaserun) both use it; it imports neither. A sidecar's address and
// the bearer token file are package endpoint's.
package cli
