package server

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// A subscriber that stops reading is disconnected once its push queue is full (as Redis's
// pub/sub output buffer limit does), and the publisher is not held up by it.
func TestSlowSubscriberIsDisconnected(t *testing.T) {
	addr, _ := startFake(t)
	sub := dialRaw(t, addr)
	if got := sub.do("SUBSCRIBE", "flood"); !strings.Contains(got, "subscribe") {
		t.Fatalf("SUBSCRIBE = %q", got)
	}
	pub := dialRaw(t, addr)
	body := strings.Repeat("x", 4000)
	var b strings.Builder
	const n = 8000 // far more than the socket buffers and the push queue hold
	for range n {
		fmt.Fprintf(&b, "*3\r\n$7\r\nPUBLISH\r\n$5\r\nflood\r\n$%d\r\n%s\r\n", len(body), body)
	}
	done := make(chan error, 1)
	go func() { _, err := io.WriteString(pub.nc, b.String()); done <- err }()
	pub.nc.SetDeadline(time.Now().Add(20 * time.Second))
	for i := range n {
		if _, err := readReply(pub.br); err != nil {
			t.Fatalf("publisher's reply %d: %v", i, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The subscriber's connection was closed: reading drains what had been sent, then ends
	// (EOF or reset) well before all n messages.
	sub.nc.SetDeadline(time.Now().Add(10 * time.Second))
	got := 0
	for ; got <= n; got++ {
		if _, err := readReply(sub.br); err != nil {
			if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
				t.Fatalf("the slow subscriber is still connected after %d messages", got)
			}
			break
		}
	}
	if got >= n {
		t.Errorf("the slow subscriber got all %d messages; want it cut off", n)
	}
	t.Logf("cut off after %d of %d messages", got, n)
}

// A restored snapshot closes every subscriber's connection: the messages of the entries the
// snapshot covers are never delivered on this node, and a closed connection says so.
func TestRestoreDropsSubscribers(t *testing.T) {
	addr, f := startFake(t)
	sub := dialRaw(t, addr)
	sub.do("SUBSCRIBE", "ch")
	other := dialRaw(t, addr)
	f.watched().Restored()
	sub.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := readReply(sub.br); err == nil {
		t.Error("the subscriber's connection is still open after a restore")
	}
	if got := other.do("PING"); got != "+PONG\r\n" {
		t.Errorf("a connection without subscriptions after a restore: PING = %q", got)
	}
}

// RAFT PUBSUB answers another member's question for this node alone: subscriber counts per name,
// names, patterns, and how many connections a message on a channel reaches (its subscribers and
// the connections of every pattern that matches it); a malformed question is refused.
func TestRaftPubSubAnswersForThisNode(t *testing.T) {
	addr, _ := startFake(t)
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	a.do("SUBSCRIBE", "lock:job")
	a.do("PSUBSCRIBE", "lock:*")
	b.do("PSUBSCRIBE", "lock:j*")
	b.do("SSUBSCRIBE", "shard:a")
	q := dialRaw(t, addr)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"RAFT", "PUBSUB", "NUMSUB", "lock:job", "other"}, "*2\r\n:1\r\n:0\r\n"},
		{[]string{"RAFT", "PUBSUB", "SHARDNUMSUB", "shard:a"}, "*1\r\n:1\r\n"},
		{[]string{"RAFT", "PUBSUB", "CHANNELS"}, "*1\r\n$8\r\nlock:job\r\n"},
		{[]string{"RAFT", "PUBSUB", "SHARDCHANNELS", "shard:*"}, "*1\r\n$7\r\nshard:a\r\n"},
		{[]string{"RAFT", "PUBSUB", "PATTERNS"}, "*2\r\n$6\r\nlock:*\r\n$7\r\nlock:j*\r\n"},
		{[]string{"RAFT", "PUBSUB", "RECEIVERS", "lock:job"}, ":3\r\n"},
		{[]string{"RAFT", "PUBSUB", "RECEIVERS", "lock:x"}, ":1\r\n"},
		{[]string{"RAFT", "PUBSUB", "SRECEIVERS", "shard:a"}, ":1\r\n"},
		{[]string{"RAFT", "PUBSUB", "RECEIVERS"}, "-ERR wrong number of arguments for 'raft|pubsub' command\r\n"},
		{[]string{"RAFT", "PUBSUB", "PATTERNS", "x"}, "-ERR wrong number of arguments for 'raft|pubsub' command\r\n"},
		{[]string{"RAFT", "PUBSUB", "NOSUCH"}, "-ERR wrong number of arguments for 'raft|pubsub' command\r\n"},
		{[]string{"RAFT", "PUBSUB"}, "-ERR wrong number of arguments for 'raft|pubsub' command\r\n"},
	} {
		if got := q.do(c.args...); got != c.want {
			t.Errorf("%v = %q; want %q", c.args, got, c.want)
		}
	}
}

