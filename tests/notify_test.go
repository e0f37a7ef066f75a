package tests

import "testing"

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
