package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
  leasehold credentials hash < TOKEN
        print the SHA-256 a credentials file stores for the token read on stdin
`

// prefixList is --prefix: each use adds one.
type prefixList []string

func (p *prefixList) String() string     { return strings.Join(*p, ",") }
func (p *prefixList) Set(v string) error { *p = append(*p, v); return nil }

// credentials runs `leasehold credentials new|hash`.
func credentials(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, credentialsUsage)
		return exitcode.Usage
	}
	switch args[0] {
	case "new":
		return newCredential(args[1:], stdout, stderr)
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
	if err := addCredential(file, entry); err != nil {
		return fail(stderr, "credentials new", err)
	}
	fmt.Fprintf(stderr, "added credential %q to %s; its token follows, shown only this once\n", name, file)
	fmt.Fprintln(stdout, token)
	return exitcode.OK
}

// addCredential adds entry to the credentials file at path (a new file
// when there is none), replacing the file in one rename so that a sidecar
// never reads half of it.
func addCredential(path string, entry auth.FileCredential) error {
	var f auth.File
	switch raw, err := os.ReadFile(path); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		if _, err := auth.ParseFile(raw); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	f.Credentials = append(f.Credentials, entry)
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
