package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultGrace is how long a token replaced under the same credential name
// is still accepted after the file changed. A Kubernetes Secret reaches
// each pod that mounts it within the kubelet's sync period plus its cache's
// (about a minute each by default), so clients in other pods may send the
// old token for up to about two minutes after the sidecar saw the new one.
const DefaultGrace = 2 * time.Minute

// ReloadInterval is how often Watch reads the file again.
const ReloadInterval = 2 * time.Second

// Book is the set of credentials a sidecar accepts, read from a file and
// re-read when it changes. It is safe for concurrent use.
type Book struct {
	path  string
	parse func([]byte) (*parsed, error)
	grace time.Duration
	now   func() time.Time

	reloaded, failed atomic.Uint64 // Watch's reloads that took a change, and that failed

	mu      sync.Mutex // serialises reloads
	content [sha256.Size]byte
	state   atomic.Pointer[bookState]
}

// bookState is one generation of a Book: the tokens accepted now.
type bookState struct {
	tokens map[Digest]entry
	creds  []*Credential // the file's credentials (retiring tokens' not included)
	// retires is the earliest time a token of tokens retires; zero: none does.
	retires time.Time
	// changed is closed when the next generation replaces this one.
	changed chan struct{}
}

// parsed is what a file says: the credentials by their tokens' digests,
// and the digests it revokes.
type parsed struct {
	creds   map[Digest]*Credential
	revoked map[Digest]bool
}

// newState makes a generation of tokens, with the file's credentials.
func newState(tokens map[Digest]entry, creds []*Credential) *bookState {
	st := &bookState{tokens: tokens, creds: creds, changed: make(chan struct{})}
	for _, e := range tokens {
		if !e.retires.IsZero() && (st.retires.IsZero() || e.retires.Before(st.retires)) {
			st.retires = e.retires
		}
	}
	return st
}

// entry is an accepted token: its credential, and when it stops being
// accepted (zero: while it stays in the file).
type entry struct {
	cred    *Credential
	retires time.Time
}

// BookOptions tune a Book.
type BookOptions struct {
	// Grace is how long a token replaced under the same name stays
	// accepted (the serve flag's default is DefaultGrace); zero or less
	// means none: the old token is refused as soon as the change is read.
	Grace time.Duration
	// Now is the clock the grace is measured on; nil means time.Now.
	Now func() time.Time
}

// OpenCredentialsFile loads a credentials file (ParseFile).
func OpenCredentialsFile(path string, o BookOptions) (*Book, error) {
	return open(path, parseFile, o)
}

// OpenTokenFile loads a token file as one credential, "token", with every
// right.
func OpenTokenFile(path string, o BookOptions) (*Book, error) {
	return open(path, parseTokenFile, o)
}

// SingleToken is a Book of one fixed token (no file), as OpenTokenFile
// would make it.
func SingleToken(token []byte) *Book {
	b := &Book{now: time.Now}
	cred := tokenCredential()
	b.state.Store(newState(map[Digest]entry{DigestOf(token): {cred: cred}}, []*Credential{cred}))
	return b
}

func open(path string, parse func([]byte) (*parsed, error), o BookOptions) (*Book, error) {
	b := &Book{path: path, parse: parse, grace: max(o.Grace, 0), now: o.Now}
	if b.now == nil {
		b.now = time.Now
	}
	if _, err := b.Reload(); err != nil {
		return nil, err
	}
	return b, nil
}

// Authenticate returns the credential whose token this is, or false. The
// token is compared by its digest, so no token's bytes are compared in
// variable time; the map lookup's time depends only on the digest.
func (b *Book) Authenticate(token []byte) (*Credential, bool) { return b.Lookup(DigestOf(token)) }

// Lookup returns the credential a token of this digest acts as now, or
// false: what a stream asks again when the book changes (Changed), to end
// itself when its token no longer allows what it does.
func (b *Book) Lookup(d Digest) (*Credential, bool) {
	e, ok := b.state.Load().tokens[d]
	if !ok || (!e.retires.IsZero() && !b.now().Before(e.retires)) {
		return nil, false
	}
	return e.cred, true
}

