package migration

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []int
		wantErr string
	}{
		{"ordered by number", fstest.MapFS{
			"m/0002_b.sql": {Data: []byte("B")}, "m/0001_a.sql": {Data: []byte("A")}, "m/README": {},
		}, []int{1, 2}, ""},
		{"gap", fstest.MapFS{"m/0001_a.sql": {}, "m/0003_c.sql": {}}, nil, "without gaps"},
		{"repeat", fstest.MapFS{"m/0001_a.sql": {}, "m/1_b.sql": {}}, nil, "without gaps"},
		{"bad name", fstest.MapFS{"m/first.sql": {}}, nil, "NNNN_description"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Load(tt.files, "m")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d migrations, want %d", len(got), len(tt.want))
			}
			for i, v := range tt.want {
				if got[i].Version != v {
					t.Errorf("migration %d has version %d, want %d", i, got[i].Version, v)
				}
			}
			if got[0].SQL != "A" || got[0].Name != "a" {
				t.Errorf("first migration = %+v, want name a and body A", got[0])
			}
			if p := Pending(got, 1); len(p) != 1 || p[0].Version != 2 {
				t.Errorf("Pending(1) = %+v, want only version 2", p)
			}
		})
	}
}
