// Package auth is who may act on which lease through a sidecar: named
// credentials, each a bearer token (kept only as its SHA-256 digest), the
// task prefixes it covers and the rights it has there.
//
// Rights nest: read (leases, tasks, history, watch, status) ⊂ hold (claim,
// renew, release, keepalive, run) ⊂ admin (acting on leases other
// credentials hold, declarations, pruning). A credential's prefixes are the
// starts of the task names it may act on; "*" covers every task. A request
// outside its credential's scope is refused naming the credential, never
// its token.
//
// A Book holds the credentials a sidecar accepts, from a credentials file
// (JSON, see ParseFile) or a single token file (one credential named
// "token" with every right). Book.Watch re-reads the file when it changes
// (a Kubernetes Secret is updated by swapping a symlink, which a re-read
// follows). A token replaced under the same credential name stays valid for
// the grace period after the change, so that clients that still send it
// while the new one reaches them are not refused; a credential removed from
// the file is refused at once.
package auth

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
)

// Right is what a credential may do on its tasks.
type Right string

// The rights, each including the ones before it.
const (
	// Read: get and list leases, tasks and policies, history, watch, status.
	Read Right = "read"
	// Hold: claim, renew, release, keepalive streams, leasehold run.
	Hold Right = "hold"
	// Admin: act on leases other credentials hold, declarations, pruning.
	Admin Right = "admin"
)

// level orders the rights: a credential with a right has every lower one.
func (r Right) level() int {
	switch r {
	case Read:
		return 1
	case Hold:
		return 2
	case Admin:
		return 3
	}
	return 0
}

// AllPrefixes is the prefix that covers every task.
const AllPrefixes = "*"

// Credential is one named credential: what it may do, and where.
type Credential struct {
	// Name names the credential in answers, logs and the history; never
	// the token.
	Name string
	// Prefixes are the starts of the task names it covers; AllPrefixes
	// covers every task.
	Prefixes []string
	// Rights it has on those tasks; each includes the lower ones (Right).
	Rights []Right
}

// Anonymous is the caller of a sidecar that requires no token: every right
// on every task, and no name in the history.
var Anonymous = &Credential{Prefixes: []string{AllPrefixes}, Rights: []Right{Admin}}

// Has reports whether the credential has right r (on some tasks).
func (c *Credential) Has(r Right) bool {
	for _, have := range c.Rights {
		if have.level() >= r.level() {
			return true
		}
	}
	return false
}

// Covers reports whether task is one of the credential's tasks.
func (c *Credential) Covers(task string) bool {
	for _, p := range c.Prefixes {
		if p == AllPrefixes || strings.HasPrefix(task, p) {
			return true
		}
	}
	return false
}

// Allows reports whether the credential may do r on task.
func (c *Credential) Allows(r Right, task string) bool { return c.Has(r) && c.Covers(task) }

// Principal names the credential for an error or a log line:
// `credential "ci"`, or `the anonymous caller` for Anonymous.
func (c *Credential) Principal() string { return Principal(c.Name) }

// Principal names the credential called name as Credential.Principal
// does, for callers that keep only the name (a stream, a slot count).
func Principal(name string) string {
	if name == "" {
		return "the anonymous caller"
	}
	return fmt.Sprintf("credential %q", name)
}

// Top is the credential's highest right, which includes the others; empty
// when it has none.
func (c *Credential) Top() Right {
	var top Right
	for _, r := range c.Rights {
		if r.level() > top.level() {
			top = r
		}
	}
	return top
}

// Scope says in words what the credential may do, for an error.
func (c *Credential) Scope() string {
	prefixes := make([]string, len(c.Prefixes))
	for i, p := range c.Prefixes {
		if p == AllPrefixes {
			prefixes[i] = "every task"
		} else {
			prefixes[i] = fmt.Sprintf("tasks starting %q", p)
		}
	}
	top := c.Top()
	if top == "" {
		top = "no right"
	}
	return fmt.Sprintf("it has %s on %s", top, strings.Join(prefixes, ", "))
}

// Digest is the SHA-256 of a token: what a credentials file stores.
type Digest [sha256.Size]byte

// DigestOf returns the digest of token.
func DigestOf(token []byte) Digest { return sha256.Sum256(token) }

// Includes reports whether c may do everything o may: c's right is at
// least o's, and each of o's prefixes is covered by one of c's.
func (c *Credential) Includes(o *Credential) bool {
	if c.Top().level() < o.Top().level() {
		return false
	}
	for _, p := range o.Prefixes {
		if !slices.ContainsFunc(c.Prefixes, func(q string) bool { return q == AllPrefixes || (p != AllPrefixes && strings.HasPrefix(p, q)) }) {
			return false
		}
	}
	return true
}

// narrowed is what both a and b allow, named as b: the lower of their
// rights, on the tasks both cover. It is nil when they share no task or no
// right. A token in a rotation's grace acts with it, so that an edit that
// raises a credential's scope never raises the old token's.
func narrowed(a, b *Credential) *Credential {
	top := a.Top()
	if b.Top().level() < top.level() {
		top = b.Top()
	}
	var prefixes []string
	for _, p := range a.Prefixes {
		for _, q := range b.Prefixes {
			var both string
			switch {
			case p == AllPrefixes:
				both = q
			case q == AllPrefixes || strings.HasPrefix(p, q):
				both = p
			case strings.HasPrefix(q, p):
				both = q
			default:
				continue
			}
			if !slices.Contains(prefixes, both) {
				prefixes = append(prefixes, both)
			}
		}
	}
	if top == "" || len(prefixes) == 0 {
		return nil
	}
	return &Credential{Name: b.Name, Prefixes: prefixes, Rights: []Right{top}}
}

// ListPrefixes are the credential's prefixes as a list of its tasks pages
// through them: sorted, without one that another covers (so their ranges
// are disjoint and in name order). Nil when it covers every task.
func (c *Credential) ListPrefixes() []string {
	if slices.Contains(c.Prefixes, AllPrefixes) {
		return nil
	}
	sorted := slices.Sorted(slices.Values(c.Prefixes))
	out := sorted[:0:0]
	for _, p := range sorted {
		// Sorted, a prefix that covers p comes before it; only the last
		// kept can be one (the kept ones cover no one another).
		if len(out) > 0 && strings.HasPrefix(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}
