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
func (c *Credential) Principal() string {
	if c.Name == "" {
		return "the anonymous caller"
	}
	return fmt.Sprintf("credential %q", c.Name)
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
