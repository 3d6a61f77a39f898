package leasecheck

import (
	"strings"
	"testing"
)

func TestCheckWatch(t *testing.T) {
	h := []StoredEvent{
		{1, "a", "acquired", "o1", 1},
		{2, "b", "acquired", "o2", 1},
		{4, "a", "released", "o1", 1}, // 3 was rolled back: no event
		{5, "a", "acquired", "o3", 2},
	}
	cases := []struct {
		name      string
		delivered []StoredEvent
		breach    string // "" when the delivery is right
	}{
		{"all", h, ""},
		{"a prefix of the history", h[:3], ""},
		{"one lost", []StoredEvent{h[0], h[2], h[3]}, "event 2 (b acquired by o2, token 1) is in the history but was never delivered"},
		{"one repeated", []StoredEvent{h[0], h[1], h[1], h[2]}, "event 2 delivered twice"},
		{"out of order", []StoredEvent{h[1], h[0], h[2]}, "event 1 delivered after event 2"},
		{"not stored", []StoredEvent{h[0], {3, "a", "acquired", "o9", 2}}, "event 3 (a acquired by o9) delivered, but the history holds no such event"},
		{"changed", []StoredEvent{h[0], {2, "b", "acquired", "o2", 7}}, "event 2 delivered as"},
	}
	for _, c := range cases {
		got := CheckWatch(c.delivered, h)
		if c.breach == "" {
			if len(got) != 0 {
				t.Errorf("%s: breaches %q, want none", c.name, got)
			}
			continue
		}
		if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), c.breach) {
			t.Errorf("%s: breaches %q, want one saying %q", c.name, got, c.breach)
		}
	}
}
