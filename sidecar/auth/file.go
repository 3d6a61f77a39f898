package auth

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/leasecore"
)

// File is a credentials file, as JSON:
//
//	{"credentials": [
//	  {"name": "billing-app", "token_sha256": "<64 hex digits>",
//	   "prefixes": ["billing/"], "rights": ["hold"]},
//	  {"name": "ops", "token_sha256": "<64 hex digits>",
//	   "prefixes": ["*"], "rights": ["admin"]}
//	]}
//
// Tokens are stored as the hex SHA-256 of the token (TokenHash, or
// `leasehold credentials new`). They are random and long, so a fast digest
// protects them as well as a password hash would, at a cost a request can
// pay; do not use words people choose as tokens.
type File struct {
	Credentials []FileCredential `json:"credentials"`
	// RevokedSHA256 are digests of tokens refused at once, even within a
	// rotation's grace: `leasehold credentials revoke` adds the digest it
	// replaces. No credential may have one of them as its token.
	RevokedSHA256 []string `json:"revoked_sha256,omitempty"`
}

// FileCredential is one entry of a credentials File.
type FileCredential struct {
	Name        string   `json:"name"`
	TokenSHA256 string   `json:"token_sha256"`
	Prefixes    []string `json:"prefixes"`
	Rights      []Right  `json:"rights"`
}

// maxFileBytes bounds a credentials file.
const maxFileBytes = 1 << 20

// The rules of a credential's fields, as errors name them.
const (
	NameRule   = leasecore.CredentialRule
	prefixRule = `"*" (every task) or the start of a task name: 1–200 characters of A–Z a–z 0–9 . _ : / @ -`
	rightsRule = "one or more of read, hold, admin (hold includes read; admin includes both)"
	digestRule = "the SHA-256 of the token as 64 hex digits (leasehold credentials new, or leasehold credentials hash)"
)

// ValidateName checks a credential's name by leasecore's one rule for
// them (leasecore.ValidateCredential).
func ValidateName(name string) error {
	if err := leasecore.ValidateCredential(name); err != nil {
		return fmt.Errorf("name %q: %s", name, cli.Rule(err))
	}
	return nil
}

// ValidatePrefix checks one prefix of a credential.
func ValidatePrefix(p string) error {
	if p == AllPrefixes {
		return nil
	}
	if p == "" {
		return fmt.Errorf(`prefix "": must be %s; write "*" for every task`, prefixRule)
	}
	if err := leasecore.ValidateTaskPrefix(p); err != nil {
		return fmt.Errorf("prefix %q: %s", p, cli.Rule(err))
	}
	return nil
}

// credentials checks a parsed file and returns its credentials by digest,
// and the digests it revokes.
func (f *File) credentials() (*parsed, error) {
	if len(f.Credentials) == 0 {
		return nil, errors.New(`"credentials" lists none: a sidecar with a credentials file needs at least one`)
	}
	out := make(map[Digest]*Credential, len(f.Credentials))
	names := make(map[string]bool, len(f.Credentials))
	for i, fc := range f.Credentials {
		if err := ValidateName(fc.Name); err != nil {
			return nil, fmt.Errorf("credentials[%d]: %w", i, err)
		}
		where := fmt.Sprintf("credential %q", fc.Name)
		if names[fc.Name] {
			return nil, fmt.Errorf("%s: the name is given twice", where)
		}
		names[fc.Name] = true
		d, ok := parseDigest(fc.TokenSHA256)
		if !ok {
			return nil, fmt.Errorf("%s: token_sha256 must be %s", where, digestRule)
		}
		if other, dup := out[d]; dup {
			return nil, fmt.Errorf("%s: token_sha256 is also credential %q's: each credential needs a token of its own", where, other.Name)
		}
		if len(fc.Prefixes) == 0 {
			return nil, fmt.Errorf(`%s: prefixes must list one or more: %s`, where, prefixRule)
		}
		for _, p := range fc.Prefixes {
			if err := ValidatePrefix(p); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
		}
		if len(fc.Rights) == 0 {
			return nil, fmt.Errorf("%s: rights must be %s", where, rightsRule)
		}
		for _, r := range fc.Rights {
			if r.level() == 0 {
				return nil, fmt.Errorf("%s: right %q: rights must be %s", where, r, rightsRule)
			}
		}
		out[d] = &Credential{Name: fc.Name, Prefixes: fc.Prefixes, Rights: fc.Rights}
	}
	revoked := make(map[Digest]bool, len(f.RevokedSHA256))
	for i, hx := range f.RevokedSHA256 {
		d, ok := parseDigest(hx)
		if !ok {
			return nil, fmt.Errorf("revoked_sha256[%d] must be %s", i, digestRule)
		}
		if c, live := out[d]; live {
			return nil, fmt.Errorf("credential %q: token_sha256 is revoked (revoked_sha256[%d]): give it a new token (leasehold credentials revoke)", c.Name, i)
		}
		revoked[d] = true
	}
	return &parsed{creds: out, revoked: revoked}, nil
}

