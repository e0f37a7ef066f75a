package tests

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// A client that connects the moment a fresh node answers PING is served: its first LOCK waits
// for the election instead of failing CLUSTERDOWN (a node answers PING long before it leads).
// The same for a restarted node, which must replay its log before it can serve.
func TestFirstContactIsServed(t *testing.T) {
	dir := t.TempDir()
	for start := range 2 {
		n := &node{dir: dir, raftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))), id: "n1"}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		if err := n.start(t, addr); err != nil {
			t.Fatal(err)
		}
		if err := n.WaitServing(addr, 20*time.Second, nil); err != nil { // PING only
			t.Fatal(err)
		}
		key := "first-" + strconv.Itoa(start)
		v, err := call(addr, "LOCK", key, "60000")
		if _, ok := v.(int64); !ok || err != nil {
			t.Errorf("start %d: LOCK right after the first PONG = %#v, %v; want a token", start, v, err)
		}
		if err := n.stop(); err != nil {
			t.Fatal(err)
		}
	}
}
