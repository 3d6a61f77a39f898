package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The job's half of the chaos checker: the lease is only as good as what
// the job under it does. Two records are checked here, both kept outside
// leasehold: the rows a fenced resource accepted (its own table, in commit
// order) beside what each writer attempted, and the moments supervised
// children of `leasehold run` last proved themselves alive beside the
// store's grants.

// FenceAttempt is one write a holder attempted on the fenced resource: a
// transaction that checks the holder's token (fence) and inserts a row.
type FenceAttempt struct {
	Writer string `json:"writer"`
	Task   string `json:"task"`
	Token  int64  `json:"token"`
	Seq    int64  `json:"seq"` // the writer's own count, unique per writer
	// Start is when the transaction began, End when its commit (or its
	// refusal) was answered: the writer's clock, Unix nanoseconds.
	Start int64 `json:"start_ns"`
	End   int64 `json:"end_ns"`
	// Outcome is "accepted" (committed), "stale" (the fence refused the
	// token) or "error" (anything else: whether it committed is unknown).
	Outcome string `json:"outcome"`
	// Highest is the highest token the fence had seen, on a refusal.
	Highest int64 `json:"highest,omitempty"`
}

// FenceRow is a row the resource holds, in the order the resource committed
// them per task (the fence's row lock orders a task's transactions).
type FenceRow struct {
	ID     int64
	Task   string
	Token  int64
	Writer string
	Seq    int64
}

// FenceReport is what CheckFence found.
type FenceReport struct {
	Rows, Accepted, Refused, Errors int
	// LateRefused counts refused writes attempted after a write of a newer
	// token to the same task had been acknowledged: a holder that woke up
	// past its lease and wrote anyway. The run exercised the fence only
	// when it is above zero.
	LateRefused int
	Violations  []string
}

// CheckFence checks the resource's record against the attempts:
//   - per task, the accepted rows' tokens never go down in commit order;
//   - no write attempted after a newer token's write to the task was
//     acknowledged is accepted (it must be refused);
//   - every refusal names a highest token above the refused one, that some
//     accepted write presented (no false refusals);
//   - the resource holds exactly the acknowledged writes, plus possibly
//     some whose outcome was unknown ("error").
func CheckFence(rows []FenceRow, attempts []FenceAttempt) FenceReport {
	var rep FenceReport
	rep.Rows = len(rows)
	type key struct {
		writer string
		seq    int64
	}
	byKey := map[key]FenceAttempt{}
	for _, a := range attempts {
		byKey[key{a.Writer, a.Seq}] = a
		switch a.Outcome {
		case "accepted":
			rep.Accepted++
		case "stale":
			rep.Refused++
		default:
			rep.Errors++
		}
	}
	ordered := append([]FenceRow(nil), rows...)
	sort.SliceStable(ordered, func(i, j int) bool { return ordered[i].ID < ordered[j].ID })
	highest := map[string]int64{}
	inRows := map[key]bool{}
	presented := map[string]map[int64]bool{} // task → tokens of accepted writes
	for _, r := range ordered {
		k := key{r.Writer, r.Seq}
		inRows[k] = true
		a, ok := byKey[k]
		switch {
		case !ok:
			rep.Violations = append(rep.Violations, fmt.Sprintf("row %d (task %q, token %d, writer %s #%d) was never attempted", r.ID, r.Task, r.Token, r.Writer, r.Seq))
		case a.Outcome == "stale":
			rep.Violations = append(rep.Violations, fmt.Sprintf("row %d: writer %s #%d was answered stale, yet its write is in the resource", r.ID, r.Writer, r.Seq))
		}
		if h := highest[r.Task]; r.Token < h {
			rep.Violations = append(rep.Violations, fmt.Sprintf("task %q: row %d has token %d after a row of token %d (writer %s #%d): an older holder's write landed after a newer one's", r.Task, r.ID, r.Token, h, r.Writer, r.Seq))
		} else {
			highest[r.Task] = r.Token
		}
		if presented[r.Task] == nil {
			presented[r.Task] = map[int64]bool{}
		}
		presented[r.Task][r.Token] = true
	}

	// The first acknowledgement of each (task, token): the moment from
	// which every lower token must be refused.
	type ack struct {
		token int64
		end   int64
	}
	acks := map[string][]ack{}
	for _, a := range attempts {
		k := key{a.Writer, a.Seq}
		if a.Outcome == "accepted" {
			if !inRows[k] {
				rep.Violations = append(rep.Violations, fmt.Sprintf("writer %s #%d (task %q, token %d) was acknowledged but the resource does not hold it", a.Writer, a.Seq, a.Task, a.Token))
			}
			acks[a.Task] = append(acks[a.Task], ack{a.Token, a.End})
		}
	}
	newerAckedBefore := func(a FenceAttempt) (int64, bool) {
		for _, x := range acks[a.Task] {
			if x.token > a.Token && x.end < a.Start {
				return x.token, true
			}
		}
		return 0, false
	}
	for _, a := range attempts {
		newer, late := newerAckedBefore(a)
		switch a.Outcome {
		case "accepted":
			if late {
				rep.Violations = append(rep.Violations, fmt.Sprintf("task %q: writer %s #%d with token %d was accepted, though token %d had written before it began", a.Task, a.Writer, a.Seq, a.Token, newer))
			}
		case "stale":
			if late {
				rep.LateRefused++
			}
			if a.Highest <= a.Token || !presented[a.Task][a.Highest] {
				rep.Violations = append(rep.Violations, fmt.Sprintf("task %q: writer %s #%d with token %d was refused naming highest %d, which no accepted write presented", a.Task, a.Writer, a.Seq, a.Token, a.Highest))
			}
		}
	}
	return rep
}

