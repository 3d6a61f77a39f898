// Package version says which build of leasehold is running, for
// `leasehold --version`, the sidecar's /healthz and /v1/status, and its
// start-up log line. A release build stamps it with
//
//	go build -ldflags "-X github.com/leasehold/leasehold/internal/version.version=v1.2.3"
//
// Without the stamp it comes from the build information the Go toolchain
// embeds: the module's version when built by `go install module@version`,
// else the VCS revision (with "+modified" when the tree had changes) when built
// from a checkout, else "devel".
package version

import (
	"runtime"
	"runtime/debug"
)

// version and commit are set by the linker (-ldflags -X); empty in an
// unstamped build. make build, make install and make dist stamp both.
var version, commit string

// String returns the running build's version; never empty.
func String() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromBuildInfo(info)
}

// fromBuildInfo picks the version from build information: the main
// module's version unless it is "(devel)" or empty, else the VCS revision,
// else "devel".
func fromBuildInfo(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	revision, modified := vcs(info)
	if revision == "" {
		return "devel"
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if modified {
		revision += "+modified"
	}
	return revision
}

// Commit returns the full commit the running build was made from: the
// linker's stamp, else the VCS revision the Go toolchain embedded (with
// "+modified" for a changed tree), else "unknown".
func Commit() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return commitFromBuildInfo(info)
}

func commitFromBuildInfo(info *debug.BuildInfo) string {
	revision, modified := vcs(info)
	switch {
	case revision == "":
		return "unknown"
	case modified:
		return revision + "+modified"
	}
	return revision
}

// vcs reads the VCS revision the Go toolchain embedded, and whether the
// tree had changes.
func vcs(info *debug.BuildInfo) (revision string, modified bool) {
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return revision, modified
}

// Go returns the Go release the running build was compiled with.
func Go() string { return runtime.Version() }
