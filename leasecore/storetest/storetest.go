// Package storetest is the conformance suite every leasecore.Store driver
// passes: the lease model of DESIGN.md, one case per rule. A driver's own test
// calls Exercise; a new behaviour starts as a case here.
package storetest

import (
	"testing"

	"github.com/leasehold/leasehold/leasecore"
)

// Driver tells the suite how to make stores of one driver.
type Driver struct {
	// Open returns a new, migrated store over the suite's backing data. Every
	// call opens new connections to the same data (one SQLite file, one
	// PostgreSQL database), so what one store wrote the next one reads: that
	// is how the suite re-opens a store. The suite closes what it opens, and
	// uses task names unique to each case, so cases may run in parallel over
	// shared data.
	Open func(t *testing.T) leasecore.Store
	// OpenUnmigrated returns a store over an empty database whose schema was
	// never created.
	OpenUnmigrated func(t *testing.T) leasecore.Store
	// OpenUnreachable returns a store whose database cannot be reached at all
	// (nothing listens, or the path cannot be opened).
	OpenUnreachable func(t *testing.T) leasecore.Store
}

// Exercise runs every conformance case against d.
func Exercise(t *testing.T, d Driver) {
	t.Helper()
	// Cases are added by the conformance suite's author; see the package doc.
	_ = d
}
