package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/sidecar/auth"
)

const credentialsUsage = `Usage:
  leasehold credentials new --name NAME --prefix PREFIX [--prefix …] --right read|hold|admin [--file PATH]
        make a credential: print its new token (once) on stdout, and add the credential, with
        the token's SHA-256, to the credentials file PATH (created 0600 when missing; a sidecar
        serving it re-reads it within 2 s), or print the entry to add on stderr
  leasehold credentials revoke --name NAME --file PATH [--remove]
        revoke the credential's token: add its SHA-256 to the file's revoked_sha256, which a
        sidecar refuses at once (within 2 s, grace or not), and give the credential a new
        token, printed once on stdout; with --remove, remove the credential instead
  leasehold credentials hash < TOKEN
        print the SHA-256 a credentials file stores for the token read on stdin
`

// prefixList is --prefix: each use adds one.
type prefixList []string

func (p *prefixList) String() string     { return strings.Join(*p, ",") }
func (p *prefixList) Set(v string) error { *p = append(*p, v); return nil }

// credentials runs `leasehold credentials new|revoke|hash`.
func credentials(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, credentialsUsage)
		return exitcode.Usage
	}
	switch args[0] {
	case "new":
		return newCredential(args[1:], stdout, stderr)
	case "revoke":
		return revokeCredential(args[1:], stdout, stderr)
	case "hash":
		raw, _ := io.ReadAll(io.LimitReader(stdin, 4097)) // ParseToken refuses more than a token's 4096 bytes
		tok, err := endpoint.ParseToken(raw)
		if err != nil {
			return fail(stderr, "credentials hash", fmt.Errorf("the token on stdin: %w", err))
		}
		fmt.Fprintln(stdout, auth.TokenHash(tok))
		return exitcode.OK
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, credentialsUsage)
		return exitcode.OK
	}
	fmt.Fprintf(stderr, "%s credentials: unknown subcommand %q\n\n%s", programName, args[0], credentialsUsage)
	return exitcode.Usage
}

func newCredential(args []string, stdout, stderr io.Writer) int {
	var (
		name, right, file string
		prefixes          prefixList
	)
	fs := newFlagSet("credentials new", stderr)
	fs.StringVar(&name, "name", "", "the credential's `name`, as answers and the history show it ("+auth.NameRule+")")
	fs.Var(&prefixes, "prefix", "a task `prefix` it covers (repeat for more; * covers every task)")
	fs.StringVar(&right, "right", "", "its `right` on those tasks: read, hold (includes read) or admin (includes both)")
	fs.StringVar(&file, "file", "", "the credentials file to add it to (`path`)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitcode.OK
		}
		return exitcode.Usage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return exitcode.Usage
	}
	token, err := auth.NewToken()
	if err != nil {
		return fail(stderr, "credentials new", err)
	}
	entry := auth.FileCredential{Name: name, TokenSHA256: auth.TokenHash([]byte(token)), Prefixes: prefixes, Rights: []auth.Right{auth.Right(right)}}
	// The entry is checked as the sidecar will read it: alone, then in the file.
	if _, err := auth.ParseFile(mustJSON(auth.File{Credentials: []auth.FileCredential{entry}})); err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), err)
		return exitcode.Usage
	}
	if file == "" {
		fmt.Fprintf(stderr, "add this to the \"credentials\" list of the sidecar's --credentials-file:\n%s\n", mustJSON(entry))
		fmt.Fprintln(stdout, token)
		return exitcode.OK
	}
	if err := editCredentials(file, true, func(f *auth.File) error {
		f.Credentials = append(f.Credentials, entry)
		return nil
	}); err != nil {
		return fail(stderr, "credentials new", err)
	}
	fmt.Fprintf(stderr, "added credential %q to %s; its token follows, shown only this once\n", name, file)
	fmt.Fprintln(stdout, token)
	return exitcode.OK
}

// revokeCredential runs `leasehold credentials revoke`: one edit of the
// file, which a sidecar reads in one re-read, so that the old token is
// refused however soon after the command the next edit comes (deleting an
// entry and adding it back with a new token, done within one re-read,
// would look like a rotation, with its grace).
func revokeCredential(args []string, stdout, stderr io.Writer) int {
	var (
		name, file string
		remove     bool
	)
	fs := newFlagSet("credentials revoke", stderr)
	fs.StringVar(&name, "name", "", "the `name` of the credential whose token to revoke")
	fs.StringVar(&file, "file", "", "the credentials file (`path`)")
	fs.BoolVar(&remove, "remove", false, "remove the credential from the file rather than give it a new token")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitcode.OK
		}
		return exitcode.Usage
	}
	if fs.NArg() > 0 || name == "" || file == "" {
		fmt.Fprintf(stderr, "%s: needs --name NAME and --file PATH, and no argument\n", fs.Name())
		return exitcode.Usage
	}
	var token string
	err := editCredentials(file, false, func(f *auth.File) error {
		i := slices.IndexFunc(f.Credentials, func(c auth.FileCredential) bool { return c.Name == name })
		if i < 0 {
			return fmt.Errorf("%s has no credential named %q", file, name)
		}
		f.RevokedSHA256 = append(f.RevokedSHA256, f.Credentials[i].TokenSHA256)
		if remove {
			f.Credentials = slices.Delete(f.Credentials, i, i+1)
			if len(f.Credentials) == 0 {
				return fmt.Errorf("%q is the file's only credential, and a sidecar needs one: give it a new token (leave out --remove)", name)
			}
			return nil
		}
		var err error
		if token, err = auth.NewToken(); err != nil {
			return err
		}
		f.Credentials[i].TokenSHA256 = auth.TokenHash([]byte(token))
		return nil
	})
	if err != nil {
		return fail(stderr, "credentials revoke", err)
	}
	if remove {
		fmt.Fprintf(stderr, "revoked credential %q's token and removed the credential from %s: a sidecar serving it refuses the token within 2 s\n", name, file)
		return exitcode.OK
	}
	fmt.Fprintf(stderr, "revoked credential %q's token in %s: a sidecar serving it refuses the old token within 2 s, with no grace, and ends its streams; the new token follows, shown only this once\n", name, file)
	fmt.Fprintln(stdout, token)
	return exitcode.OK
}

// editCredentials changes the credentials file at path by edit (a new
// file when there is none and create is set), checking the result as a
// sidecar will read it, and replaces the file in one rename so that a
// sidecar never reads half of it.
func editCredentials(path string, create bool, edit func(*auth.File) error) error {
	var f auth.File
	switch raw, err := os.ReadFile(path); {
	case errors.Is(err, os.ErrNotExist) && create:
	case err != nil:
		return err
	default:
		parsed, err := auth.DecodeFile(raw)
		if err == nil {
			err = parsed.Check()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		f = *parsed
	}
	if err := edit(&f); err != nil {
		return err
	}
	out := mustJSON(f)
	if _, err := auth.ParseFile(out); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".credentials-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing left to remove
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(out, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func mustJSON(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err) // the file types hold strings only
	}
	return b
}
