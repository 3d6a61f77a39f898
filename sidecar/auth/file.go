package auth

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

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

// credentials checks a parsed file and returns its credentials by digest.
func (f *File) credentials() (map[Digest]*Credential, error) {
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
		raw, err := hex.DecodeString(fc.TokenSHA256)
		if err != nil || len(raw) != len(Digest{}) {
			return nil, fmt.Errorf("%s: token_sha256 must be %s", where, digestRule)
		}
		d := Digest(raw)
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
	return out, nil
}

// ParseFile reads a credentials File strictly: no unknown field, no
// trailing data, every rule met. Its errors name the credential and the
// field, never a token.
func ParseFile(b []byte) (map[Digest]*Credential, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a credentials file (JSON with a \"credentials\" list): %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a credentials file: data after the JSON object")
	}
	return f.credentials()
}

// TokenCredentialName names the one credential of a --token-file.
const TokenCredentialName = "token"

// parseTokenFile reads a --token-file's content as a book of one
// credential, TokenCredentialName, with every right.
func parseTokenFile(b []byte) (map[Digest]*Credential, error) {
	tok, err := endpoint.ParseToken(b)
	if err != nil {
		return nil, err
	}
	return map[Digest]*Credential{DigestOf(tok): tokenCredential()}, nil
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
