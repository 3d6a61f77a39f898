package benchproc

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/leasecore/postgres"
)

// The raw baseline sends the driver's own lone-claim statement: a grant
// with its history row, decided by the conflict clause.
func TestClaimStatement(t *testing.T) {
	t.Parallel()
	sql := postgres.LoneClaimSQL()
	for _, want := range []string{"INSERT INTO leasehold_leases", "ON CONFLICT (task) DO UPDATE", "INSERT INTO leasehold_history", "$1", "$5"} {
		if !strings.Contains(sql, want) {
			t.Errorf("claimSQL lacks %q:\n%s", want, sql)
		}
	}
}

func TestParseLoad(t *testing.T) {
	t.Parallel()
	lr, err := ParseLoad([]byte("{\"ops\":10,\"errors\":1,\"seconds\":2.5,\"keys\":10,\"error\":\"boom\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (LoadResult{Ops: 10, Errors: 1, Seconds: 2.5, Keys: 10, Error: "boom"}); lr != want {
		t.Errorf("ParseLoad = %+v, want %+v", lr, want)
	}
	if _, err := ParseLoad([]byte("panic: oops\n")); err == nil {
		t.Error("a crash's output parsed as a result")
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{0: "0", 999.4: "999", 1000: "1,000", 54425.6: "54,426", 1234567: "1,234,567", -4321: "-4,321"} {
		if got := Grouped(v); got != want {
			t.Errorf("Grouped(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]string{0: "0.0", 12.34: "12.3", 99.94: "99.9", 100: "100", 1234.6: "1,235"} {
		if got := OneOrNone(v); got != want {
			t.Errorf("OneOrNone(%v) = %q, want %q", v, got, want)
		}
	}
	if got := TwoPlaces(1.005); got != "1.00" && got != "1.01" {
		t.Errorf("TwoPlaces(1.005) = %q", got)
	}
	vs := []float64{5, 1, 3}
	if got := Median(vs); got != 3 || vs[0] != 5 {
		t.Errorf("Median(5 1 3) = %v (input now %v), want 3 and the input unchanged", got, vs)
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("Median(4 1 3 2) = %v, want 2.5", got)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("Median() = %v, want 0", got)
	}
}
