package leaserun

import (
	"bufio"
	"io"
	"strings"
	"time"
)

// maxEventBytes bounds one line of the stream; a lease is far smaller.
const maxEventBytes = 1 << 20

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data string
	// at is the local time its last line was read: the moment a lease's
	// ttl_remaining_ms counts from.
	at time.Time
}

// sseReader reads server-sent events (the text/event-stream format): lines
// of "field: value", comments starting with ':', and a blank line ending
// each event. Lines end with LF or CRLF.
type sseReader struct {
	sc *bufio.Scanner
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEventBytes)
	return &sseReader{sc: sc}
}

// next returns the next event with data, skipping comments. At the end of
// the stream it returns io.EOF, discarding an unfinished event as the format
// says.
func (r *sseReader) next() (sseEvent, error) {
	var name string
	var data []string
	for r.sc.Scan() {
		line := r.sc.Text()
		if line == "" {
			if data == nil {
				name = "" // an event without data is not dispatched
				continue
			}
			if name == "" {
				name = "message"
			}
			return sseEvent{name: name, data: strings.Join(data, "\n"), at: time.Now()}, nil
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			data = append(data, value)
		}
	}
	if err := r.sc.Err(); err != nil {
		return sseEvent{}, err
	}
	return sseEvent{}, io.EOF
}
