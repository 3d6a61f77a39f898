package migration

import (
	"fmt"
	"strings"
)

// Status is where a store's schema stands against this build's migrations:
// what `leasehold migrate --status` shows.
type Status struct {
	// Version is the newest migration the store has applied (0 for none),
	// and Floor the oldest schema version whose binaries can serve it.
	Version int `json:"version"`
	Floor   int `json:"floor"`
	// Needs and Knows are this build's: the oldest schema its queries run
	// on, and the newest its migrations reach.
	Needs int `json:"needs"`
	Knows int `json:"knows"`
	// Pending names the migrations this build would apply, in order.
	Pending []string `json:"pending"`
	// Verdict is one of the Verdict constants.
	Verdict Verdict `json:"verdict"`
}

// Verdict says whether this build can serve a store.
type Verdict string

// The verdicts, from the store's schema version v, its floor and what this
// build knows.
const (
	// Current: v is the newest this build knows.
	Current Verdict = "current"
	// Behind: v is older; `leasehold migrate` (or serve) applies Pending.
	Behind Verdict = "behind"
	// Newer: v is newer than this build knows, but its floor is within
	// it: this build serves the store as it is.
	Newer Verdict = "newer"
	// TooNew: the store's floor is newer than this build knows: this
	// build refuses it; a newer leasehold is needed.
	TooNew Verdict = "too-new"
)

// Versions returns the schema versions of a build whose migrations are all:
// the oldest its queries run on (needs), and the newest its migrations
// reach (knows). Today a build needs what it knows: serve and migrate bring
// a store up to it first.
func Versions(all []Migration) (needs, knows int) { return len(all), len(all) }

// FloorRecordedFrom is the schema version from which a store records floors
// (the FloorMigration's); below it a store's floor is 0. 0 when all has no
// such migration.
func FloorRecordedFrom(all []Migration) int {
	for _, m := range all {
		if m.Name == FloorMigration {
			return m.Version
		}
	}
	return 0
}

// StatusOf judges a store at schema version with floor against all, this
// build's migrations.
func StatusOf(all []Migration, version, floor int) Status {
	needs, knows := Versions(all)
	st := Status{Version: version, Floor: floor, Needs: needs, Knows: knows, Pending: []string{}}
	for _, m := range Pending(all, version) {
		st.Pending = append(st.Pending, fmt.Sprintf("%04d_%s", m.Version, m.Name))
	}
	switch {
	case floor > knows:
		st.Verdict = TooNew
	case version > knows:
		st.Verdict = Newer
	case version < knows:
		st.Verdict = Behind
	default:
		st.Verdict = Current
	}
	return st
}

// Err is the refusal a build owes a store it cannot serve: a TooNewError
// for TooNew, nil otherwise.
func (s Status) Err() error {
	if s.Verdict != TooNew {
		return nil
	}
	return &TooNewError{Version: s.Version, Floor: s.Floor, Knows: s.Knows}
}

// TooNewError refuses a store whose schema's floor is newer than the newest
// schema this build knows: a newer leasehold migrated it with a contract
// step, and this one may no longer use it. Nothing was written.
type TooNewError struct {
	Version, Floor, Knows int
}

func (e *TooNewError) Error() string {
	return fmt.Sprintf("the store's schema is version %d, which needs a leasehold that knows schema %d or newer; this leasehold knows up to %d: upgrade leasehold (leasehold migrate --status shows where the store stands)",
		e.Version, e.Floor, e.Knows)
}

// Describe is the one-line meaning of s's verdict, for a person.
func (s Status) Describe() string {
	switch s.Verdict {
	case Behind:
		return fmt.Sprintf("behind: leasehold migrate applies %d migration(s): %s", len(s.Pending), strings.Join(s.Pending, ", "))
	case Newer:
		return fmt.Sprintf("newer than this leasehold knows (%d > %d), and served: its floor %d is within what this leasehold knows", s.Version, s.Knows, s.Floor)
	case TooNew:
		return fmt.Sprintf("too new: its floor %d is above schema %d, the newest this leasehold knows; upgrade leasehold", s.Floor, s.Knows)
	default:
		return "current"
	}
}
