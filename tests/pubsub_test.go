package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRedisCompatPubSub drives a subscriber and a publisher through the same steps on
// redis-server and on raftlock (one node), in RESP2 (subscribed mode) and RESP3 (pushes), and
// requires byte-identical bytes on both subscribers and both publishers: acknowledgements,
// messages, pattern and shard messages, what subscribed mode refuses, PUBSUB's answers.
func TestRedisCompatPubSub(t *testing.T) {
	rs := startRedis(t)
	n := startNode(t, t.TempDir())
	steps := []pubsubStep{
		{cmd: []string{"SUBSCRIBE", "ch:a", "ch:b"}, replies: 2},
		{cmd: []string{"SUBSCRIBE", "ch:a"}},
		{cmd: []string{"PSUBSCRIBE", "h*llo", "ch:?"}, replies: 2},
		{cmd: []string{"SSUBSCRIBE", "sh:1"}},
		{pub: true, cmd: []string{"PUBLISH", "ch:a", "m1"}},
		{}, {},
		{pub: true, cmd: []string{"PUBLISH", "hello", "m2"}},
		{},
		{pub: true, cmd: []string{"SPUBLISH", "sh:1", "m3"}},
		{},
		{pub: true, cmd: []string{"PUBLISH", "nobody", "m4"}},
		// (Several names come in an order of the server's choosing: patterns that pick one.)
		{pub: true, cmd: []string{"PUBSUB", "CHANNELS", "ch:[b]"}},
		{pub: true, cmd: []string{"PUBSUB", "CHANNELS", "x*"}},
		{pub: true, cmd: []string{"PUBSUB", "NUMSUB", "ch:a", "ch:b", "nobody"}},
		{pub: true, cmd: []string{"PUBSUB", "NUMPAT"}},
		{pub: true, cmd: []string{"PUBSUB", "SHARDCHANNELS"}},
		{pub: true, cmd: []string{"PUBSUB", "SHARDNUMSUB", "sh:1"}},
		{pub: true, cmd: []string{"PUBSUB", "CHANNELS", "a", "b"}},
		{pub: true, cmd: []string{"PUBSUB", "NUMPAT", "x"}},
		{pub: true, cmd: []string{"PUBSUB", "BOGUS"}},
		{pub: true, cmd: []string{"PUBLISH", "ch:a"}},
		{cmd: []string{"PING"}},
		{cmd: []string{"PING", "hi"}},
		{cmd: []string{"UNSUBSCRIBE", "ch:a"}},
		{cmd: []string{"UNSUBSCRIBE"}},
		{cmd: []string{"PUNSUBSCRIBE", "h*llo"}},
		// Unsubscribing from all goes in an order of the server's choosing: one left here.
		{cmd: []string{"PUNSUBSCRIBE"}},
		{cmd: []string{"SUNSUBSCRIBE", "sh:1", "sh:2"}, replies: 2},
		{cmd: []string{"UNSUBSCRIBE"}},
		{cmd: []string{"PUNSUBSCRIBE", "nope"}},
		{cmd: []string{"PING"}},
		{pub: true, cmd: []string{"PUBSUB", "NUMSUB", "ch:a"}},
	}
	// In RESP2 a subscribed connection refuses other commands: checked while subscribed.
	refusals := [][]string{{"GET", "k"}, {"CLIENT", "GETNAME"}, {"PUBSUB", "NUMPAT"}}
	var all []pubsubStep
	for j, s := range steps {
		all = append(all, s)
		if j == 3 {
			for _, cmd := range refusals {
				all = append(all, pubsubStep{cmd: cmd})
			}
		}
	}
	compareTranscripts(t, rs.addr, n.addr, all, nil)
}

// pubsubStep is one step of a subscriber-and-writer transcript: a command sent by the writer
// (pub) or the subscriber, or (cmd nil) one more message read on the subscriber.
type pubsubStep struct {
	pub     bool
	cmd     []string
	replies int // replies to read for cmd (default 1)
}

