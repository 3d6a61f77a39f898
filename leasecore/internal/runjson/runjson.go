// Package runjson is how the stores keep a run's outcome
// (leasecore.RunOutcome) in a history event: one JSON object, in a text
// column (SQLite) or a jsonb one (PostgreSQL), NULL for an event without a
// run. The fields are the HTTP API's RunOutcome's, so an operator reading the
// table reads what the API says.
package runjson

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// wire is a RunOutcome as stored.
type wire struct {
	ExitCode   *int   `json:"exit_code,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Lost       bool   `json:"lost,omitempty"`
}

// Encode is run as the column's value: nil (NULL) when run is nil.
func Encode(run *leasecore.RunOutcome) *string {
	if run == nil {
		return nil
	}
	w := wire{Error: run.Error, DurationMS: run.Duration.Milliseconds(), Lost: run.Lost}
	if run.ExitCode != leasecore.NoExitCode {
		w.ExitCode = &run.ExitCode
	}
	b, err := json.Marshal(w)
	if err != nil { // cannot happen: the struct has strings, numbers and booleans
		panic(err)
	}
	s := string(b)
	return &s
}

// Decode reads the column's value: nil for NULL.
func Decode(column *string) (*leasecore.RunOutcome, error) {
	if column == nil {
		return nil, nil
	}
	var w wire
	if err := json.Unmarshal([]byte(*column), &w); err != nil {
		return nil, fmt.Errorf("a history event's run: %w", err)
	}
	run := &leasecore.RunOutcome{ExitCode: leasecore.NoExitCode, Error: w.Error, Duration: time.Duration(w.DurationMS) * time.Millisecond, Lost: w.Lost}
	if w.ExitCode != nil {
		run.ExitCode = *w.ExitCode
	}
	return run, nil
}
