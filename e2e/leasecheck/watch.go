package leasecheck

import "fmt"

// StoredEvent is one lease event as the store's history holds it, or as a
// watch stream delivered it.
type StoredEvent struct {
	ID    int64
	Task  string
	Kind  string
	Owner string
	Token int64
}

// CheckWatch checks what a watch delivered (across all its reconnections,
// in the order received) against the history the store holds for the same
// tasks once the run is over: the watch's promise is every event, in id
// order, each once. A watch that started from the beginning of the history
// must have delivered, with the same content, every stored event up to the
// last one it received; it must not have delivered an event the history
// does not hold (the run prunes nothing). It returns one line per breach.
func CheckWatch(delivered, history []StoredEvent) []string {
	var out []string
	stored := make(map[int64]StoredEvent, len(history))
	for _, ev := range history {
		stored[ev.ID] = ev
	}
	seen := make(map[int64]bool, len(delivered))
	var last int64
	for i, ev := range delivered {
		switch {
		case seen[ev.ID]:
			out = append(out, fmt.Sprintf("event %d delivered twice (the second time as the %dth)", ev.ID, i+1))
		case ev.ID <= last:
			out = append(out, fmt.Sprintf("event %d delivered after event %d: out of id order", ev.ID, last))
		}
		seen[ev.ID] = true
		last = max(last, ev.ID)
		want, ok := stored[ev.ID]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("event %d (%s %s by %s) delivered, but the history holds no such event", ev.ID, ev.Task, ev.Kind, ev.Owner))
		case want != ev:
			out = append(out, fmt.Sprintf("event %d delivered as %+v, the history holds %+v", ev.ID, ev, want))
		}
	}
	for _, ev := range history {
		if ev.ID <= last && !seen[ev.ID] {
			out = append(out, fmt.Sprintf("event %d (%s %s by %s, token %d) is in the history but was never delivered", ev.ID, ev.Task, ev.Kind, ev.Owner, ev.Token))
		}
	}
	return out
}