// compareTranscripts runs steps on redis-server (addrA) and raftlock (addrB), each with a
// subscriber and a writer connection, in RESP2 and RESP3 (the subscriber's HELLO 3), and
// requires every reply to be byte-identical. after, when not nil, runs on each server's writer
// once its steps are done (to reset what they set).
func compareTranscripts(t *testing.T, addrA, addrB string, steps []pubsubStep, after []string) {
	t.Helper()
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			var got [2][]string // per server: every reply read, in order
			for i, addr := range []string{addrA, addrB} {
				sub, err := dialRESP(addr)
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Close()
				pub, err := dialRESP(addr)
				if err != nil {
					t.Fatal(err)
				}
				defer pub.Close()
				if proto == 3 {
					if _, err := sub.do("HELLO", "3"); err != nil {
						t.Fatal(err)
					}
				}
				for _, s := range steps {
					c, what := sub, "sub"
					if s.pub {
						c, what = pub, "pub"
					}
					if s.cmd != nil {
						if err := c.writeRaw(encodeCommand(s.cmd...)); err != nil {
							t.Fatal(err)
						}
					}
					for range max(s.replies, 1) {
						r, err := c.readReply()
						if err != nil {
							t.Fatalf("%s: %s %q: %v (so far: %q)", addr, what, s.cmd, err, got[i])
						}
						got[i] = append(got[i], fmt.Sprintf("%s %q -> %q", what, s.cmd, r))
					}
				}
				if after != nil {
					if _, err := pub.do(after...); err != nil {
						t.Fatal(err)
					}
				}
			}
			if diff := strings.Join(diffLines(got[0], got[1]), "\n"); diff != "" {
				t.Errorf("replies differ (redis-server, then raftlock):\n%s", diff)
			}
		})
	}
}

// diffLines lists the positions where two transcripts differ.
func diffLines(a, b []string) []string {
	var out []string
	for i := range max(len(a), len(b)) {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			out = append(out, fmt.Sprintf("  redis:    %s\n  raftlock: %s", x, y))
		}
	}
	return out
}

