package main

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/internal/bench/benchproc"
)

// results gathers every run's points by system key and client count.
type results struct {
	clients []int
	systems []system
	points  map[string]map[int][]point
}

func newResults(clients []int, systems []system) *results {
	return &results{clients: clients, systems: systems, points: map[string]map[int][]point{}}
}

func (r *results) add(key string, clients int, p point) {
	if r.points[key] == nil {
		r.points[key] = map[int][]point{}
	}
	r.points[key][clients] = append(r.points[key][clients], p)
}

func (r *results) failures() int {
	n := 0
	for _, byClients := range r.points {
		for _, ps := range byClients {
			for _, p := range ps {
				if p.failed != "" {
					n++
				}
			}
		}
	}
	return n
}

// cell is a median over runs; ok is false when there is no point, when
// any run of it failed (a failed run is not averaged away: failed says so)
// or when the figure was not measured.
type cell struct {
	v      float64
	ok     bool
	failed bool
}

// median of f over the runs of key at clients.
func (r *results) median(key string, clients int, f func(point) (float64, bool)) cell {
	ps := r.points[key][clients]
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

func rate(p point) (float64, bool) { return p.rate(), p.seconds > 0 }

func serverCPU(p point) (float64, bool) { return perOpUS(p.serverCPU, p.ops), p.ops > 0 }

func pgCPU(p point) (float64, bool) { return perOpUS(p.pgCPU, p.ops), p.pgMeasured && p.ops > 0 }

// p50 and p99 are a point's claim latency percentiles in ms, as its client
// saw them (wrk's, or the raw load's over every op).
func p50(p point) (float64, bool) { return p.p50US / 1e3, p.p50US > 0 }

func p99(p point) (float64, bool) { return p.p99US / 1e3, p.p99US > 0 }

// table is the report: ops/s per system, their ratios, and CPU per op, as
// a markdown table with a column per client count.
func (r *results) table() string {
	var sb strings.Builder
	sb.WriteString("| ops/s |")
	for _, c := range r.clients {
		if c == 1 {
			sb.WriteString(" 1 client |")
		} else {
			fmt.Fprintf(&sb, " %d clients |", c)
		}
	}
	sb.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(r.clients)) + "\n")
	row := func(label string, cells func(c int) string) {
		sb.WriteString("| " + label + " |")
		for _, c := range r.clients {
			sb.WriteString(" " + cells(c) + " |")
		}
		sb.WriteString("\n")
	}
	rates := func(key string) func(int) string {
		return func(c int) string { return formatCell(r.median(key, c, rate), "%s", benchproc.Grouped) }
	}
	for _, s := range r.systems {
		row(s.label, rates(s.key))
	}
	ratios := []struct{ label, num, den string }{
		{"sidecar PG / raw pgx", "pg", "raw"},
		{"sidecar PG / etcd", "pg", "etcd"},
		{"sidecar SQLite / raw pgx", "sqlite", "raw"},
		{"sidecar SQLite / etcd", "sqlite", "etcd"},
		{"sidecar PG / HTTP floor", "pg", "floor"},
	}
	if r.has("pg-before") {
		ratios = append(ratios,
			struct{ label, num, den string }{"sidecar PG / its -before build", "pg", "pg-before"},
			struct{ label, num, den string }{"sidecar SQLite / its -before build", "sqlite", "sqlite-before"})
	}
	for _, q := range ratios {
		row(q.label, func(c int) string {
			num, den := r.median(q.num, c, rate), r.median(q.den, c, rate)
			ratio := cell{v: num.v / den.v, ok: num.ok && den.ok && den.v > 0, failed: num.failed || den.failed}
			return formatCell(ratio, "%s×", benchproc.TwoPlaces)
		})
	}
	latencies := []struct {
		label, key string
		f          func(point) (float64, bool)
	}{
		{"p50 ms: sidecar on PostgreSQL", "pg", p50},
		{"p50 ms: raw pgx", "raw", p50},
		{"p99 ms: sidecar on PostgreSQL", "pg", p99},
		{"p99 ms: raw pgx", "raw", p99},
		{"p99 ms: sidecar on SQLite", "sqlite", p99},
	}
	for _, q := range latencies {
		row(q.label, func(c int) string { return formatCell(r.median(q.key, c, q.f), "%s", benchproc.TwoPlaces) })
	}
	cpus := []struct {
		label, key string
		f          func(point) (float64, bool)
	}{
		{"CPU µs/claim: sidecar on PostgreSQL", "pg", serverCPU},
		{"CPU µs/claim: PostgreSQL under the sidecar", "pg", pgCPU},
		{"CPU µs/claim: PostgreSQL under raw pgx", "raw", pgCPU},
		{"CPU µs/claim: sidecar on SQLite", "sqlite", serverCPU},
		{"CPU µs/claim: -before sidecar on PostgreSQL", "pg-before", serverCPU},
		{"CPU µs/claim: -before sidecar on SQLite", "sqlite-before", serverCPU},
		{"CPU µs/op: etcd server", "etcd", serverCPU},
		{"CPU µs/request: HTTP floor server", "floor", serverCPU},
	}
	for _, q := range cpus {
		if !r.has(q.key) {
			continue
		}
		row(q.label, func(c int) string { return formatCell(r.median(q.key, c, q.f), "%s", benchproc.OneOrNone) })
	}
	return sb.String()
}

// has says whether the run measures the system key.
func (r *results) has(key string) bool {
	for _, s := range r.systems {
		if s.key == key {
			return true
		}
	}
	return false
}

func formatCell(c cell, layout string, format func(float64) string) string {
	switch {
	case c.failed:
		return "failed"
	case !c.ok:
		return "n/a"
	}
	return fmt.Sprintf(layout, format(c.v))
}
