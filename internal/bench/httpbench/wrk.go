package main

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

//go:embed claim.lua
var claimScript []byte

// wrkResult is wrk's summary as claim.lua's done() prints it.
type wrkResult struct {
	Requests   int64 // answered requests, whatever their status
	DurationUS int64
	Status     int64 // answers with a status above 399
	Connect    int64
	Read       int64
	Write      int64
	Timeout    int64
	P50US      int64
	P99US      int64
}

// errorCount is every request that did not get a 2xx or 3xx answer.
func (r wrkResult) errorCount() int64 {
	return r.Status + r.Connect + r.Read + r.Write + r.Timeout
}

// parseWrk finds claim.lua's "wrk-result k=v ..." line in wrk's output.
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	for line := range strings.SplitSeq(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "wrk-result ")
		if !ok {
			continue
		}
		fields := map[string]*int64{
			"requests": &r.Requests, "duration_us": &r.DurationUS, "status": &r.Status,
			"connect": &r.Connect, "read": &r.Read, "write": &r.Write, "timeout": &r.Timeout,
			"p50_us": &r.P50US, "p99_us": &r.P99US,
		}
		for kv := range strings.FieldsSeq(rest) {
			k, v, ok := strings.Cut(kv, "=")
			dst := fields[k]
			if !ok || dst == nil {
				return r, fmt.Errorf("wrk result: unexpected field %q", kv)
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return r, fmt.Errorf("wrk result: %s: %w", k, err)
			}
			*dst = n
			delete(fields, k)
		}
		if len(fields) > 0 {
			missing := make([]string, 0, len(fields))
			for k := range fields {
				missing = append(missing, k)
			}
			return r, fmt.Errorf("wrk result: missing %s", strings.Join(missing, ", "))
		}
		if r.DurationUS <= 0 {
			return r, errors.New("wrk result: duration_us must be positive")
		}
		return r, nil
	}
	return r, errors.New("wrk printed no wrk-result line (is claim.lua's done() running?)")
}

// wrkThreads is how many threads wrk runs for clients connections: at most
// limit, and a divisor of clients so that every thread has as many
// connections (wrk gives each thread connections/threads).
func wrkThreads(clients, limit int) int {
	for t := min(clients, max(limit, 1)); t > 1; t-- {
		if clients%t == 0 {
			return t
		}
	}
	return 1
}

// runWrk loads base with claim.lua for d at clients connections.
func runWrk(cfg config, dir, base string, clients int, prefix string) (wrkResult, error) {
	script := filepath.Join(dir, "claim.lua")
	if err := os.WriteFile(script, claimScript, 0o644); err != nil {
		return wrkResult{}, err
	}
	secs := int(math.Ceil(cfg.duration.Seconds()))
	cmd := exec.Command(cfg.wrk,
		"-t", strconv.Itoa(wrkThreads(clients, cfg.wrkThreads)),
		"-c", strconv.Itoa(clients),
		"-d", fmt.Sprintf("%ds", secs),
		"--timeout", "10s",
		"-s", script, base, "--", prefix)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %w: %s", err, out)
	}
	r, err := parseWrk(string(out))
	if err != nil {
		return r, fmt.Errorf("%w; wrk said:\n%s", err, out)
	}
	return r, nil
}

// secondsOf turns a wrk duration into seconds.
func secondsOf(us int64) float64 { return (time.Duration(us) * time.Microsecond).Seconds() }
