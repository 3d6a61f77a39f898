package auth

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func credFile(entries ...string) string {
	return `{"credentials": [` + strings.Join(entries, ",") + `]}`
}

func entryJSON(name, token, prefixes, rights string) string {
	return fmt.Sprintf(`{"name": %q, "token_sha256": %q, "prefixes": %s, "rights": %s}`, name, TokenHash([]byte(token)), prefixes, rights)
}

func TestScope(t *testing.T) {
	t.Parallel()
	billing := &Credential{Name: "billing", Prefixes: []string{"billing/", "reports:"}, Rights: []Right{Hold}}
	reader := &Credential{Name: "dash", Prefixes: []string{AllPrefixes}, Rights: []Right{Read}}
	for _, c := range []struct {
		cred  *Credential
		right Right
		task  string
		want  bool
	}{
		{billing, Hold, "billing/nightly", true},
		{billing, Read, "billing/nightly", true}, // hold includes read
		{billing, Hold, "reports:weekly", true},
		{billing, Admin, "billing/nightly", false},
		{billing, Hold, "billing", false}, // "billing/" is the prefix
		{billing, Read, "payroll/run", false},
		{reader, Read, "anything", true},
		{reader, Hold, "anything", false},
		{Anonymous, Admin, "anything", true},
	} {
		if got := c.cred.Allows(c.right, c.task); got != c.want {
			t.Errorf("%s Allows(%s, %q) = %v, want %v", c.cred.Principal(), c.right, c.task, got, c.want)
		}
	}
	if got := billing.Scope(); got != `it has hold on tasks starting "billing/", tasks starting "reports:"` {
		t.Errorf("Scope() = %q", got)
	}
}

func TestParseFileRules(t *testing.T) {
	t.Parallel()
	ok := entryJSON("ci", "t1", `["billing/"]`, `["hold"]`)
	if creds, err := ParseFile([]byte(credFile(ok, entryJSON("ops", "t2", `["*"]`, `["admin"]`)))); err != nil || len(creds) != 2 {
		t.Fatalf("ParseFile: %v (%d credentials)", err, len(creds))
	}
	for name, c := range map[string]struct{ file, want string }{
		"no credentials": {`{"credentials": []}`, "lists none"},
		"not JSON":       {`credentials: []`, "not a credentials file"},
		"unknown field":  {`{"credentials": [], "admins": []}`, `unknown field at /admins`},
		"trailing data":  {credFile(ok) + `{}`, "after top-level value"},
		// A member given twice is refused, not served as its last: the
		// rights of a read entry must not become admin by a second key.
		"duplicate key": {credFile(`{"name": "x", "token_sha256": "` + TokenHash([]byte("t")) + `", "prefixes": ["a/"], "rights": ["read"], "rights": ["admin"]}`),
			"duplicate object member name at /credentials/0/rights"},
		"duplicate top-level key": {`{"credentials": [` + ok + `], "credentials": [` + entryJSON("ops", "t2", `["*"]`, `["admin"]`) + `]}`, "duplicate object member name"},
		// Names match exactly, as written: "Rights" is not "rights".
		"case-folded key":    {credFile(`{"name": "x", "token_sha256": "` + TokenHash([]byte("t")) + `", "prefixes": ["a/"], "Rights": ["admin"]}`), "unknown field at /credentials/0/Rights"},
		"invalid UTF-8":      {credFile(entryJSON("x", "t", `["a/"]`, `["read"]`)[:10] + "\xff" + `"}`), "invalid UTF-8"},
		"wrong kind":         {credFile(entryJSON("x", "t", `"a/"`, `["read"]`)), "a string where the file needs a list at /credentials/0/prefixes"},
		"bad revoked digest": {`{"credentials": [` + ok + `], "revoked_sha256": ["abc"]}`, "revoked_sha256[0] must be the SHA-256"},
		"revoked in use":     {`{"credentials": [` + ok + `], "revoked_sha256": ["` + TokenHash([]byte("t1")) + `"]}`, `credential "ci": token_sha256 is revoked (revoked_sha256[0])`},
		"bad name":           {credFile(entryJSON("c i", "t", `["a/"]`, `["read"]`)), "name \"c i\": must be 1 to 64 characters"},
		"long name":          {credFile(entryJSON(strings.Repeat("n", 65), "t", `["a/"]`, `["read"]`)), "must be 1 to 64"},
		"duplicate name":     {credFile(ok, entryJSON("ci", "t9", `["a/"]`, `["read"]`)), `credential "ci": the name is given twice`},
		"shared token":       {credFile(ok, entryJSON("other", "t1", `["a/"]`, `["read"]`)), `also credential "ci"'s`},
		"bad digest":         {credFile(`{"name": "x", "token_sha256": "t1", "prefixes": ["a/"], "rights": ["read"]}`), "token_sha256 must be the SHA-256"},
		"no prefixes":        {credFile(entryJSON("x", "t", `[]`, `["read"]`)), "prefixes must list one or more"},
		"empty prefix":       {credFile(entryJSON("x", "t", `[""]`, `["read"]`)), `write "*" for every task`},
		"bad prefix":         {credFile(entryJSON("x", "t", `["a b"]`, `["read"]`)), `prefix "a b"`},
		"no rights":          {credFile(entryJSON("x", "t", `["a/"]`, `[]`)), "rights must be one or more"},
		"unknown right":      {credFile(entryJSON("x", "t", `["a/"]`, `["write"]`)), `right "write"`},
		"second entry named": {credFile(ok, `{"token_sha256": "00", "prefixes": ["a/"], "rights": ["read"]}`), "credentials[1]: name"},
		"bad name message":   {credFile(entryJSON("c i", "t", `["a/"]`, `["read"]`)), "credentials[0]: name \"c i\""},
	} {
		_, err := ParseFile([]byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", name, err, c.want)
		}
	}
}

