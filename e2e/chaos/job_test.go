package chaos

import (
	"strings"
	"testing"
	"time"
)

// A fenced run as it should be: holder a (token 1) writes, b (token 2)
// takes over and writes, a wakes up and is refused.
func fencedRun() ([]FenceRow, []FenceAttempt) {
	attempts := []FenceAttempt{
		{Writer: "a", Task: "t", Token: 1, Seq: 1, Start: 10, End: 20, Outcome: "accepted"},
		{Writer: "b", Task: "t", Token: 2, Seq: 1, Start: 30, End: 40, Outcome: "accepted"},
		{Writer: "a", Task: "t", Token: 1, Seq: 2, Start: 50, End: 60, Outcome: "stale", Highest: 2},
	}
	rows := []FenceRow{{ID: 1, Task: "t", Token: 1, Writer: "a", Seq: 1}, {ID: 2, Task: "t", Token: 2, Writer: "b", Seq: 1}}
	return rows, attempts
}

func TestCheckFence(t *testing.T) {
	rows, attempts := fencedRun()
	rep := CheckFence(rows, attempts)
	if len(rep.Violations) != 0 || rep.LateRefused != 1 || rep.Accepted != 2 || rep.Refused != 1 {
		t.Fatalf("a correct run: %+v", rep)
	}
}

// The mutants the checker must catch: the fence switched off (the late
// write lands), a false refusal, a lost acknowledged write.
func TestCheckFenceMutants(t *testing.T) {
	cases := map[string]struct {
		mutate func([]FenceRow, []FenceAttempt) ([]FenceRow, []FenceAttempt)
		want   string
	}{
		"no fence: the late write lands": {func(r []FenceRow, a []FenceAttempt) ([]FenceRow, []FenceAttempt) {
			a[2].Outcome, a[2].Highest = "accepted", 0
			return append(r, FenceRow{ID: 3, Task: "t", Token: 1, Writer: "a", Seq: 2}), a
		}, "older holder's write landed after a newer one's"},
		"accepted late, even if not stored last": {func(r []FenceRow, a []FenceAttempt) ([]FenceRow, []FenceAttempt) {
			a[2].Outcome, a[2].Highest = "accepted", 0
			return []FenceRow{r[0], {ID: 2, Task: "t", Token: 1, Writer: "a", Seq: 2}, {ID: 3, Task: "t", Token: 2, Writer: "b", Seq: 1}}, a
		}, "though token 2 had written before it began"},
		"a refusal no newer token explains": {func(r []FenceRow, a []FenceAttempt) ([]FenceRow, []FenceAttempt) {
			a[2].Highest = 7
			return r, a
		}, "which no accepted write presented"},
		"an acknowledged write lost": {func(r []FenceRow, a []FenceAttempt) ([]FenceRow, []FenceAttempt) {
			return r[:1], a
		}, "does not hold it"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			rows, attempts := c.mutate(fencedRun())
			rep := CheckFence(rows, attempts)
			if !strings.Contains(strings.Join(rep.Violations, "\n"), c.want) {
				t.Errorf("violations %q, want one saying %q", rep.Violations, c.want)
			}
		})
	}
}

func TestCheckRunDeaths(t *testing.T) {
	at := time.Unix(1000, 0)
	grants := []Grant{{Task: "t", Token: 1, At: at}, {Task: "t", Token: 2, At: at.Add(time.Second)}, {Task: "u", Token: 1, At: at}}
	children := []RunChild{
		{Task: "t", Token: 1, Alive: at.Add(900 * time.Millisecond), DiedBy: at.Add(950 * time.Millisecond), Lost: true},
		{Task: "t", Token: 2, Alive: at.Add(5 * time.Second), DiedBy: at.Add(5 * time.Second)}, // the last holder
		{Task: "u", Token: 1, Alive: at.Add(time.Hour), DiedBy: at.Add(time.Hour)},
	}
	rep := CheckRunDeaths(children, grants)
	if len(rep.Violations) != 0 || rep.Followed != 1 || rep.Lost != 1 || rep.LostFollowed != 1 || rep.MinLostAlive != 100*time.Millisecond || rep.MinSeenDead != 50*time.Millisecond || rep.SeenLate != 0 {
		t.Fatalf("a correct run: %+v", rep)
	}
	// An observer that saw the death late is no proof of life.
	children[0].DiedBy = at.Add(1300 * time.Millisecond)
	if rep := CheckRunDeaths(children, grants); len(rep.Violations) != 0 || rep.SeenLate != 1 || rep.MinSeenDead != -300*time.Millisecond {
		t.Fatalf("seen dead late, last heartbeat in time: %+v", rep)
	}
	// Within the store's rounding of its instant: no violation.
	children[0].Alive = at.Add(time.Second + 500*time.Microsecond)
	if rep := CheckRunDeaths(children, grants); len(rep.Violations) != 0 {
		t.Fatalf("a heartbeat within the store's rounding: %+v", rep)
	}
	// The mutant: the child outlived its lease.
	children[0].Alive = at.Add(1100 * time.Millisecond)
	if rep := CheckRunDeaths(children, grants); len(rep.Violations) != 1 || !strings.Contains(rep.Violations[0], "alive 100ms after token 2") || rep.MinAlive != -100*time.Millisecond {
		t.Fatalf("a child alive after the next grant: %+v", rep)
	}
	// A child that wrote no heartbeat proves nothing either way.
	children[0].Alive = time.Time{}
	if rep := CheckRunDeaths(children, grants); len(rep.Violations) != 0 || rep.Followed != 1 {
		t.Fatalf("no heartbeat: %+v", rep)
	}
}

func TestParseHeartbeats(t *testing.T) {
	got := ParseHeartbeats("1000.000001\n1000,250000\n999.900000\n1000.5")
	if want := time.Unix(1000, 250000*1000); !got.Equal(want) {
		t.Errorf("last heartbeat %v, want %v (a comma is a decimal point; a cut line is ignored)", got, want)
	}
	if !ParseHeartbeats("").IsZero() || !ParseHeartbeats("12\n").IsZero() {
		t.Error("no heartbeat must be zero")
	}
}
