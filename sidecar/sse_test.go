package sidecar

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/sidecar/api"
)

func TestEventBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		data any
		want string
	}{
		{"released", api.KeepaliveReleased{Reason: api.KeepaliveReleasedReasonShutdown}, "event: released\ndata: {\"reason\":\"shutdown\"}\n\n"},
		// A newline in a value is escaped by JSON: the data stays one line.
		{"lost", api.KeepaliveLost{Reason: api.KeepaliveLostReasonDeadline, Detail: "a\nb"},
			"event: lost\ndata: {\"detail\":\"a\\nb\",\"reason\":\"deadline\"}\n\n"},
	} {
		got, err := eventBytes(tc.name, tc.data)
		if err != nil || string(got) != tc.want {
			t.Errorf("eventBytes(%q) = %q, %v; want %q", tc.name, got, err, tc.want)
		}
		if got := mustEvent(tc.name, tc.data); string(got) != tc.want {
			t.Errorf("mustEvent(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if b, err := eventBytes("x", make(chan int)); err == nil {
		t.Errorf("eventBytes of a channel = %q, want an error", b)
	}
	defer func() {
		if recover() == nil {
			t.Error("mustEvent of a channel did not panic")
		}
	}()
	mustEvent("x", make(chan int))
}

// TestStreamFraming: what a stream writes reads back as an HTTP response
// whose body is an event stream, events and pings apart.
func TestStreamFraming(t *testing.T) {
	t.Parallel()
	raw := streamHeader + string(mustEvent("released", api.KeepaliveReleased{Reason: api.KeepaliveReleasedReasonShutdown})) + string(pingComment)
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" ||
		resp.Header.Get("Cache-Control") != "no-store" || !resp.Close {
		t.Fatalf("header: %d %v (close %t); want 200, text/event-stream, no-store, Connection: close", resp.StatusCode, resp.Header, resp.Close)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n")
	want := []string{"event: released\ndata: {\"reason\":\"shutdown\"}", ": ping"}
	if len(blocks) != len(want) || blocks[0] != want[0] || blocks[1] != want[1] {
		t.Fatalf("body blocks %q, want %q", blocks, want)
	}
}
