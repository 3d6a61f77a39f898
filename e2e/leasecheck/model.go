package leasecheck

import (
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// The sequential model: one lease per task (porcupine partitions the
// history by task), judged by the store's clock.
//
// Each op is judged at its own moment of the store's clock: the timestamp
// its answer carries (acquired_at of a grant, renewed_at of a renewal or
// refresh, expires_at minus ttl_remaining_ms of a held answer), or else
// somewhere in [Call, Return], since the store's clock is the machine's
// clock. The model does not demand that these moments rise in the order it
// linearizes the ops: PostgreSQL's now() is a transaction's start, which
// need not follow commit order. What it demands is that each answer be
// explained by the lease as the ops linearized before it left it.
//
// An indeterminate op is pending (Return = MaxInt64, porcupine's way): it
// may take effect at any point after its invocation, or never. Its effect
// is nondeterministic, so the model is a porcupine.NondeterministicModel:
// a pending claim may have refreshed or granted (taking the next token,
// expiry unknown), a pending renew may have extended the lease (expiry
// unknown), a pending release may have ended it.

// slackMs absorbs the rounding of timestamps to milliseconds.
const slackMs = 2

// state is the lease of one task. It is a comparable value.
type state struct {
	Holder string // "" when no lease was granted or the last was released
	Token  int64  // the holder's token; 0 when unknown
	// Exp is the holder's expiry when ExpExact, else a lower bound of it.
	Exp      int64
	ExpExact bool
	// Last is the last token granted when LastExact, else a lower bound
	// (the task may have a past before the history).
	Last      int64
	LastExact bool
}

// window is when, by the store's clock, an op may have taken effect.
type window struct{ lo, hi int64 }

func callWindow(op *Op) window {
	w := window{lo: op.Call/int64(time.Millisecond) - slackMs, hi: math.MaxInt64}
	if op.Return != math.MaxInt64 {
		w.hi = op.Return/int64(time.Millisecond) + 1 + slackMs
	}
	return w
}

func at(t int64) window { return window{lo: t - slackMs, hi: t + slackMs} }

// mayBeLive: the holder's lease may not have expired at some moment of w.
func (s state) mayBeLive(w window) bool {
	return s.Holder != "" && (!s.ExpExact || s.Exp > w.lo)
}

// mayBeOver: there may be no live lease at some moment of w.
func (s state) mayBeOver(w window) bool {
	return s.Holder == "" || s.Exp <= w.hi
}

// mayBeToken: the holder's token may be tok (0: none sent, which matches).
func (s state) mayBeToken(tok int64) bool {
	return tok == 0 || s.Token == 0 || s.Token == tok
}

func (s state) nextToken(tok int64) bool {
	if s.LastExact {
		return tok == s.Last+1
	}
	return tok > s.Last
}

// step returns the states op may leave s in; none when op's answer cannot
// be explained from s.
func step(s state, op *Op) []state {
	if op.Out == Indeterminate {
		return pendingStep(s, op)
	}
	w := callWindow(op)
	l := op.Lease
	switch op.Out {
	case Acquired:
		if l.RenewCount > 0 { // refresh of the owner's live lease
			if s.Holder == op.Owner && s.mayBeToken(l.Token) && s.mayBeLive(at(l.RenewedAt)) {
				s.Token, s.Exp, s.ExpExact = l.Token, l.ExpiresAt, true
				return []state{s}
			}
			return nil
		}
		if s.mayBeOver(at(l.AcquiredAt)) && s.nextToken(l.Token) {
			return []state{{Holder: op.Owner, Token: l.Token, Exp: l.ExpiresAt, ExpExact: true, Last: l.Token, LastExact: true}}
		}
		return nil
	case Held:
		now := l.ExpiresAt - l.TTLRemainingMs
		if s.Holder != l.Owner || s.Holder == op.Owner || !s.mayBeLive(at(now)) {
			return nil
		}
		if s.ExpExact && s.Exp != l.ExpiresAt || !s.ExpExact && l.ExpiresAt < s.Exp-slackMs {
			return nil
		}
		s.Exp, s.ExpExact = l.ExpiresAt, true
		return []state{s}
	case Renewed:
		if s.Holder == op.Owner && s.mayBeToken(l.Token) && (op.Token == 0 || op.Token == l.Token) && s.mayBeLive(at(l.RenewedAt)) {
			s.Token, s.Exp, s.ExpExact = l.Token, l.ExpiresAt, true
			return []state{s}
		}
		return nil
	case Lost:
		// Refused unless the lease is surely the caller's and live.
		if s.Holder == op.Owner && s.Token != 0 && (op.Token == 0 || s.Token == op.Token) && !s.mayBeOver(w) {
			return nil
		}
		return []state{s}
	case Released:
		if s.Holder == op.Owner && s.mayBeToken(op.Token) && s.mayBeLive(w) {
			return []state{{Last: s.Last, LastExact: s.LastExact}}
		}
		return nil
	case NotReleased:
		if s.Holder == op.Owner && s.Token != 0 && (op.Token == 0 || s.Token == op.Token) && !s.mayBeOver(w) {
			return nil
		}
		return []state{s}
	}
	return nil
}

// pendingStep is the nondeterministic effect of an indeterminate op: none,
// or the effect its success would have had at some moment after its call.
func pendingStep(s state, op *Op) []state {
	out := []state{s}
	lower := op.Call/int64(time.Millisecond) + op.TTLMs - slackMs // expiry set at or after the call
	mine := s.Holder == op.Owner && s.mayBeToken(op.Token)
	switch op.Kind {
	case Claim:
		if s.Holder == op.Owner && s.Holder != "" {
			r := s
			r.Exp, r.ExpExact = max(lower, 0), false
			out = append(out, r)
		}
		g := state{Holder: op.Owner, Exp: lower, Last: s.Last + 1, LastExact: s.LastExact}
		if s.LastExact {
			g.Token = g.Last
		}
		out = append(out, g)
	case Renew:
		if mine {
			r := s
			if op.Token != 0 {
				r.Token = op.Token
			}
			r.Exp, r.ExpExact = lower, false
			out = append(out, r)
		}
	case Release:
		if mine {
			out = append(out, state{Last: s.Last, LastExact: s.LastExact})
		}
	}
	return out
}

// linearizable runs porcupine over ops, partitioned by task.
func linearizable(ops []Op, limit time.Duration) porcupine.CheckResult {
	hist := make([]porcupine.Operation, 0, len(ops))
	clients := map[string]int{}
	for i := range ops {
		op := &ops[i]
		id, ok := clients[op.Client]
		if !ok {
			id = len(clients)
			clients[op.Client] = id
		}
		ret := op.Return
		if op.Out == Indeterminate {
			ret = math.MaxInt64
		}
		hist = append(hist, porcupine.Operation{ClientId: id, Input: op, Call: op.Call, Output: op, Return: ret})
	}
	m := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			idx := map[string]int{}
			var parts [][]porcupine.Operation
			for _, o := range h {
				task := o.Input.(*Op).Task
				i, ok := idx[task]
				if !ok {
					i = len(parts)
					idx[task] = i
					parts = append(parts, nil)
				}
				parts[i] = append(parts[i], o)
			}
			return parts
		},
		Init: func() []any { return []any{state{}} },
		Step: func(st, in, _ any) []any {
			next := step(st.(state), in.(*Op))
			res := make([]any, len(next))
			for i, n := range next {
				res[i] = n
			}
			return res
		},
		Equal: func(a, b any) bool { return a.(state) == b.(state) },
	}
	return porcupine.CheckOperationsTimeout(m.ToModel(), hist, limit)
}
