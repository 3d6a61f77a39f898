// Package release reads RELEASES, the repository's own record of its
// releases: each release's semantic version, the commit it was cut from and
// the day it was cut, oldest first.
//
// The record lives in the tree rather than only in git tags because a tag
// does not survive every way a repository is copied (an archive, a mirror
// that drops tags, a vendored subtree), while the file does. The tests that
// need an earlier release (the rolling upgrade, the provider's state
// upgrade, the HTTP API's breaking-change check) find its commit here and
// build it from the clone's own history.
package release

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// File is the record's name at the repository root, beside CHANGELOG.md.
const File = "RELEASES"

// Release is one line of the record.
type Release struct {
	Version string    // a semantic version with a leading v: v0.1.0
	Commit  string    // the full 40-hex commit it was cut from
	Date    time.Time // the day it was cut, UTC
}

var (
	// A release's version is a full vMAJOR.MINOR.PATCH with no pre-release
	// or build part; semver.IsValid alone also takes v1 and v1.2.
	semverRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
	commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// Parse reads a record: blank lines and lines starting with # are skipped;
// every other line is "VERSION COMMIT DATE" (whitespace-separated), with
// versions rising strictly from line to line.
func Parse(data []byte) ([]Release, error) {
	var out []Release
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("%s line %d: want VERSION COMMIT DATE, found %d fields", File, n, len(f))
		}
		if !semverRE.MatchString(f[0]) {
			return nil, fmt.Errorf("%s line %d: version %q must be vMAJOR.MINOR.PATCH", File, n, f[0])
		}
		if !commitRE.MatchString(f[1]) {
			return nil, fmt.Errorf("%s line %d: commit %q must be 40 lower-case hex digits", File, n, f[1])
		}
		day, err := time.Parse(time.DateOnly, f[2])
		if err != nil {
			return nil, fmt.Errorf("%s line %d: date %q must be YYYY-MM-DD", File, n, f[2])
		}
		r := Release{Version: f[0], Commit: f[1], Date: day}
		if len(out) > 0 && semver.Compare(out[len(out)-1].Version, r.Version) >= 0 {
			return nil, fmt.Errorf("%s line %d: version %s must be newer than %s above it", File, n, r.Version, out[len(out)-1].Version)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// Load reads the record at the root of the repository dir.
func Load(dir string) ([]Release, error) {
	data, err := os.ReadFile(filepath.Join(dir, File))
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

// Latest returns the newest release of the record, false when it has none.
func Latest(all []Release) (Release, bool) {
	if len(all) == 0 {
		return Release{}, false
	}
	return all[len(all)-1], true
}
