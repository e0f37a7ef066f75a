package tests

import (
	"fmt"
	"testing"
	"time"
)

// TestRedisCompatKeyspaceNotifications compares keyspace notifications with redis-server's,
// byte for byte: CONFIG SET/GET notify-keyspace-events, and the del and expired events a
// subscriber gets on __keyspace@<db>__ and __keyevent@<db>__ (the events raftlock reports; the
// classes chosen keep redis-server's other events, set, expire and hdel, out of the transcript).
func TestRedisCompatKeyspaceNotifications(t *testing.T) {
	rs := startRedis(t)
	n := startNode(t, t.TempDir())
	steps := []pubsubStep{
		{pub: true, cmd: []string{"CONFIG", "GET", "notify-keyspace-events"}},
		{pub: true, cmd: []string{"CONFIG", "SET", "notify-keyspace-events", "KEq"}},
		{pub: true, cmd: []string{"CONFIG", "SET", "notify-keyspace-events"}},
		{pub: true, cmd: []string{"CONFIG", "SET", "notify-keyspace-events", "x", "notify-keyspace-events", "g"}},
		{pub: true, cmd: []string{"CONFIG", "SET", "maxclients", "5", "x"}},
		{pub: true, cmd: []string{"CONFIG", "SET", "no-such-thing", "5"}},
		{pub: true, cmd: []string{"CONFIG", "SET", "notify-keyspace-events", "xKE"}},
		{pub: true, cmd: []string{"CONFIG", "GET", "notify-keyspace-events"}},
		{cmd: []string{"PSUBSCRIBE", "__key*__:*"}},
		{cmd: []string{"SUBSCRIBE", "__keyevent@0__:expired"}},
		{pub: true, cmd: []string{"SET", "kn:a", "1", "PX", "50"}},
		{}, {}, {}, // expired: on the pattern (keyspace, keyevent) and the channel
		{pub: true, cmd: []string{"CONFIG", "SET", "notify-keyspace-events", "gKE"}},
		{pub: true, cmd: []string{"SET", "kn:b", "1"}},
		{pub: true, cmd: []string{"DEL", "kn:b", "kn:none"}},
		{}, {},
		{pub: true, cmd: []string{"HSET", "kn:h", "f", "v"}},
		{pub: true, cmd: []string{"HDEL", "kn:h", "f"}},
		{}, {},
		{pub: true, cmd: []string{"SELECT", "3"}},
		{pub: true, cmd: []string{"SET", "kn:c", "1"}},
		{pub: true, cmd: []string{"GETDEL", "kn:c"}},
		{}, {},
		{pub: true, cmd: []string{"CONFIG", "SET", "notify-keyspace-events", "A"}},
		{pub: true, cmd: []string{"CONFIG", "GET", "notify-keyspace-events"}},
		{pub: true, cmd: []string{"CONFIG", "SET", "notify-keyspace-events", ""}},
		{pub: true, cmd: []string{"SET", "kn:d", "1"}},
		{pub: true, cmd: []string{"DEL", "kn:d"}},
		{cmd: []string{"PING"}}, // no event came before the pong
	}
	compareTranscripts(t, rs.addr, n.addr, steps, []string{"CONFIG", "SET", "notify-keyspace-events", ""})
}

