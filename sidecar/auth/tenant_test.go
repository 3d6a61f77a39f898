package auth

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// bookAt writes a credentials file and opens it with a settable clock.
func bookAt(t *testing.T, grace time.Duration, file string) (*Book, func(string), *clock) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credentials.json")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(file)
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	b, err := OpenCredentialsFile(path, BookOptions{Grace: grace, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	reload := func(s string) {
		t.Helper()
		write(s)
		if changed, err := b.Reload(); !changed || err != nil {
			t.Fatalf("Reload: changed %v, err %v", changed, err)
		}
	}
	return b, reload, clk
}

func allows(b *Book, token string, r Right, task string) bool {
	c, ok := b.Authenticate([]byte(token))
	return ok && c.Allows(r, task)
}

// TestGraceKeepsTheOldScope: an edit that rotates a token and raises its
// credential from read on billing/ to admin on every task leaves the old
// token, during its grace, with read on billing/ only; an edit that
// narrows leaves it with the narrower scope.
func TestGraceKeepsTheOldScope(t *testing.T) {
	t.Parallel()
	b, reload, _ := bookAt(t, time.Minute, credFile(entryJSON("billing", "old", `["billing/"]`, `["read"]`)))
	reload(credFile(entryJSON("billing", "new", `["*"]`, `["admin"]`)))
	if !allows(b, "old", Read, "billing/x") {
		t.Error("the old token lost its own scope within the grace")
	}
	for _, c := range []struct {
		r    Right
		task string
	}{{Admin, "billing/x"}, {Hold, "billing/x"}, {Read, "hr/salaries"}} {
		if allows(b, "old", c.r, c.task) {
			t.Errorf("the old token has %s on %s during the grace: the new scope", c.r, c.task)
		}
	}
	if !allows(b, "new", Admin, "hr/salaries") {
		t.Error("the new token lacks the new scope")
	}

	b, reload, _ = bookAt(t, time.Minute, credFile(entryJSON("ops", "old", `["*"]`, `["admin"]`)))
	reload(credFile(entryJSON("ops", "new", `["billing/", "hr/"]`, `["hold"]`)))
	if !allows(b, "old", Hold, "hr/x") || allows(b, "old", Admin, "hr/x") || allows(b, "old", Read, "eng/x") {
		t.Error("a narrowed credential's old token keeps more than the narrower scope during the grace")
	}
	// Scopes that share no task leave the old token nothing.
	b, reload, _ = bookAt(t, time.Minute, credFile(entryJSON("x", "old", `["a/"]`, `["hold"]`)))
	reload(credFile(entryJSON("x", "new", `["b/"]`, `["hold"]`)))
	if _, ok := b.Authenticate([]byte("old")); ok {
		t.Error("an old token whose scope shares no task with the new one is still accepted")
	}
}

// TestRevokedIsRefusedAtOnce: one edit that gives a credential a new token
// and lists the old one's digest in revoked_sha256 refuses the old token
// at once, whatever the grace.
func TestRevokedIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	b, reload, _ := bookAt(t, time.Hour, credFile(entryJSON("ci", "leaked", `["billing/"]`, `["hold"]`)))
	reload(`{"credentials": [` + entryJSON("ci", "fresh", `["billing/"]`, `["hold"]`) + `], "revoked_sha256": ["` + TokenHash([]byte("leaked")) + `"]}`)
	if _, ok := b.Authenticate([]byte("leaked")); ok {
		t.Error("a revoked token is accepted within the grace")
	}
	if !allows(b, "fresh", Hold, "billing/x") {
		t.Error("the credential's new token is refused")
	}
}

// TestZeroGraceIsNone: a grace of 0 refuses a replaced token as soon as
// the change is read.
func TestZeroGraceIsNone(t *testing.T) {
	t.Parallel()
	b, reload, _ := bookAt(t, 0, credFile(entryJSON("ci", "old", `["*"]`, `["hold"]`)))
	reload(credFile(entryJSON("ci", "new", `["*"]`, `["hold"]`)))
	if _, ok := b.Authenticate([]byte("old")); ok {
		t.Error("with no grace, a replaced token is still accepted")
	}
}

// TestChanged: Changed is closed by a reload that took a change and by a
// grace's end (retire, which Watch runs every ReloadInterval), and not by
// a reload of the same content.
func TestChanged(t *testing.T) {
	t.Parallel()
	b, reload, clk := bookAt(t, time.Minute, credFile(entryJSON("ci", "old", `["*"]`, `["hold"]`)))
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ch := b.Changed()
	if changed, err := b.Reload(); changed || err != nil || closed(ch) {
		t.Fatalf("a reload of the same file: changed %v err %v, Changed closed %v", changed, err, closed(ch))
	}
	reload(credFile(entryJSON("ci", "new", `["*"]`, `["hold"]`)))
	if !closed(ch) {
		t.Fatal("a reload that took a change left Changed open")
	}
	ch = b.Changed()
	b.retire()
	if closed(ch) {
		t.Fatal("retire closed Changed with no grace ended")
	}
	clk.add(time.Minute)
	b.retire()
	if !closed(ch) {
		t.Fatal("the end of a grace left Changed open: a stream of the old token would run on")
	}
	if _, ok := b.Authenticate([]byte("old")); ok {
		t.Error("the old token is accepted after its grace")
	}
}

func TestIncludesAndListPrefixes(t *testing.T) {
	t.Parallel()
	readBilling := &Credential{Prefixes: []string{"billing/"}, Rights: []Right{Read}}
	holdBill := &Credential{Prefixes: []string{"bill"}, Rights: []Right{Hold}}
	for _, c := range []struct {
		a, b *Credential
		want bool
	}{
		{holdBill, readBilling, true},
		{readBilling, holdBill, false},
		{Anonymous, holdBill, true},
		{holdBill, Anonymous, false},
		{&Credential{Prefixes: []string{"billing/a"}, Rights: []Right{Admin}}, readBilling, false},
	} {
		if got := c.a.Includes(c.b); got != c.want {
			t.Errorf("%v Includes %v = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	got := (&Credential{Prefixes: []string{"b/x", "a/", "b/", "a/1", "ab"}}).ListPrefixes()
	if !slices.Equal(got, []string{"a/", "ab", "b/"}) {
		t.Errorf("ListPrefixes = %q, want [a/ ab b/]", got)
	}
	if (&Credential{Prefixes: []string{"a/", AllPrefixes}}).ListPrefixes() != nil {
		t.Error("ListPrefixes of a credential with * must be nil (every task)")
	}
}
