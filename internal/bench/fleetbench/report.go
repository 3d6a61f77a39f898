package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/internal/bench/benchproc"
)

// results gathers every run's points.
type results struct {
	cfg   config
	fleet map[string][]point // by key(route, n, mode)
	raw   map[int][]point    // by connections
}

func newResults(cfg config) *results {
	return &results{cfg: cfg, fleet: map[string][]point{}, raw: map[int][]point{}}
}

func key(route string, n int, mode string) string { return fmt.Sprintf("%s/%d/%s", route, n, mode) }

func (r *results) add(route string, n int, mode string, p point) {
	k := key(route, n, mode)
	r.fleet[k] = append(r.fleet[k], p)
}

func (r *results) addRaw(conns int, p point) { r.raw[conns] = append(r.raw[conns], p) }

func (r *results) failures() int {
	n := 0
	for _, m := range []map[string][]point{r.fleet, {"raw": r.rawPoints()}} {
		for _, ps := range m {
			for _, p := range ps {
				if p.failed != "" {
					n++
				}
			}
		}
	}
	return n
}

func (r *results) rawPoints() []point {
	var out []point
	for _, ps := range r.raw {
		out = append(out, ps...)
	}
	return out
}

// cell is a median over runs; ok is false when there is no point or the
// figure was not measured; failed when any run of the point failed (a
// failed run is not averaged away).
type cell struct {
	v      float64
	ok     bool
	failed bool
}

func medianOf(ps []point, f func(point) (float64, bool)) cell {
	if len(ps) == 0 {
		return cell{}
	}
	vs := make([]float64, 0, len(ps))
	for _, p := range ps {
		if p.failed != "" {
			return cell{failed: true}
		}
		v, ok := f(p)
		if !ok {
			return cell{}
		}
		vs = append(vs, v)
	}
	return cell{v: benchproc.Median(vs), ok: true}
}

func ratio(num, den cell) cell {
	return cell{v: num.v / den.v, ok: num.ok && den.ok && den.v > 0, failed: num.failed || den.failed}
}

func (c cell) format(f func(float64) string) string {
	switch {
	case c.failed:
		return "FAILED"
	case !c.ok:
		return "n/a"
	}
	return f(c.v)
}

// The figures of a fleet point.
var (
	rateOf     = func(p point) (float64, bool) { return p.rate(), p.seconds > 0 }
	p50Of      = func(p point) (float64, bool) { return p.p50US / 1e3, p.grants > 0 }
	p99Of      = func(p point) (float64, bool) { return p.p99US / 1e3, p.grants > 0 }
	renewalsOf = func(p point) (float64, bool) { return float64(p.renewals) / p.seconds, p.seconds > 0 }
	pgCPUOf    = func(p point) (float64, bool) { return perGrantUS(p.pgCPU, p.grants), p.pgMeasured && p.grants > 0 }
	scCPUOf    = func(p point) (float64, bool) { return perGrantUS(p.sidecarsCPU, p.grants), p.grants > 0 }
	bncCPUOf   = func(p point) (float64, bool) { return perGrantUS(p.bouncerCPU, p.grants), p.bouncer && p.grants > 0 }
	connsOf    = func(p point) (float64, bool) { return float64(p.serverConns), true }
)

// over is a figure over the sidecars of a point: agg (median or max) of
// what field picks, times scale.
func over(field func(point) []float64, agg func([]float64) float64, scale float64) func(point) (float64, bool) {
	return func(p point) (float64, bool) {
		vs := field(p)
		if len(vs) == 0 {
			return 0, false
		}
		return agg(vs) * scale, true
	}
}

func maxOf(vs []float64) float64 { return slices.Max(vs) }