// TestRedisCompatSetPastExpiry: SET with a PXAT or EXAT already past ends the key as an expiry,
// as on Redis 7.0 (which sets the key, then expires it): subscribers hear "expired", not "del",
// here for keys that held a lease (of a string and of a hash, in two databases). GETEX and
// PEXPIREAT with a past time delete the key there, and say "del". Left out: SET past on a key
// without a lease, or on a new key, where raftlock says "del", or nothing, and Redis "expired"
// (a replicated Expire ends only a lease, and a new key past its time is never written).
func TestRedisCompatSetPastExpiry(t *testing.T) {
	rs := startRedis(t)
	n := startNode(t, t.TempDir())
	steps := []pubsubStep{
		{pub: true, cmd: []string{"CONFIG", "SET", "notify-keyspace-events", "xKE"}},
		{cmd: []string{"PSUBSCRIBE", "__key*__:*"}},
		{cmd: []string{"SUBSCRIBE", "__keyevent@0__:expired"}},
		{pub: true, cmd: []string{"SET", "kx:a", "1", "PX", "100000"}},
		{pub: true, cmd: []string{"SET", "kx:a", "2", "PXAT", "1000"}},
		{}, {}, {}, // expired: on the pattern (keyspace, keyevent) and the channel
		{pub: true, cmd: []string{"HSET", "kx:h", "f", "v"}},
		{pub: true, cmd: []string{"PEXPIRE", "kx:h", "100000"}},
		{pub: true, cmd: []string{"SET", "kx:h", "v", "EXAT", "1"}},
		{}, {}, {},
		{pub: true, cmd: []string{"EXISTS", "kx:a", "kx:h"}},
		{pub: true, cmd: []string{"SELECT", "2"}},
		{pub: true, cmd: []string{"SET", "kx:c", "1", "EX", "1000"}},
		{pub: true, cmd: []string{"SET", "kx:c", "1", "EXAT", "1", "GET"}},
		{}, {}, // database 2's: on the pattern only
		{pub: true, cmd: []string{"EXISTS", "kx:c"}},
		{pub: true, cmd: []string{"CONFIG", "SET", "notify-keyspace-events", "gKE"}},
		{pub: true, cmd: []string{"SET", "kx:d", "1"}},
		{pub: true, cmd: []string{"GETEX", "kx:d", "PXAT", "1"}},
		{}, {},
		{pub: true, cmd: []string{"SET", "kx:e", "1"}},
		{pub: true, cmd: []string{"PEXPIREAT", "kx:e", "1"}},
		{}, {},
		{cmd: []string{"PING"}}, // no event came before the pong
	}
	compareTranscripts(t, rs.addr, n.addr, steps, []string{"CONFIG", "SET", "notify-keyspace-events", ""})
}

// A subscriber on a follower hears the keyspace events of the entries that follower applies:
// del from a DEL and a GETDEL made through the other follower, expired from a lease the leader
// expired and from a SET ... PXAT in the past, in database 0 and 5. The setting is the
// follower's own: the leader, with notifications off, tells its own subscriber nothing.
func TestKeyspaceNotificationsOnFollower(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	followers := c.others(l)
	subNode, writeNode := followers[0], followers[1]
	cfg := mustDial(t, subNode.addr)
	mustReply(t, cfg, "+OK\r\n", "CONFIG", "SET", "notify-keyspace-events", "gxE")
	const pattern = "__keyevent@*__:*"
	sub, leaderSub := mustDial(t, subNode.addr), mustDial(t, l.addr)
	for _, s := range []*respConn{sub, leaderSub} {
		mustReply(t, s, "*3\r\n$10\r\npsubscribe\r\n$16\r\n"+pattern+"\r\n:1\r\n", "PSUBSCRIBE", pattern)
	}
	expect := func(db int, event, key string) {
		t.Helper()
		sub.nc.SetDeadline(time.Now().Add(10 * time.Second))
		channel := fmt.Sprintf("__keyevent@%d__:%s", db, event)
		want := fmt.Sprintf("*4\r\n$8\r\npmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(pattern), pattern, len(channel), channel, len(key), key)
		if got, err := sub.readReply(); err != nil || string(got) != want {
			t.Fatalf("on follower %s: %q, %v; want %q", subNode.id, got, err, want)
		}
	}
	w := mustDial(t, writeNode.addr)
	mustReply(t, w, "+OK\r\n", "SET", "kn:del", "v")
	mustReply(t, w, ":1\r\n", "DEL", "kn:del")
	expect(0, "del", "kn:del")
	mustReply(t, w, "+OK\r\n", "SET", "kn:lease", "v", "PX", "200")
	expect(0, "expired", "kn:lease") // the leader's timer, an Expire entry
	mustReply(t, w, "+OK\r\n", "SELECT", "5")
	mustReply(t, w, "+OK\r\n", "SET", "kn:past", "v", "PX", "100000")
	mustReply(t, w, "+OK\r\n", "SET", "kn:past", "v", "PXAT", "1000")
	expect(5, "expired", "kn:past")
	mustReply(t, w, "+OK\r\n", "SET", "kn:getdel", "v")
	mustReply(t, w, "$1\r\nv\r\n", "GETDEL", "kn:getdel")
	expect(5, "del", "kn:getdel")
	for _, s := range []*respConn{sub, leaderSub} {
		mustReply(t, s, "*2\r\n$4\r\npong\r\n$0\r\n\r\n", "PING") // nothing more on the follower, nothing on the leader
	}
	mustReply(t, cfg, "+OK\r\n", "CONFIG", "SET", "notify-keyspace-events", "")
}