// clock is a settable clock for the grace period.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestRotation: a token replaced under the same name is accepted, with the
// name's new scope, until the grace period ends; a credential removed is
// refused at once; a file that does not parse changes nothing.
func TestRotation(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "credentials.json")
	write := func(s string) {
		t.Helper()
		// Written next to it and renamed over it, as an editor or a
		// Kubernetes Secret update replaces a file.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(credFile(entryJSON("ci", "old", `["billing/"]`, `["hold"]`), entryJSON("leaked", "leak", `["*"]`, `["read"]`)))
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	b, err := OpenCredentialsFile(path, BookOptions{Grace: time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	accepts := func(token string, task string) bool {
		c, ok := b.Authenticate([]byte(token))
		return ok && c.Allows(Hold, task)
	}
	if !accepts("old", "billing/x") || accepts("new", "billing/x") {
		t.Fatal("before the rotation: old must be accepted, new not")
	}

	write(credFile(entryJSON("ci", "new", `["billing/", "reports/"]`, `["hold"]`)))
	if changed, err := b.Reload(); !changed || err != nil {
		t.Fatalf("Reload: changed %v, err %v", changed, err)
	}
	if !accepts("new", "reports/x") {
		t.Error("the new token is refused after the reload")
	}
	if !accepts("old", "billing/x") {
		t.Error("the old token is refused within the grace period")
	}
	// The edit also raised the scope: the old token keeps no more than its
	// old scope (billing/), never the new one.
	if accepts("old", "reports/x") {
		t.Error("the old token took the credential's new scope during the grace")
	}
	if _, ok := b.Authenticate([]byte("leak")); ok {
		t.Error("a credential removed from the file is still accepted")
	}

	// A broken file keeps the book as it was.
	write(`{"credentials": [`)
	if _, err := b.Reload(); err == nil || strings.Contains(err.Error(), "new") {
		t.Errorf("Reload of a broken file: err %v, want one that quotes no token", err)
	}
	if !accepts("new", "billing/x") {
		t.Error("a broken file dropped the credentials")
	}

	// A second rotation does not extend the first token's grace.
	clk.add(50 * time.Second)
	write(credFile(entryJSON("ci", "newer", `["billing/"]`, `["hold"]`)))
	if _, err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	if !accepts("old", "billing/x") || !accepts("new", "billing/x") || !accepts("newer", "billing/x") {
		t.Error("within the grace periods all three tokens must be accepted")
	}
	clk.add(11 * time.Second)
	if accepts("old", "billing/x") {
		t.Error("the first token outlived its grace period")
	}
	if !accepts("new", "billing/x") {
		t.Error("the second token was refused within its grace period")
	}
	clk.add(time.Minute)
	if accepts("new", "billing/x") || !accepts("newer", "billing/x") {
		t.Error("after every grace period only the newest token may be accepted")
	}
}

// TestTokenFileRotation: a --token-file swapped through a symlink, as a
// Kubernetes Secret volume does (..data → a new directory), is followed.
func TestTokenFileRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for gen, tok := range []string{"first-token", "second-token"} {
		d := filepath.Join(dir, fmt.Sprintf("..gen%d", gen))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "token"), []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	swap := func(gen int) {
		t.Helper()
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(fmt.Sprintf("..gen%d", gen), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	swap(0)
	if err := os.Symlink("..data/token", filepath.Join(dir, "token")); err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	b, err := OpenTokenFile(filepath.Join(dir, "token"), BookOptions{Grace: time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := b.Authenticate([]byte("first-token")); !ok || c.Name != TokenCredentialName || !c.Allows(Admin, "any") {
		t.Fatalf("the token file's credential: %+v, %v", c, ok)
	}
	swap(1)
	if changed, err := b.Reload(); !changed || err != nil {
		t.Fatalf("Reload after the swap: changed %v, err %v", changed, err)
	}
	if _, ok := b.Authenticate([]byte("second-token")); !ok {
		t.Error("the new token is refused")
	}
	if _, ok := b.Authenticate([]byte("first-token")); !ok {
		t.Error("the old token is refused within the grace period")
	}
	clk.add(time.Minute)
	if _, ok := b.Authenticate([]byte("first-token")); ok {
		t.Error("the old token is accepted after the grace period")
	}
}

func TestNewToken(t *testing.T) {
	t.Parallel()
	a, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewToken()
	if a == b || !strings.HasPrefix(a, "lh_") || len(a) != 46 {
		t.Errorf("NewToken: %q and %q", a, b)
	}
	if h := TokenHash([]byte("x")); h != "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881" {
		t.Errorf("TokenHash(x) = %s, want the SHA-256 of x", h)
	}
}