// A message published on one node reaches a subscriber on another, through the log; a
// subscriber's node delivers it after it applied the changes committed before it.
func TestPubSubAcrossNodes(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	followers := c.others(l)
	sub, err := dialRESP(followers[0].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if r, err := sub.do("SUBSCRIBE", "news"); err != nil || !strings.Contains(string(r), "subscribe") {
		t.Fatalf("SUBSCRIBE on %s: %q, %v", followers[0].id, r, err)
	}
	// Published on the other follower (forwarded to the leader), after a lock change there.
	pub, err := dialRESP(followers[1].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if r, err := pub.do("SET", "pubsub:key", "v1"); err != nil || string(r) != "+OK\r\n" {
		t.Fatalf("SET: %q, %v", r, err)
	}
	if _, err := pub.do("PUBLISH", "news", "after-set"); err != nil {
		t.Fatal(err)
	}
	sub.nc.SetDeadline(time.Now().Add(10 * time.Second))
	msg, err := sub.readReply()
	if want := "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$9\r\nafter-set\r\n"; err != nil || string(msg) != want {
		t.Fatalf("message on %s = %q, %v; want %q", followers[0].id, msg, err, want)
	}
	// The subscriber's node applied the SET before it delivered the message.
	ro, err := dialRESP(followers[0].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ro.do("READONLY")
	if r, err := ro.do("GET", "pubsub:key"); err != nil || string(r) != "$2\r\nv1\r\n" {
		t.Errorf("READONLY GET on the subscriber's node after the message = %q, %v; want v1", r, err)
	}
}

// Messages published inside a script and inside MULTI/EXEC, through a follower and on the
// leader, reach a subscriber on the other follower (they are entries of the log like any
// other); a shard subscriber (SSUBSCRIBE) there gets SPUBLISH's messages from the other nodes,
// a script's included. PUBLISH inside a script or a transaction replies 0 (the leader's own
// receivers: a script cannot wait on other nodes' counts); SPUBLISH on its own counts every
// node's.
func TestPubSubFromScriptsAndTransactionsAcrossNodes(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	followers := c.others(l)
	subNode, pubNode := followers[0], followers[1]
	sub, ssub := mustDial(t, subNode.addr), mustDial(t, subNode.addr)
	mustReply(t, sub, "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n", "SUBSCRIBE", "news")
	mustReply(t, ssub, "*3\r\n$10\r\nssubscribe\r\n$5\r\nshard\r\n:1\r\n", "SSUBSCRIBE", "shard")
	expect := func(conn *respConn, kind, channel, body string) {
		t.Helper()
		conn.nc.SetDeadline(time.Now().Add(10 * time.Second))
		want := fmt.Sprintf("*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(kind), kind, len(channel), channel, len(body), body)
		if got, err := conn.readReply(); err != nil || string(got) != want {
			t.Fatalf("on %s: %q, %v; want %q", subNode.id, got, err, want)
		}
	}

	viaFollower, onLeader := mustDial(t, pubNode.addr), mustDial(t, l.addr)
	for _, p := range []struct {
		conn *respConn
		name string
	}{{viaFollower, "through follower " + pubNode.id}, {onLeader, "on the leader " + l.id}} {
		mustReply(t, p.conn, ":0\r\n", "EVAL", "return redis.call('publish', ARGV[1], ARGV[2])", "0", "news", "from a script "+p.name)
		expect(sub, "message", "news", "from a script "+p.name)
		mustReply(t, p.conn, "+OK\r\n", "MULTI")
		mustReply(t, p.conn, "+QUEUED\r\n", "PUBLISH", "news", "first of a transaction "+p.name)
		mustReply(t, p.conn, "+QUEUED\r\n", "PUBLISH", "news", "second of a transaction "+p.name)
		mustReply(t, p.conn, "*2\r\n:0\r\n:0\r\n", "EXEC")
		expect(sub, "message", "news", "first of a transaction "+p.name)
		expect(sub, "message", "news", "second of a transaction "+p.name)
		mustReply(t, p.conn, ":1\r\n", "SPUBLISH", "shard", "sharded "+p.name) // the shard subscriber, on another node
		expect(ssub, "smessage", "shard", "sharded "+p.name)
		mustReply(t, p.conn, ":0\r\n", "EVAL", "return redis.call('spublish', KEYS[1], ARGV[1])", "1", "shard", "sharded from a script "+p.name)
		expect(ssub, "smessage", "shard", "sharded from a script "+p.name)
	}
	// Neither subscriber got the other's messages.
	for _, conn := range []*respConn{sub, ssub} {
		mustReply(t, conn, "*2\r\n$4\r\npong\r\n$0\r\n\r\n", "PING")
	}
}

// Pub/sub counts the whole cluster: a subscription confirmed on one node is counted by PUBSUB
// NUMSUB asked on another right after, so a rival on another node does not take a lock whose
// holder announces itself by subscribing to the lock's channel (the pub/sub-style locks some
// libraries build); NUMPAT, CHANNELS, SHARDCHANNELS and SHARDNUMSUB count every node's, and
// PUBLISH's and SPUBLISH's replies count every node's receivers. A member that is down is left
// out, and the others still answer.
func TestPubSubCountsTheCluster(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	followers := c.others(l)
	f1, f2 := followers[0], followers[1]
	dial := func(n *node) *respConn {
		t.Helper()
		rc, err := dialRESP(n.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rc.Close() })
		return rc
	}
	expect := func(rc *respConn, want string, args ...string) {
		t.Helper()
		if got, err := rc.do(args...); err != nil || string(got) != want {
			t.Fatalf("%v: %q, %v; want %q", args, got, err, want)
		}
	}
	holder, rival := dial(f1), dial(f2)
	expect(holder, "*3\r\n$9\r\nsubscribe\r\n$8\r\nlock:job\r\n:1\r\n", "SUBSCRIBE", "lock:job")
	expect(rival, "*2\r\n$8\r\nlock:job\r\n:1\r\n", "PUBSUB", "NUMSUB", "lock:job")

	watcher, shard := dial(l), dial(f2)
	expect(watcher, "*3\r\n$10\r\npsubscribe\r\n$6\r\nlock:*\r\n:1\r\n", "PSUBSCRIBE", "lock:*")
	expect(shard, "*3\r\n$10\r\nssubscribe\r\n$7\r\nshard:a\r\n:1\r\n", "SSUBSCRIBE", "shard:a")
	for _, n := range c.live() {
		q := dial(n)
		expect(q, ":1\r\n", "PUBSUB", "NUMPAT")
		expect(q, "*1\r\n$8\r\nlock:job\r\n", "PUBSUB", "CHANNELS")
		expect(q, "*1\r\n$8\r\nlock:job\r\n", "PUBSUB", "CHANNELS", "lock:*")
		expect(q, "*0\r\n", "PUBSUB", "CHANNELS", "other:*")
		expect(q, "*1\r\n$7\r\nshard:a\r\n", "PUBSUB", "SHARDCHANNELS")
		expect(q, "*4\r\n$7\r\nshard:a\r\n:1\r\n$8\r\nlock:job\r\n:0\r\n", "PUBSUB", "SHARDNUMSUB", "shard:a", "lock:job")
	}
	// Through a follower (forwarded to the leader): the holder on f1 and the pattern on the
	// leader receive it.
	publisher := dial(f2)
	expect(publisher, ":2\r\n", "PUBLISH", "lock:job", "released")
	expect(publisher, ":1\r\n", "SPUBLISH", "shard:a", "hello")
	expect(publisher, ":1\r\n", "PUBLISH", "lock:other", "x")

	// An unsubscription confirmed on f1 is seen from f2 too.
	expect(holder, "*3\r\n$7\r\nmessage\r\n$8\r\nlock:job\r\n$8\r\nreleased\r\n", "UNSUBSCRIBE", "lock:job")
	if got, err := holder.readReply(); err != nil || string(got) != "*3\r\n$11\r\nunsubscribe\r\n$8\r\nlock:job\r\n:0\r\n" {
		t.Fatalf("UNSUBSCRIBE: %q, %v", got, err)
	}
	expect(rival, "*2\r\n$8\r\nlock:job\r\n:0\r\n", "PUBSUB", "NUMSUB", "lock:job")

	// f1 down: the others still answer, without it.
	f1.kill9()
	for range 3 {
		expect(rival, ":1\r\n", "PUBSUB", "NUMPAT")
	}
}
