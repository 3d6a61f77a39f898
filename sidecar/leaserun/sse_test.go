package leaserun

import (
	"io"
	"strings"
	"testing"
)

// TestSSEReader covers the parts of the event-stream format a sidecar or a
// proxy in front of it may use.
func TestSSEReader(t *testing.T) {
	t.Parallel()
	in := ": hello\n\n" +
		"event: acquired\r\ndata: {\"a\":1}\r\n\r\n" +
		"data: line1\ndata:line2\nid: 7\nretry: 10\n\n" +
		"event: orphan\n\n" +
		": ping\n\n" +
		"event: renewed\ndata: x\n\n" +
		"event: unfinished\ndata: y\n"
	r := newSSEReader(strings.NewReader(in))
	want := []sseEvent{{name: "acquired", data: `{"a":1}`}, {name: "message", data: "line1\nline2"}, {name: "renewed", data: "x"}}
	for _, w := range want {
		ev, err := r.next()
		if err != nil {
			t.Fatalf("want %+v, got error %v", w, err)
		}
		if ev.name != w.name || ev.data != w.data || ev.at.IsZero() {
			t.Errorf("got %+v, want %+v", ev, w)
		}
	}
	if ev, err := r.next(); err != io.EOF {
		t.Errorf("after the last event: %+v, %v; want io.EOF", ev, err)
	}
}
