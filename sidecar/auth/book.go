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
	parse func([]byte) (map[Digest]*Credential, error)
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
	count  int // credentials in the file
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
	// accepted; zero means DefaultGrace, a negative value none (the old
	// token is refused as soon as the change is read).
	Grace time.Duration
	// Now is the clock the grace is measured on; nil means time.Now.
	Now func() time.Time
}

// OpenCredentialsFile loads a credentials file (ParseFile).
func OpenCredentialsFile(path string, o BookOptions) (*Book, error) {
	return open(path, ParseFile, o)
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
	b.state.Store(&bookState{tokens: map[Digest]entry{DigestOf(token): {cred: tokenCredential()}}, count: 1})
	return b
}

func open(path string, parse func([]byte) (map[Digest]*Credential, error), o BookOptions) (*Book, error) {
	b := &Book{path: path, parse: parse, grace: o.Grace, now: o.Now}
	if b.grace == 0 {
		b.grace = DefaultGrace
	}
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
func (b *Book) Authenticate(token []byte) (*Credential, bool) {
	e, ok := b.state.Load().tokens[DigestOf(token)]
	if !ok || (!e.retires.IsZero() && !b.now().Before(e.retires)) {
		return nil, false
	}
	return e.cred, true
}

// Reloads counts Watch's reloads since the book was opened: those that
// took a changed file, and those that failed (the book kept what it had).
func (b *Book) Reloads() (taken, failed uint64) { return b.reloaded.Load(), b.failed.Load() }

// Count is the number of credentials the book holds now (retiring tokens
// not counted).
func (b *Book) Count() int { return b.state.Load().count }

// Reload reads the file again and, when its content changed, takes the
// new credentials: a token no longer in the file stays accepted until the
// grace period ends if its credential's name still is (a rotation),
// with the name's new scope; otherwise it is refused at once. It reports
// whether the content changed. On an error the book keeps what it had.
// Errors name the file and the rule, never a token.
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
	creds, err := b.parse(raw)
	if err != nil {
		return false, fmt.Errorf("%s: %w", b.path, err)
	}
	next := &bookState{tokens: make(map[Digest]entry, len(creds)), count: len(creds)}
	byName := make(map[string]*Credential, len(creds))
	for d, c := range creds {
		next.tokens[d] = entry{cred: c}
		byName[c.Name] = c
	}
	if old != nil && b.grace > 0 {
		now := b.now()
		for d, e := range old.tokens {
			c, renamed := byName[e.cred.Name]
			if _, kept := next.tokens[d]; kept || !renamed {
				continue
			}
			retires := now.Add(b.grace)
			if !e.retires.IsZero() && e.retires.Before(retires) {
				retires = e.retires // a second rotation does not extend the first
			}
			if now.Before(retires) {
				next.tokens[d] = entry{cred: c, retires: retires}
			}
		}
	}
	b.content = sum
	b.state.Store(next)
	return true, nil
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
