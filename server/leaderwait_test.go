package server

import (
	"strings"
	"testing"
	"time"
)

// First contact: a request that needs the leader, sent while the node knows none, waits for
// one (up to LeaderWait) instead of failing at once; with none in time it is told CLUSTERDOWN.
func TestRequestWaitsForALeader(t *testing.T) {
	f := newFakeNode()
	f.setLeader(false)
	addr, _ := serveNode(t, f, func(c *Config) { c.LeaderWait = 5 * time.Second })
	r := dialRaw(t, addr)
	if got := r.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING = %q: connection commands never wait", got)
	}
	got := make(chan string, 1)
	go func() { got <- r.do("LOCK", "first", "10000") }()
	select {
	case reply := <-got:
		t.Fatalf("LOCK answered %q with no leader known; want it to wait", reply)
	case <-time.After(100 * time.Millisecond):
	}
	f.setLeader(true)
	select {
	case reply := <-got:
		if !strings.HasPrefix(reply, ":") {
			t.Fatalf("LOCK once a leader is known = %q, want a token", reply)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("LOCK still waiting after the leader became known")
	}
}

func TestRequestGivesUpWithoutALeader(t *testing.T) {
	f := newFakeNode()
	f.setLeader(false)
	const wait = 200 * time.Millisecond
	addr, _ := serveNode(t, f, func(c *Config) { c.LeaderWait = wait })
	r := dialRaw(t, addr)
	start := time.Now()
	if got := r.do("GET", "k"); got != "-"+errNoLeader+"\r\n" {
		t.Errorf("GET with no leader = %q, want CLUSTERDOWN", got)
	}
	if d := time.Since(start); d < wait {
		t.Errorf("CLUSTERDOWN after %v, before LeaderWait %v", d, wait)
	}
	// READONLY reads are served from the node's own table at once.
	r.do("READONLY")
	if got := r.do("GET", "k"); got != "$-1\r\n" {
		t.Errorf("READONLY GET with no leader = %q, want nil", got)
	}
}
