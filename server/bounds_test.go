package server

import (
	"strings"
	"testing"
)

// Issue #30: SUBSCRIBE had no bound on count or name size (+833 MB from one connection). Past
// each bound a (P|S)SUBSCRIBE subscribes to none of its names and replies an error naming it.
func TestSubscriptionBounds(t *testing.T) {
	addr, s := serveNode(t, newFakeNode(), nil)
	lim := DefaultSubscriptionLimits()
	if lim.Name != 1024 || lim.PerConn != 10_000 || lim.PerNode != 100_000 || lim.Patterns != 1_000 {
		t.Fatalf("defaults = %+v, want the README's", lim)
	}

	c := dialRaw(t, addr)
	long := strings.Repeat("n", 1<<20)
	if got := c.do("SUBSCRIBE", "ok", long); !strings.HasPrefix(got, "-ERR channel or pattern name too long") {
		t.Errorf("SUBSCRIBE with a 1 MiB name = %.80q, want the name bound's error", got)
	}
	if got := c.do("PSUBSCRIBE", "*["+long[:1<<20-8]+"]"); !strings.HasPrefix(got, "-ERR channel or pattern name too long") {
		t.Errorf("PSUBSCRIBE with a 1 MiB pattern = %.80q, want the name bound's error", got)
	}
	if got := c.do("SUBSCRIBE", strings.Repeat("n", 1024)); !strings.Contains(got, "subscribe") {
		t.Errorf("SUBSCRIBE with a 1024-byte name = %.80q, want it subscribed", got)
	}
	if got := dialRaw(t, addr).do("PUBSUB", "NUMSUB", "ok"); got != "*2\r\n$2\r\nok\r\n:0\r\n" {
		t.Errorf("after a refused SUBSCRIBE, PUBSUB NUMSUB ok = %q: want nothing subscribed", got)
	}
	c.do("UNSUBSCRIBE")

	s.hub.limits = SubscriptionLimits{Name: 64, PerConn: 3, PerNode: 5, Patterns: 2}
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	if got := a.do("SUBSCRIBE", "c1", "c2", "c3", "c4"); !strings.HasPrefix(got, "-ERR too many subscriptions: at most 3 per connection") {
		t.Errorf("4 subscriptions on one connection = %q", got)
	}
	// Names repeated or already subscribed do not count twice.
	a.do("SUBSCRIBE", "c1")
	if got := a.do("SUBSCRIBE", "c1", "c2", "c2"); !strings.HasPrefix(got, "*3\r\n$9\r\nsubscribe\r\n$2\r\nc1\r\n:1") {
		t.Errorf("SUBSCRIBE c1 c2 c2 = %q", got)
	}
	for _, want := range []string{":2", ":2"} { // the replies for c2 and c2 follow
		reply, err := readReply(a.br)
		if err != nil || !strings.HasSuffix(reply, want+"\r\n") {
			t.Errorf("reply = %q, %v; want count %s", reply, err, want)
		}
	}
	if got := a.do("PSUBSCRIBE", "p1*"); !strings.Contains(got, ":3") {
		t.Errorf("third subscription = %q", got)
	}
	if got := b.do("SUBSCRIBE", "c1", "c2", "c3"); !strings.HasPrefix(got, "-ERR too many subscriptions on this node: at most 5") {
		t.Errorf("6 subscriptions on the node = %q", got)
	}
	if got := b.do("PSUBSCRIBE", "p2*", "p3*"); !strings.HasPrefix(got, "-ERR too many patterns subscribed on this node: at most 2") {
		t.Errorf("3 patterns on the node = %q", got)
	}
	if got := b.do("PSUBSCRIBE", "p1*", "p2*"); !strings.Contains(got, "psubscribe") {
		t.Errorf("a second subscriber to a subscribed pattern, and a second pattern = %q", got)
	}
	readReply(b.br)
	// Unsubscribing gives the room back.
	a.do("UNSUBSCRIBE", "c1")
	if got := b.do("SUBSCRIBE", "c9"); !strings.Contains(got, "subscribe") {
		t.Errorf("SUBSCRIBE after others left = %q", got)
	}
}
