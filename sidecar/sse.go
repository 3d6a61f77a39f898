package sidecar

import (
	"encoding/json"
	"fmt"
)

// The keepalive stream's framing: server-sent events (the text/event-stream
// format), written straight to the hijacked connection. Each event is an
// "event:" line naming it and one "data:" line of JSON (json.Marshal never
// writes a newline), ended by a blank line.

// streamHeader starts the response: an event stream that ends when the
// connection closes.
const streamHeader = "HTTP/1.1 200 OK\r\n" +
	"Content-Type: text/event-stream\r\n" +
	"Cache-Control: no-store\r\n" +
	"X-Accel-Buffering: no\r\n" + // proxies must not hold events back
	"Connection: close\r\n\r\n"

// pingComment is a comment line: clients ignore it, but writing it reveals a
// client that is gone.
var pingComment = []byte(": ping\n\n")

// eventBytes formats one server-sent event.
func eventBytes(name string, data any) ([]byte, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", name, b), nil
}

// mustEvent is eventBytes for the API's own types, which always marshal.
func mustEvent(name string, data any) []byte {
	b, err := eventBytes(name, data)
	if err != nil {
		panic(err)
	}
	return b
}
