package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"module version", debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: settings("vcs.revision", "0123456789abcdef")}, "v1.4.0"},
		{"clean checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", "0123456789abcdef", "vcs.modified", "false")}, "0123456789ab"},
		{"modified checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", "0123456789abcdef", "vcs.modified", "true")}, "0123456789ab+modified"},
		{"short revision", debug.BuildInfo{Settings: settings("vcs.revision", "abc")}, "abc"},
		{"nothing known", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
	} {
		if got := fromBuildInfo(&tc.info); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The linker's stamp wins over the build information.
func TestStamped(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = "v9.9.9"
	if got := String(); got != "v9.9.9" {
		t.Errorf("String() = %q with a stamped version, want v9.9.9", got)
	}
	version = ""
	if got := String(); got == "" {
		t.Error("String() is empty in an unstamped build")
	}
}

func TestCommitFromBuildInfo(t *testing.T) {
	t.Parallel()
	const rev = "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"clean", []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}, rev},
		{"modified", []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}, rev + "+modified"},
		{"no vcs", nil, "unknown"},
	} {
		if got := commitFromBuildInfo(&debug.BuildInfo{Settings: tc.settings}); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
