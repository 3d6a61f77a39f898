package sse

import (
	"io"
	"strings"
	"testing"
)

// TestSSEReader covers the parts of the event-stream format a sidecar or a
// proxy in front of it may use.
func TestReader(t *testing.T) {
	t.Parallel()
	in := ": hello\n\n" +
		"event: acquired\r\ndata: {\"a\":1}\r\n\r\n" +
		"data: line1\ndata:line2\nid: 7\nretry: 10\n\n" +
		"event: orphan\n\n" +
		": ping\n\n" +
		"event: renewed\ndata: x\n\n" +
		"event: unfinished\ndata: y\n"
	r := NewReader(strings.NewReader(in))
	want := []Event{{Name: "acquired", Data: `{"a":1}`}, {ID: "7", Name: "message", Data: "line1\nline2"}, {Name: "renewed", Data: "x"}}
	for _, w := range want {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("want %+v, got error %v", w, err)
		}
		if ev.ID != w.ID || ev.Name != w.Name || ev.Data != w.Data || ev.At.IsZero() {
			t.Errorf("got %+v, want %+v", ev, w)
		}
	}
	if ev, err := r.Next(); err != io.EOF {
		t.Errorf("after the last event: %+v, %v; want io.EOF", ev, err)
	}
}
