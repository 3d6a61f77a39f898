package notify

import "testing"

func TestNotifyWakesEveryWaiterOnce(t *testing.T) {
	var n Notifier
	a, b := n.Wait(), n.Wait()
	if a != b {
		t.Fatal("two waits before a notify got different channels")
	}
	select {
	case <-a:
		t.Fatal("the channel is closed before any notify")
	default:
	}
	n.Notify()
	for _, ch := range []<-chan struct{}{a, b} {
		select {
		case <-ch:
		default:
			t.Fatal("a waiter was not woken by Notify")
		}
	}
	c := n.Wait()
	select {
	case <-c:
		t.Fatal("a wait after the notify is already woken: it would miss the next commit")
	default:
	}
	n.Notify()
	<-c
}

func TestNotifyWithoutWaiters(t *testing.T) {
	var n Notifier
	n.Notify() // nobody waits: nothing to wake, and no channel is made
	if n.ch != nil {
		t.Fatal("Notify made a channel nobody waits on")
	}
}
