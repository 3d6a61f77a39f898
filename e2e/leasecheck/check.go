package leasecheck

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Rule names a safety rule (see the package doc).
type Rule string

// The rules.
const (
	RuleTokens      Rule = "a:tokens-rise"
	RuleExclusion   Rule = "b:no-overlap"
	RuleLateRenewal Rule = "c:no-renewal-after-later-grant"
)

// Violation is one breach of a rule, with the ops that show it.
type Violation struct {
	Rule   Rule
	Task   string
	Detail string
	Ops    []Op
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s: %s", v.Rule, v.Task, v.Detail)
	for i := range v.Ops {
		fmt.Fprintf(&b, "\n    %s", v.Ops[i].String())
	}
	return b.String()
}

// Report is what Check found.
type Report struct {
	Ops   int
	Tasks int
	// Confirmed outcomes.
	Grants, Refreshes, Held, Renewals, Lost, Releases, NotReleased int
	// Indeterminate ops, in all and per kind.
	Indeterminate       int
	IndeterminateByKind map[Kind]int

	Violations []Violation

	// Linearizable is porcupine's verdict on the history: Ok, Illegal, or
	// Unknown when the search did not end within the timeout.
	Linearizable   porcupine.CheckResult
	LinearizeTook  time.Duration
	LinearizeLimit time.Duration
}

// ViolationsByRule counts the violations of each rule.
func (r Report) ViolationsByRule() map[Rule]int {
	m := map[Rule]int{}
	for _, v := range r.Violations {
		m[v.Rule]++
	}
	return m
}

// Summary is the report on a few lines, for a test log.
func (r Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ops %d on %d tasks: grants %d, refreshes %d, held %d, renewals %d, lost %d, releases %d (+%d released:false), indeterminate %d (claim %d, renew %d, release %d)\n",
		r.Ops, r.Tasks, r.Grants, r.Refreshes, r.Held, r.Renewals, r.Lost, r.Releases, r.NotReleased,
		r.Indeterminate, r.IndeterminateByKind[Claim], r.IndeterminateByKind[Renew], r.IndeterminateByKind[Release])
	by := r.ViolationsByRule()
	fmt.Fprintf(&b, "violations %d (%s %d, %s %d, %s %d); porcupine linearizability: %s in %s (limit %s)",
		len(r.Violations), RuleTokens, by[RuleTokens], RuleExclusion, by[RuleExclusion], RuleLateRenewal, by[RuleLateRenewal],
		r.Linearizable, r.LinearizeTook.Round(time.Millisecond), r.LinearizeLimit)
	return b.String()
}

// Check checks a history (in any order) against the rules and, within
// linearizeLimit, against the sequential model of a lease.
func Check(ops []Op, linearizeLimit time.Duration) Report {
	r := Report{Ops: len(ops), IndeterminateByKind: map[Kind]int{}, LinearizeLimit: linearizeLimit}
	byTask := map[string][]*Op{}
	for i := range ops {
		op := &ops[i]
		byTask[op.Task] = append(byTask[op.Task], op)
		switch {
		case op.Out == Indeterminate:
			r.Indeterminate++
			r.IndeterminateByKind[op.Kind]++
		case op.grant():
			r.Grants++
		case op.Out == Acquired:
			r.Refreshes++
		case op.Out == Held:
			r.Held++
		case op.Out == Renewed:
			r.Renewals++
		case op.Out == Lost:
			r.Lost++
		case op.Out == Released:
			r.Releases++
		case op.Out == NotReleased:
			r.NotReleased++
		}
	}
	r.Tasks = len(byTask)
	tasks := make([]string, 0, len(byTask))
	for t := range byTask {
		tasks = append(tasks, t)
	}
	sort.Strings(tasks)
	for _, t := range tasks {
		r.Violations = append(r.Violations, checkTask(t, byTask[t])...)
	}
	start := time.Now()
	r.Linearizable = linearizable(ops, linearizeLimit)
	r.LinearizeTook = time.Since(start)
	return r
}