// A node that installs a snapshot never applies the entries it covers: a LOCK holder whose lock
// the new table no longer has hears lock-lost with reason unknown; one whose lock is still there
// hears nothing.
func TestRestoreTellsHoldersOfLostLocks(t *testing.T) {
	addr, f := startFake(t)
	h := dialRaw(t, addr)
	h.do("HELLO", "3")
	gone := h.do("LOCK", "gone", "60000")
	kept := h.do("LOCK", "kept", "60000")
	if gone[0] != ':' || kept[0] != ':' {
		t.Fatalf("LOCK: %q, %q", gone, kept)
	}
	// The snapshot's table: "gone" was released by entries this node never applied.
	f.mu.Lock()
	f.mu.index++
	f.mu.table.Apply(f.mu.index, fsm.Command{Kind: fsm.KindRelease, Key: fsm.DBKey(0, []byte("gone")), Match: fsm.Match{Kind: fsm.MatchAny}})
	f.mu.Unlock()
	f.watched().Restored()
	want := ">4\r\n$9\r\nlock-lost\r\n$4\r\ngone\r\n" + gone + "$7\r\nunknown\r\n"
	h.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := readReply(h.br); err != nil || got != want {
		t.Fatalf("after the restore: %q, %v; want %q", got, err, want)
	}
	if got := h.do("PING"); got != "+PONG\r\n" {
		t.Errorf("PING after the one push: %q; want +PONG (kept is still held)", got)
	}
}

// A subscriber hears the messages of the entries its node's log did not hold when it subscribed,
// and none of those it held (a restarted node applies them again: they were published before):
// a later entry's, or one of another term at an index it held (which replaced what it held).
// The lock channels' messages and keyspace events follow the same rule.
func TestSubscriberHearsOnlyWhatItsLogDidNotHold(t *testing.T) {
	addr, f := startFake(t)
	pub := dialRaw(t, addr)
	for range 3 {
		pub.do("PUBLISH", "ch", "before") // entries 1 to 3, of term 1
	}
	// The log ends at entry 3 (term 2), known committed up to entry 1.
	f.setLogEnd(node.LogEnd{Last: node.LogPosition{Index: 3, Term: 2}, Committed: 1})
	sub := dialRaw(t, addr)
	if got := sub.do("SUBSCRIBE", "ch"); !strings.Contains(got, "subscribe") {
		t.Fatalf("SUBSCRIBE = %q", got)
	}
	w := f.watched()
	for _, m := range []struct {
		at   node.LogPosition
		body string
		want int
	}{
		{node.LogPosition{Index: 1, Term: 1}, "replayed", 0}, // committed
		{node.LogPosition{Index: 2, Term: 2}, "replayed", 0}, // of the last entry's term
		{node.LogPosition{Index: 3, Term: 2}, "replayed", 0},
		{node.LogPosition{Index: 3, Term: 3}, "replaced", 1},
		{node.LogPosition{Index: 4, Term: 2}, "later", 1},
	} {
		if n := w.Published(m.at, []byte("ch"), []byte(m.body), false); n != m.want {
			t.Errorf("the message of entry %+v reached %d subscribers, want %d", m.at, n, m.want)
		}
	}
	sub.nc.SetDeadline(time.Now().Add(5 * time.Second))
	for _, want := range []string{"replaced", "later"} {
		msg, err := readReply(sub.br)
		if w := "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$" + fmt.Sprint(len(want)) + "\r\n" + want + "\r\n"; err != nil || msg != w {
			t.Fatalf("the subscriber heard %q (%v), want %q", msg, err, w)
		}
	}
	locks := dialRaw(t, addr)
	if got := locks.do("SUBSCRIBE", string(lockChannel([]byte("\x00k")))); !strings.Contains(got, "subscribe") {
		t.Fatalf("SUBSCRIBE = %q", got)
	}
	w.LockEnded(node.LogPosition{Index: 3, Term: 2}, []byte("\x00k"), 7, node.LockExpired) // held: not heard
	w.LockEnded(node.LogPosition{Index: 2, Term: 1}, []byte("\x00k"), 8, node.LockExpired) // perhaps not held
	locks.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if msg, err := readReply(locks.br); err != nil || !strings.Contains(msg, "lost 8 ") {
		t.Fatalf("the lock channel's subscriber heard %q (%v), want token 8's loss first", msg, err)
	}
}
