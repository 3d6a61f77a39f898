// Package sse reads server-sent events (the text/event-stream format), as
// the sidecar's keepalive and watch streams send them: "field: value"
// lines, comments starting with ':', and a blank line ending each event.
// `leasehold run` reads keepalive streams with it, the operator commands
// watch streams.
package sse

import (
	"bufio"
	"io"
	"strings"
	"time"
)

// MaxLineBytes bounds one line of a stream; a lease or an event is far
// smaller.
const MaxLineBytes = 1 << 20

// Event is one server-sent event.
type Event struct {
	ID   string // the id field; empty when the event has none
	Name string // the event field; "message" when the event has none
	Data string // the data lines, joined by newlines
	// At is the local time its last line was read: the moment, say, a
	// lease's ttl_remaining_ms counts from.
	At time.Time
}

// Reader reads events from a stream. Lines end with LF or CRLF.
type Reader struct{ sc *bufio.Scanner }

// NewReader reads events from r.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxLineBytes)
	return &Reader{sc: sc}
}

// Next returns the next event with data, skipping comments. At the end of
// the stream it returns io.EOF, discarding an unfinished event as the
// format says.
func (r *Reader) Next() (Event, error) {
	var ev Event
	var data []string
	for r.sc.Scan() {
		line := r.sc.Text()
		if line == "" {
			if data == nil {
				ev = Event{} // an event without data is not dispatched
				continue
			}
			if ev.Name == "" {
				ev.Name = "message"
			}
			ev.Data, ev.At = strings.Join(data, "\n"), time.Now()
			return ev, nil
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.ID = value
		case "event":
			ev.Name = value
		case "data":
			data = append(data, value)
		}
	}
	if err := r.sc.Err(); err != nil {
		return Event{}, err
	}
	return Event{}, io.EOF
}
