package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/version"
	"github.com/leasehold/leasehold/leasecore/postgres"
	"github.com/leasehold/leasehold/leasecore/sqlite"
)

// buildInfo is what `leasehold version --json` prints. Its field names are
// part of the command line's promise (docs/compatibility.md): a script may
// read them, so they are only ever added to.
type buildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
	// API is the HTTP API: the path's major version and the OpenAPI
	// document's own version.
	API struct {
		Path    string `json:"path"`
		OpenAPI string `json:"openapi"`
	} `json:"api"`
	// Schema is, per store, the oldest schema version this build can serve
	// (needs) and the newest it can migrate to (knows).
	Schema map[string]schemaRange `json:"schema"`
}

type schemaRange struct {
	Needs int `json:"needs"`
	Knows int `json:"knows"`
}

func currentBuild() (buildInfo, error) {
	b := buildInfo{Version: version.String(), Commit: version.Commit(), Go: version.Go()}
	b.API.Path = "/v1"
	api, err := leasehold.APIVersion()
	if err != nil {
		return b, err
	}
	b.API.OpenAPI = api
	b.Schema = map[string]schemaRange{}
	for store, versions := range map[string]func() (int, int, error){"sqlite": sqlite.SchemaVersions, "postgres": postgres.SchemaVersions} {
		needs, knows, err := versions()
		if err != nil {
			return b, fmt.Errorf("%s schema: %w", store, err)
		}
		b.Schema[store] = schemaRange{Needs: needs, Knows: knows}
	}
	return b, nil
}

// printVersion runs `leasehold version [--json]` (and --version, which
// takes no flags).
func printVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", stderr)
	asJSON := fs.Bool("json", false, "print the build as one JSON object")
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, "Usage: leasehold version [--json]\n\nPrint this build's version, commit, Go version, HTTP API version and, per store, the\nschema versions it needs and knows.\n\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return exitcode.OK
		}
		printUsage(stderr)
		return exitcode.Usage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "leasehold version: unexpected argument %q\n", fs.Arg(0))
		return exitcode.Usage
	}
	b, err := currentBuild()
	if err != nil {
		fmt.Fprintf(stderr, "leasehold version: %v\n", err)
		return exitcode.Failure
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(b); err != nil {
			return exitcode.Failure
		}
		return exitcode.OK
	}
	fmt.Fprintf(stdout, "leasehold %s\n", b.Version)
	fmt.Fprintf(stdout, "  commit    %s\n", b.Commit)
	fmt.Fprintf(stdout, "  go        %s\n", b.Go)
	fmt.Fprintf(stdout, "  api       %s (openapi.yaml %s)\n", b.API.Path, b.API.OpenAPI)
	for _, store := range []string{"sqlite", "postgres"} {
		s := b.Schema[store]
		fmt.Fprintf(stdout, "  schema    %-8s needs %d, knows up to %d\n", store, s.Needs, s.Knows)
	}
	return exitcode.OK
}
