package migration

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoadFloor(t *testing.T) {
	t.Parallel()
	files := func(contract string) fstest.MapFS {
		return fstest.MapFS{
			"m/0001_a.sql":            {Data: []byte("CREATE TABLE a (x int);")},
			"m/0002_schema_floor.sql": {Data: []byte("-- the column\nALTER TABLE t ADD COLUMN floor_version int;")},
			"m/0003_drop.sql":         {Data: []byte(contract)},
		}
	}
	all, err := Load(files("-- drops a.x, which binaries before 3 read\n-- floor: 3\nALTER TABLE a DROP COLUMN x;"), "m")
	if err != nil {
		t.Fatal(err)
	}
	if got := [3]int{all[0].Floor, all[1].Floor, all[2].Floor}; got != [3]int{0, 0, 3} {
		t.Fatalf("floors = %v, want [0 0 3]", got)
	}
	// A floor line after the first statement is not a declaration.
	if all, err := Load(files("ALTER TABLE a DROP COLUMN x;\n-- floor: 3"), "m"); err != nil || all[2].Floor != 0 {
		t.Errorf("a floor line after a statement: floor %d, err %v; want 0, nil", all[2].Floor, err)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"above its own version", "-- floor: 4\nSELECT 1;", "above its own version"},
		{"zero", "-- floor: 0\nSELECT 1;", "from 1"},
	} {
		if _, err := Load(files(tc.body), "m"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Load = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	early := fstest.MapFS{
		"m/0001_a.sql":            {Data: []byte("-- floor: 1\nSELECT 1;")},
		"m/0002_schema_floor.sql": {Data: []byte("SELECT 1;")},
	}
	if _, err := Load(early, "m"); err == nil || !strings.Contains(err.Error(), "before schema_floor") {
		t.Errorf("a floor before the column exists: Load = %v, want a refusal", err)
	}
}

func TestStatusOf(t *testing.T) {
	t.Parallel()
	all := []Migration{{Version: 1, Name: "a"}, {Version: 2, Name: "schema_floor"}, {Version: 3, Name: "c"}}
	for _, tc := range []struct {
		name           string
		version, floor int
		want           Verdict
		pending        string
	}{
		{"empty", 0, 0, Behind, "0001_a,0002_schema_floor,0003_c"},
		{"behind", 2, 0, Behind, "0003_c"},
		{"current", 3, 0, Current, ""},
		{"newer, expand only", 5, 0, Newer, ""},
		{"newer, floor within", 5, 3, Newer, ""},
		{"newer, floor above", 5, 4, TooNew, ""},
	} {
		st := StatusOf(all, tc.version, tc.floor)
		if st.Verdict != tc.want || strings.Join(st.Pending, ",") != tc.pending || st.Knows != 3 {
			t.Errorf("%s: %+v, want verdict %s, pending %q, knows 3", tc.name, st, tc.want, tc.pending)
		}
		var tooNew *TooNewError
		if err := st.Err(); (tc.want == TooNew) != errors.As(err, &tooNew) {
			t.Errorf("%s: Err() = %v", tc.name, err)
		}
	}
	msg := StatusOf(all, 5, 4).Err().Error()
	for _, want := range []string{"version 5", "schema 4 or newer", "knows up to 3", "upgrade leasehold"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal %q does not say %q", msg, want)
		}
	}
}