// checkTask applies the three rules to one task's ops.
func checkTask(task string, ops []*Op) []Violation {
	var vs []Violation
	add := func(rule Rule, detail string, involved ...*Op) {
		v := Violation{Rule: rule, Task: task, Detail: detail}
		for _, op := range involved {
			v.Ops = append(v.Ops, *op)
		}
		vs = append(vs, v)
	}

	var grants, extensions, releases, pending []*Op
	for _, op := range ops {
		switch {
		case op.grant():
			grants = append(grants, op)
		case op.extension():
			extensions = append(extensions, op)
		case op.Kind == Release && (op.Out == Released || op.Out == Indeterminate):
			releases = append(releases, op)
		case op.Out == Indeterminate && (op.Kind == Claim || op.Kind == Renew):
			pending = append(pending, op)
		}
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].Lease.Token < grants[j].Lease.Token })

	// a: one grant per token, and tokens rise with real time and with the
	// store's clock.
	for i := 1; i < len(grants); i++ {
		if p, g := grants[i-1], grants[i]; p.Lease.Token == g.Lease.Token {
			add(RuleTokens, fmt.Sprintf("token %d granted twice (to %s and to %s)", g.Lease.Token, p.Lease.Owner, g.Lease.Owner), p, g)
		}
	}
	for _, g1 := range grants {
		for _, g2 := range grants {
			if g1.Lease.Token <= g2.Lease.Token {
				continue
			}
			// g1 has the larger token.
			switch {
			case g1.Return < g2.Call:
				add(RuleTokens, fmt.Sprintf("token %d was answered before token %d was invoked", g1.Lease.Token, g2.Lease.Token), g1, g2)
			case g1.Lease.AcquiredAt < g2.Lease.AcquiredAt:
				add(RuleTokens, fmt.Sprintf("token %d was acquired at %d by the store's clock, before token %d at %d",
					g1.Lease.Token, g1.Lease.AcquiredAt, g2.Lease.Token, g2.Lease.AcquiredAt), g1, g2)
			}
		}
	}

	// The answers that confirmed each grant's expiry: its claim, refreshes
	// and renewals.
	confirms := map[int64][]*Op{}
	for _, op := range grants {
		confirms[op.Lease.Token] = append(confirms[op.Lease.Token], op)
	}
	for _, op := range extensions {
		confirms[op.Lease.Token] = append(confirms[op.Lease.Token], op)
	}
	// reach is the latest expiry any confirmation gave each token. Rule b's
	// bound is never later than it, so a grant acquired at or after it
	// cannot overlap that token: skipping those pairs changes no verdict,
	// and keeps the rule from costing grants² × (releases + pending) per
	// task, which a 10-minute run cannot afford.
	reach := map[int64]int64{}
	for tok, cs := range confirms {
		for _, c := range cs {
			reach[tok] = max(reach[tok], c.Lease.ExpiresAt)
		}
	}

	// b: a grant starts no earlier than the expiry that the last
	// confirmation by then (by the store's clock: a confirmation later than
	// the grant is rule c's) gave each earlier grant, unless that grant may
	// have been released first. The last, not the largest: a same-owner
	// claim with a shorter ttl moves the expiry closer. And the earliest
	// of the expiries that may have been the last one (see bound).
	for _, g := range grants {
		for tok, cs := range confirms {
			if tok >= g.Lease.Token || g.Lease.AcquiredAt >= reach[tok] {
				continue
			}
			var last *Op
			for _, c := range cs {
				if c.Lease.RenewedAt <= g.Lease.AcquiredAt && (last == nil || later(c, last)) {
					last = c
				}
			}
			if last == nil || releasedBefore(releases, tok, last, g) {
				continue
			}
			exp, by := bound(cs, pending, tok, last, g)
			if g.Lease.AcquiredAt >= exp {
				continue
			}
			involved := []*Op{last}
			if by != last {
				involved = append(involved, by)
			}
			add(RuleExclusion, fmt.Sprintf("token %d acquired at %d, while token %d of %s was confirmed until at least %d (%d ms later) and not released",
				g.Lease.Token, g.Lease.AcquiredAt, tok, last.Lease.Owner, exp, exp-g.Lease.AcquiredAt), append(involved, g)...)
		}
	}

	// c: no renewal of token k after a grant of a larger token.
	for _, e := range extensions {
		for _, g := range grants {
			if g.Lease.Token <= e.Lease.Token {
				continue
			}
			switch {
			case g.Return < e.Call:
				add(RuleLateRenewal, fmt.Sprintf("token %d renewed by a call invoked after token %d was answered", e.Lease.Token, g.Lease.Token), g, e)
			case e.Lease.RenewedAt > g.Lease.AcquiredAt:
				add(RuleLateRenewal, fmt.Sprintf("token %d renewed at %d by the store's clock, after token %d was acquired at %d",
					e.Lease.Token, e.Lease.RenewedAt, g.Lease.Token, g.Lease.AcquiredAt), g, e)
			}
		}
	}
	return vs
}