// RunChild is one child of `leasehold run`, seen from outside: its task and
// the fencing token it ran under, the last time it proved itself alive (a
// lower bound of its death: a heartbeat it wrote) and when it was seen dead
// (an upper bound, from a pidfd that polled readable in the observer, which
// is late by however long the observer waited to be scheduled).
type RunChild struct {
	Task  string
	Token int64
	// Alive is the child's last heartbeat, on the wall clock (zero: it
	// wrote none).
	Alive time.Time
	// DiedBy is when the observer saw it dead.
	DiedBy time.Time
	// Lost is whether leasehold run stopped it for a lost lease (exit 70).
	Lost bool
	// Log is what leasehold run printed, shown with a violation.
	Log string
}

// runLog is a child's leasehold run output, for a violation's message.
func runLog(log string) string {
	if log == "" {
		return ""
	}
	return "; leasehold run printed:\n" + log
}

// Grant is a grant of a task, from the store's history: its token and its
// acquired_at on the store's clock.
type Grant struct {
	Task  string
	Token int64
	At    time.Time
}

// RunReport is what CheckRunDeaths found.
type RunReport struct {
	Children, Lost, Followed int
	// LostFollowed counts the children stopped for a lost lease whose task
	// was then granted to another token: the case the bound is for.
	LostFollowed int
	// MinAlive is the smallest time between a child's last heartbeat and
	// the next grant of its task (over the children that had a next grant
	// and wrote a heartbeat), and MinLostAlive the same over the children
	// stopped for a lost lease: a heartbeat after the grant is a violation.
	MinAlive, MinLostAlive time.Duration
	// MinSeenDead is the smallest time between the observer seeing a child
	// dead and the next grant, and SeenLate counts the children seen dead
	// only after it: the observer's lateness bounds these, so they are
	// figures, not violations (a heartbeat is the proof of life).
	MinSeenDead time.Duration
	SeenLate    int
	Violations  []string
}

// storeSlack is how far a grant's recorded instant may stand before the
// true one: SQLite records whole milliseconds, rounded.
const storeSlack = time.Millisecond

// CheckRunDeaths requires every child dead before the store granted its
// task to the next token: no heartbeat of a child may be later than the
// next grant.
func CheckRunDeaths(children []RunChild, grants []Grant) RunReport {
	rep := RunReport{Children: len(children)}
	haveAlive, haveLost, haveSeen := false, false, false
	byTask := map[string][]Grant{}
	for _, g := range grants {
		byTask[g.Task] = append(byTask[g.Task], g)
	}
	for task := range byTask {
		gs := byTask[task]
		sort.Slice(gs, func(i, j int) bool { return gs[i].Token < gs[j].Token })
	}
	for _, c := range children {
		if c.Lost {
			rep.Lost++
		}
		gs := byTask[c.Task]
		i := sort.Search(len(gs), func(i int) bool { return gs[i].Token > c.Token })
		if i == len(gs) {
			continue // the last holder of its task
		}
		rep.Followed++
		next := gs[i]
		if c.Lost {
			rep.LostFollowed++
		}
		if seen := next.At.Sub(c.DiedBy); !haveSeen || seen < rep.MinSeenDead {
			rep.MinSeenDead, haveSeen = seen, true
		}
		if !c.DiedBy.Before(next.At) {
			rep.SeenLate++
		}
		if c.Alive.IsZero() {
			continue
		}
		margin := next.At.Sub(c.Alive)
		if margin < -storeSlack {
			rep.Violations = append(rep.Violations, fmt.Sprintf("task %q: the child under token %d was alive %s after token %d was granted (granted %s, last heartbeat %s, seen dead by %s, lost %v)",
				c.Task, c.Token, -margin, next.Token, next.At.UTC().Format(time.StampMicro), c.Alive.UTC().Format(time.StampMicro), c.DiedBy.UTC().Format(time.StampMicro), c.Lost)+runLog(c.Log))
		}
		if !haveAlive || margin < rep.MinAlive {
			rep.MinAlive, haveAlive = margin, true
		}
		if c.Lost && (!haveLost || margin < rep.MinLostAlive) {
			rep.MinLostAlive, haveLost = margin, true
		}
	}
	return rep
}

// ParseHeartbeats returns the last heartbeat in data: lines of bash's
// $EPOCHREALTIME (seconds, a decimal point or comma, microseconds). A line
// cut short by the kill is ignored; zero when there is none.
func ParseHeartbeats(data string) time.Time {
	var last time.Time
	for line := range strings.Lines(data) {
		line = strings.TrimSpace(line)
		sec, frac, ok := strings.Cut(strings.ReplaceAll(line, ",", "."), ".")
		if !ok || len(frac) != 6 {
			continue
		}
		s, err1 := strconv.ParseInt(sec, 10, 64)
		us, err2 := strconv.ParseInt(frac, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if t := time.Unix(s, us*1000); t.After(last) {
			last = t
		}
	}
	return last
}