// Changed returns a channel closed when the tokens the book accepts next
// change: a reload that took a change, or a rotated token's grace ending
// (noticed by Watch within ReloadInterval).
func (b *Book) Changed() <-chan struct{} { return b.state.Load().changed }

// Credentials returns the file's credentials (not the retiring tokens').
func (b *Book) Credentials() []*Credential { return b.state.Load().creds }

// Reloads counts Watch's reloads since the book was opened: those that
// took a changed file, and those that failed (the book kept what it had).
func (b *Book) Reloads() (taken, failed uint64) { return b.reloaded.Load(), b.failed.Load() }

// Count is the number of credentials the book holds now (retiring tokens
// not counted).
func (b *Book) Count() int { return len(b.state.Load().creds) }

// Reload reads the file again and, when its content changed, takes the
// new credentials: a token no longer in the file stays accepted until the
// grace period ends if its credential's name still is (a rotation) and the
// file does not revoke it (revoked_sha256), with no more than both its old
// scope and the name's new one allow; otherwise it is refused at once. It
// reports whether the content changed. On an error the book keeps what it
// had. Errors name the file and the rule, never a token.
func (b *Book) Reload() (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	raw, err := readFile(b.path)
	if err != nil {
		return false, err // an *fs.PathError names the file
	}
	sum := sha256.Sum256(raw)
	old := b.state.Load()
	if old != nil && bytes.Equal(sum[:], b.content[:]) {
		return false, nil
	}
	p, err := b.parse(raw)
	if err != nil {
		return false, fmt.Errorf("%s: %w", b.path, err)
	}
	tokens := make(map[Digest]entry, len(p.creds))
	creds := make([]*Credential, 0, len(p.creds))
	byName := make(map[string]*Credential, len(p.creds))
	for d, c := range p.creds {
		tokens[d] = entry{cred: c}
		creds = append(creds, c)
		byName[c.Name] = c
	}
	if old != nil && b.grace > 0 {
		now := b.now()
		for d, e := range old.tokens {
			c, renamed := byName[e.cred.Name]
			if _, kept := tokens[d]; kept || !renamed || p.revoked[d] {
				continue
			}
			retires := now.Add(b.grace)
			if !e.retires.IsZero() && e.retires.Before(retires) {
				retires = e.retires // a second rotation does not extend the first
			}
			if both := narrowed(e.cred, c); both != nil && now.Before(retires) {
				tokens[d] = entry{cred: both, retires: retires}
			}
		}
	}
	b.content = sum
	b.replace(newState(tokens, creds))
	return true, nil
}

// replace makes next the book's generation and wakes those waiting on
// the one it replaces. Callers hold mu.
func (b *Book) replace(next *bookState) {
	if old := b.state.Swap(next); old != nil {
		close(old.changed)
	}
}

// retire drops the tokens whose grace has ended, waking those waiting on
// Changed: a stream opened with a rotated token ends when its grace does.
func (b *Book) retire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.state.Load()
	now := b.now()
	if st.retires.IsZero() || now.Before(st.retires) {
		return
	}
	tokens := make(map[Digest]entry, len(st.tokens))
	for d, e := range st.tokens {
		if e.retires.IsZero() || now.Before(e.retires) {
			tokens[d] = e
		}
	}
	b.replace(newState(tokens, st.creds))
}

// Watch reloads the book every ReloadInterval until ctx ends, logging each
// change and each failure (the book then keeps what it had). A book with
// no file (SingleToken) returns at once.
func (b *Book) Watch(ctx context.Context, log *slog.Logger) {
	if b.path == "" {
		return
	}
	t := time.NewTicker(ReloadInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.retire()
		changed, err := b.Reload()
		switch {
		case err != nil:
			b.failed.Add(1)
			if !failing {
				log.Error("credentials not reloaded; the sidecar keeps the ones it has", "file", b.path, "err", err)
			}
			failing = true
		case changed:
			b.reloaded.Add(1)
			failing = false
			log.Info("credentials reloaded", "file", b.path, "credentials", b.Count(), "grace", b.grace.String())
		default:
			failing = false
		}
	}
}
