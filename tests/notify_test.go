package tests

import (
	"fmt"
	"strings"
	"testing"
)

// TestRedisCompatKeyspaceNotifications compares keyspace notifications with redis-server's,
// byte for byte: CONFIG SET/GET notify-keyspace-events, and the del and expired events a
// subscriber gets on __keyspace@<db>__ and __keyevent@<db>__ (the events raftlock reports; the
// classes chosen keep redis-server's other events, set, expire and hdel, out of the transcript).
func TestRedisCompatKeyspaceNotifications(t *testing.T) {
	rs := startRedis(t)
	n := startNode(t, t.TempDir())
	type step struct {
		pub     bool     // the writer sends it; else the subscriber
		cmd     []string // nil: read one more message on the subscriber
		replies int
	}
	steps := []step{
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
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			var got [2][]string
			for i, addr := range []string{rs.addr, n.addr} {
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
				if _, err := pub.do("CONFIG", "SET", "notify-keyspace-events", ""); err != nil {
					t.Fatal(err)
				}
			}
			if diff := strings.Join(diffLines(got[0], got[1]), "\n"); diff != "" {
				t.Errorf("replies differ (redis-server, then raftlock):\n%s", diff)
			}
		})
	}
}