// tables is the report: the target's ratios, a table per route with a row
// per fleet size and mode, and the raw baseline.
func (r *results) tables() string {
	var sb strings.Builder
	cfg := r.cfg

	// The target first: the fleet with watchers against the floor, per N;
	// then the old trigger against it, and what delivering the events to
	// the watchers costs (floor against nobody watching).
	sb.WriteString("| new grants/s ratio |")
	for _, n := range cfg.fleet {
		fmt.Fprintf(&sb, " %d sidecars |", n)
	}
	sb.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(cfg.fleet)) + "\n")
	for _, route := range cfg.routes {
		for _, q := range ratioRows {
			if !slices.Contains(cfg.modes, q.mode) || !slices.Contains(cfg.modes, q.base) {
				continue
			}
			fmt.Fprintf(&sb, "| %s: %s / %s |", route, q.mode, q.base)
			for _, n := range cfg.fleet {
				c := ratio(medianOf(r.fleet[key(route, n, q.mode)], rateOf), medianOf(r.fleet[key(route, n, q.base)], rateOf))
				sb.WriteString(" " + c.format(times) + " |")
			}
			sb.WriteString("\n")
		}
	}

	cols := []struct {
		head string
		f    func(point) (float64, bool)
		fmt  func(float64) string
	}{
		{"new grants/s", rateOf, benchproc.Grouped},
		{"p50 ms", p50Of, benchproc.TwoPlaces},
		{"p99 ms", p99Of, benchproc.TwoPlaces},
		{"renewals/s", renewalsOf, benchproc.Grouped},
		{"PG CPU µs/grant", pgCPUOf, benchproc.OneOrNone},
		{"sidecars CPU µs/grant", scCPUOf, benchproc.OneOrNone},
		{"PgBouncer CPU µs/grant", bncCPUOf, benchproc.OneOrNone},
		{"server conns (max)", connsOf, benchproc.Grouped},
	}
	pairs := []struct {
		head  string
		field func(point) []float64
		scale float64
	}{
		{"sidecar RSS MB idle (med/max)", func(p point) []float64 { return p.idleRSS }, 1},
		{"sidecar CPU % idle (med/max)", func(p point) []float64 { return p.idleCPU }, 100},
		{"sidecar RSS MB load (med/max)", func(p point) []float64 { return p.loadRSS }, 1},
		{"sidecar CPU % load (med/max)", func(p point) []float64 { return p.loadCPU }, 100},
	}
	for _, route := range cfg.routes {
		fmt.Fprintf(&sb, "\n| %s: sidecars | notification | / none |", route)
		for _, c := range cols {
			sb.WriteString(" " + c.head + " |")
		}
		for _, q := range pairs {
			sb.WriteString(" " + q.head + " |")
		}
		sb.WriteString("\n| ---: | --- |" + strings.Repeat(" ---: |", 1+len(cols)+len(pairs)) + "\n")
		for _, n := range cfg.fleet {
			for _, mode := range cfg.modes {
				ps := r.fleet[key(route, n, mode)]
				rel := "—"
				if mode != "none" && slices.Contains(cfg.modes, "none") {
					rel = ratio(medianOf(ps, rateOf), medianOf(r.fleet[key(route, n, "none")], rateOf)).format(times)
				}
				fmt.Fprintf(&sb, "| %d | %s | %s |", n, mode, rel)
				for _, c := range cols {
					sb.WriteString(" " + medianOf(ps, c.f).format(c.fmt) + " |")
				}
				for _, q := range pairs {
					med := medianOf(ps, over(q.field, benchproc.Median, q.scale))
					top := medianOf(ps, over(q.field, maxOf, q.scale))
					if med.ok && top.ok {
						fmt.Fprintf(&sb, " %s / %s |", benchproc.OneOrNone(med.v), benchproc.OneOrNone(top.v))
					} else {
						sb.WriteString(" " + med.format(benchproc.OneOrNone) + " |")
					}
				}
				sb.WriteString("\n")
			}
		}
	}

	if len(cfg.raw) > 0 {
		sb.WriteString("\n| raw lone claim statement, no trigger |")
		for _, c := range cfg.raw {
			fmt.Fprintf(&sb, " %d conns |", c)
		}
		sb.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(cfg.raw)) + "\n")
		for _, row := range []struct {
			label string
			f     func(point) (float64, bool)
			fmt   func(float64) string
		}{{"new grants/s", rateOf, benchproc.Grouped}, {"PG CPU µs/grant", pgCPUOf, benchproc.OneOrNone}} {
			sb.WriteString("| " + row.label + " |")
			for _, c := range cfg.raw {
				sb.WriteString(" " + medianOf(r.raw[c], row.f).format(row.fmt) + " |")
			}
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

func times(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "×" }

// ratioRows are the ratios of the report's first table, each a mode's new
// grants/s over a base mode's at the same fleet size.
var ratioRows = []struct{ mode, base string }{
	{"watch", "floor"},   // the target: ≥ 0.95
	{"trigger", "floor"}, // what migration 0004's NOTIFY cost
	{"floor", "none"},    // what delivering every event to the watchers costs
	{"watch", "none"},
	{"trigger", "none"},
}
