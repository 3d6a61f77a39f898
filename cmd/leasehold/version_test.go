package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/version"
)

// TestVersionJSON holds leasehold version --json to the build: its version
// and commit, the Go release, openapi.yaml's version, and per store the
// newest schema version, which is the number of migration files the
// driver embeds.
func TestVersionJSON(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version", "--json"}, func(string) string { return "" }, &stdout, &stderr); code != exitcode.OK {
		t.Fatalf("version --json exited %d: %s", code, stderr.String())
	}
	var got buildInfo
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("version --json: %v", err)
	}
	if got.Version != version.String() || got.Commit != version.Commit() || got.Go != runtime.Version() {
		t.Errorf("version --json = %+v, want version %q, commit %q, go %q", got, version.String(), version.Commit(), runtime.Version())
	}
	if got.API.Path != "/v1" || got.API.OpenAPI == "" {
		t.Errorf("api = %+v, want /v1 and openapi.yaml's info.version", got.API)
	}
	for store, dir := range map[string]string{"sqlite": "../../leasecore/sqlite/migrations", "postgres": "../../leasecore/postgres/migrations"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
		if err != nil {
			t.Fatal(err)
		}
		s, ok := got.Schema[store]
		if !ok || s.Knows != len(files) || s.Needs < 1 || s.Needs > s.Knows {
			t.Errorf("schema[%s] = %+v (present %v), want knows %d (its migration files) and 1 ≤ needs ≤ knows", store, s, ok, len(files))
		}
	}
}
