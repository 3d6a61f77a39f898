package release

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	const a, b = "0123456789abcdef0123456789abcdef01234567", "89abcdef0123456789abcdef0123456789abcdef"
	got, err := Parse([]byte("# comment\n\nv0.1.0 " + a + " 2026-12-04\nv0.2.0\t" + b + "\t2027-01-10\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Version != "v0.1.0" || got[1].Commit != b || got[1].Date.Format("2006-01-02") != "2027-01-10" {
		t.Fatalf("Parse = %+v", got)
	}
	if r, ok := Latest(got); !ok || r.Version != "v0.2.0" {
		t.Fatalf("Latest = %+v, %v", r, ok)
	}
	if _, ok := Latest(nil); ok {
		t.Fatal("Latest of an empty record says it found one")
	}
	for _, tc := range []struct{ text, want string }{
		{"v0.1.0 " + a, "want VERSION COMMIT DATE"},
		{"0.1.0 " + a + " 2026-12-04", "must be vMAJOR.MINOR.PATCH"},
		{"v0.1 " + a + " 2026-12-04", "must be vMAJOR.MINOR.PATCH"},
		{"v0.1.0-rc.1 " + a + " 2026-12-04", "must be vMAJOR.MINOR.PATCH"},
		{"v0.1.0 " + a[:12] + " 2026-12-04", "40 lower-case hex"},
		{"v0.1.0 " + a + " 04-12-2026", "YYYY-MM-DD"},
		{"v0.2.0 " + a + " 2026-12-04\nv0.1.10 " + b + " 2026-12-05", "must be newer than v0.2.0"},
		{"v0.1.0 " + a + " 2026-12-04\nv0.1.0 " + b + " 2026-12-05", "must be newer than v0.1.0"},
	} {
		if _, err := Parse([]byte(tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tc.text, err, tc.want)
		}
	}
}