// bound is the earliest expiry that token tok may have had when g was
// granted, given that last is its last confirmation by then, and the op that
// set it. It is last's expiry, or less when
//   - another confirmation at last's moment of the store's clock (they may
//     have been applied in either order: PostgreSQL's now() is a
//     statement's start) gave a nearer one, or
//   - an indeterminate claim, or renew of tok, by the holder that was
//     invoked before g was answered may have taken effect after last, and
//     set an expiry of at least its ttl from the later of its invocation and
//     last's renewed_at (a lease's times never go backwards: PostgreSQL
//     writes them no earlier than the row's, see leasecore/postgres's doc,
//     and SQLite reads its clock under the file's write lock). Nothing
//     bounds when an indeterminate op takes effect, so one invoked before
//     last counts as well: a frozen sidecar may apply it late.
func bound(cs, pending []*Op, tok int64, last, g *Op) (int64, *Op) {
	exp, by := last.Lease.ExpiresAt, last
	for _, c := range cs {
		if c.Lease.RenewedAt == last.Lease.RenewedAt && c.Lease.ExpiresAt < exp {
			exp, by = c.Lease.ExpiresAt, c
		}
	}
	for _, p := range pending {
		if p.Owner != last.Lease.Owner || p.Call >= g.Return || p.Kind == Renew && p.Token != 0 && p.Token != tok {
			continue
		}
		if e := max(p.Call/int64(time.Millisecond), last.Lease.RenewedAt) + p.TTLMs - slackMs; e < exp {
			exp, by = e, p
		}
	}
	return exp, by
}

// releasedBefore reports whether a release of token tok that was answered
// released:true, or whose answer was lost, by the holder, may have ended
// tok's lease after last (its last confirmation before g) and before g was
// answered. A release that sent tok counts if invoked before g's answer. One
// that sent no token may have ended another lease of the holder's: an
// answered one counts only if it was not over before last was invoked; one
// whose answer was lost may take effect at any time after its call, so it
// counts as one with the token does.
func releasedBefore(releases []*Op, tok int64, last, g *Op) bool {
	for _, rel := range releases {
		if rel.Owner != last.Lease.Owner || rel.Call >= g.Return {
			continue
		}
		switch {
		case rel.Token == tok, rel.Token == 0 && (rel.Out == Indeterminate || rel.Return > last.Call):
			return true
		}
	}
	return false
}

// later orders two confirmations of one grant: by the store's clock, then
// by when their answers came.
func later(a, b *Op) bool {
	if a.Lease.RenewedAt != b.Lease.RenewedAt {
		return a.Lease.RenewedAt > b.Lease.RenewedAt
	}
	return a.Return > b.Return
}