// parseDigest reads a token's digest as a file writes it: 64 hex digits.
func parseDigest(hx string) (Digest, bool) {
	raw, err := hex.DecodeString(hx)
	if err != nil || len(raw) != len(Digest{}) {
		return Digest{}, false
	}
	return Digest(raw), true
}

// ParseFile reads a credentials File strictly (DecodeFile), checks every
// rule, and returns its credentials by their tokens' digests. Its errors
// name the credential and the field, never a token.
func ParseFile(b []byte) (map[Digest]*Credential, error) {
	p, err := parseFile(b)
	if err != nil {
		return nil, err
	}
	return p.creds, nil
}

// DecodeFile decodes a credentials file strictly, without checking its
// rules (ParseFile does): no unknown or duplicate member, names matched
// exactly (not case-folded), valid UTF-8, one JSON value. The decoder is
// encoding/json/v2's design (github.com/go-json-experiment/json), which
// rejects duplicate names and invalid UTF-8 itself: a file that says
// "rights" twice is refused, not served as its last.
func DecodeFile(b []byte) (*File, error) {
	var f File
	if err := jsonv2.Unmarshal(b, &f, jsonv2.RejectUnknownMembers(true)); err != nil {
		return nil, fmt.Errorf("not a credentials file (JSON with a \"credentials\" list, each member once): %s", decodeRule(err))
	}
	return &f, nil
}

// decodeRule says what is wrong with a file that does not decode, without
// quoting its values (a token pasted by mistake must not reach a log).
func decodeRule(err error) string {
	var se *jsonv2.SemanticError
	if errors.As(err, &se) {
		if se.JSONPointer != "" {
			return fmt.Sprintf("%s at %s", semanticRule(se), se.JSONPointer)
		}
		return semanticRule(se)
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		rule := strings.TrimPrefix(syn.Err.Error(), "jsontext: ")
		if syn.JSONPointer != "" {
			return fmt.Sprintf("%s at %s (byte %d)", rule, syn.JSONPointer, syn.ByteOffset)
		}
		return fmt.Sprintf("%s (byte %d)", rule, syn.ByteOffset)
	}
	return "not JSON"
}

// semanticRule words a member that does not fit a File.
func semanticRule(se *jsonv2.SemanticError) string {
	switch {
	case errors.Is(se.Err, jsonv2.ErrUnknownName):
		return "unknown field"
	case se.GoType != nil:
		return fmt.Sprintf("%s where the file needs %s", kindName(se.JSONKind), jsonKindOf(se.GoType))
	}
	return "a value that does not fit"
}

// kindName names a JSON value's kind.
func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "null"
	}
	return "a value"
}

// jsonKindOf names the JSON a Go type of File decodes from.
func jsonKindOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Struct:
		return "an object"
	}
	return t.String()
}

// Check checks a decoded file's rules, as ParseFile does.
func (f *File) Check() error {
	_, err := f.credentials()
	return err
}

func parseFile(b []byte) (*parsed, error) {
	f, err := DecodeFile(b)
	if err != nil {
		return nil, err
	}
	return f.credentials()
}

// TokenCredentialName names the one credential of a --token-file.
const TokenCredentialName = "token"

// parseTokenFile reads a --token-file's content as a book of one
// credential, TokenCredentialName, with every right.
func parseTokenFile(b []byte) (*parsed, error) {
	tok, err := endpoint.ParseToken(b)
	if err != nil {
		return nil, err
	}
	return &parsed{creds: map[Digest]*Credential{DigestOf(tok): tokenCredential()}}, nil
}

// tokenCredential is the one credential of a token file: every right on
// every task.
func tokenCredential() *Credential {
	return &Credential{Name: TokenCredentialName, Prefixes: []string{AllPrefixes}, Rights: []Right{Admin}}
}

// readFile reads a file of at most maxFileBytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFileBytes)
	}
	return b, nil
}

// NewToken returns a new random token: "lh_" and 32 random bytes in
// unpadded base64url (46 characters).
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "lh_" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// TokenHash returns what a credentials file stores for token: its SHA-256
// as hex.
func TokenHash(token []byte) string {
	d := DigestOf(token)
	return hex.EncodeToString(d[:])
}
