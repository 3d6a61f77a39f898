package leasecore

import "fmt"

// Bounds of a page of a list (live leases, task declarations). The HTTP API
// answers DefaultListLimit rows when a request names no limit, and at most
// MaxListLimit: a fleet with tens of thousands of leases must not answer
// them all in one body.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListParams choose one page of a list ordered by task (or declaration)
// name, byte by byte. Paging is by key, not by offset: a page starts after
// the last name of the previous one, so rows added or removed meanwhile
// never shift a page, and a store answers a page with an index range scan
// (WHERE name > After ORDER BY name LIMIT Limit), never by reading the whole
// list.
type ListParams struct {
	// After, when not empty, starts the page after this name: pass the
	// previous page's next name. It need not name an existing row.
	After string
	// Limit is the most rows the page holds, 1 to MaxListLimit; zero means
	// every row (for Go callers that need the whole list, such as the
	// declarations a Service applies).
	Limit int
	// Prefix, when not empty, keeps the names that start with it: a store
	// answers the range [Prefix, PrefixEnd(Prefix)) of its key, so that a
	// caller scoped to some prefixes pages through its own names only and
	// no page, nor the next name, ever names another's.
	Prefix string
}

// PrefixEnd is the first name after every name that starts with prefix,
// in the byte order names are listed in; empty for an empty prefix (no
// end). Names are ASCII below 0x7f, so the prefix with its last byte
// raised by one is that name.
func PrefixEnd(prefix string) string {
	if prefix == "" {
		return ""
	}
	return prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1)
}

// Validate checks the page's bounds. After is checked against the task
// charset and length, not the segment rule, so that a list can be paged
// past a name stored before that rule existed.
func (p ListParams) Validate() error {
	if p.Limit < 0 || p.Limit > MaxListLimit {
		return &ValidationError{Field: "Limit", Rule: fmt.Sprintf("must be between 1 and %d", MaxListLimit)}
	}
	if len(p.After) > MaxTaskLen {
		return &ValidationError{Field: "After", Rule: fmt.Sprintf("must be at most %d characters of %s", MaxTaskLen, taskCharsetMsg)}
	}
	for i := 0; i < len(p.After); i++ {
		if !isTaskChar(p.After[i]) {
			return &ValidationError{Field: "After", Rule: fmt.Sprintf("must be at most %d characters of %s; %q at position %d is not", MaxTaskLen, taskCharsetMsg, rune(p.After[i]), i+1)}
		}
	}
	return ValidateTaskPrefix(p.Prefix) // names Prefix
}

// ask is what a Service asks the store for: one row more than the page
// holds, which says whether another page follows.
func (p ListParams) ask() ListParams {
	if p.Limit > 0 {
		p.Limit++
	}
	return p
}

// page cuts rows, as the store answered p.ask(), to the page p asked for,
// and returns the name to pass as After for the next page: empty when
// there is none.
func page[T any](p ListParams, rows []T, name func(*T) string) ([]T, string) {
	if p.Limit == 0 || len(rows) <= p.Limit {
		return rows, ""
	}
	rows = rows[:p.Limit]
	return rows, name(&rows[p.Limit-1])
}
