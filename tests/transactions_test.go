package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// WATCH with another client writing the key: EXEC replies nil, the same bytes as redis-server,
// in RESP2 (*-1) and RESP3 (_); without a write in between, EXEC runs.
func TestRedisCompatWatch(t *testing.T) {
	rs := startRedis(t)
	n := startNode(t, t.TempDir())
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			var got [2][]string
			for i, addr := range []string{rs.addr, n.addr} {
				a, b := mustDial(t, addr), mustDial(t, addr)
				if proto == 3 {
					a.do("HELLO", "3")
				}
				key := fmt.Sprintf("watch%d", proto)
				for _, step := range []struct {
					c   *respConn
					cmd []string
				}{
					{b, []string{"SET", key, "v0"}},
					{a, []string{"WATCH", key}},
					{b, []string{"SET", key, "v1"}}, // touched
					{a, []string{"MULTI"}},
					{a, []string{"SET", key, "mine"}},
					{a, []string{"EXEC"}},
					{a, []string{"GET", key}},
					{a, []string{"WATCH", key, key + ":other"}},
					{b, []string{"DEL", key + ":other"}}, // nothing to delete: not a change
					{a, []string{"MULTI"}},
					{a, []string{"SET", key, "mine"}},
					{a, []string{"EXEC"}},
					{a, []string{"GET", key}},
					{a, []string{"WATCH", key}},
					{b, []string{"PEXPIRE", key, "100000"}}, // a new lease is a change
					{a, []string{"MULTI"}},
					{a, []string{"DEL", key}},
					{a, []string{"EXEC"}},
					{a, []string{"WATCH", key}},
					{b, []string{"DEL", key}},
					{a, []string{"MULTI"}},
					{a, []string{"SET", key, "again"}},
					{a, []string{"EXEC"}},
					{a, []string{"EXISTS", key}},
				} {
					r, err := step.c.do(step.cmd...)
					if err != nil {
						t.Fatalf("%s %q: %v", addr, step.cmd, err)
					}
					got[i] = append(got[i], fmt.Sprintf("%q -> %q", step.cmd, r))
				}
			}
			if diff := strings.Join(diffLines(got[0], got[1]), "\n"); diff != "" {
				t.Errorf("replies differ (redis-server, then raftlock):\n%s", diff)
			}
		})
	}
}

func mustDial(t *testing.T, addr string) *respConn {
	t.Helper()
	c, err := dialRESP(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A transaction sent to a follower runs on the leader as one entry; a WATCH taken through the
// follower holds against writes made on another node; and a WATCH whose leader went away makes
// EXEC reply nil rather than run unchecked.
func TestTransactionsThroughFollower(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	f := c.others(l)
	a, b := mustDial(t, f[0].addr), mustDial(t, f[1].addr)
	do := func(conn *respConn, args ...string) string {
		t.Helper()
		r, err := conn.do(args...)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		return string(r)
	}
	do(a, "MULTI")
	do(a, "SET", "txf:a", "1")
	do(a, "SET", "txf:b", "2")
	do(a, "INCR", "txf:a")
	if got := do(a, "EXEC"); got != "*3\r\n+OK\r\n+OK\r\n:2\r\n" {
		t.Fatalf("EXEC through a follower = %q", got)
	}
	if got := do(b, "MGET", "txf:a", "txf:b"); got != "*2\r\n$1\r\n2\r\n$1\r\n2\r\n" {
		t.Errorf("MGET on another follower = %q", got)
	}
	// WATCH through a follower, touched through the other.
	do(a, "WATCH", "txf:a")
	do(b, "SET", "txf:a", "changed")
	do(a, "MULTI")
	do(a, "SET", "txf:a", "mine")
	if got := do(a, "EXEC"); got != "*-1\r\n" {
		t.Errorf("EXEC after a WATCHed key changed elsewhere = %q, want nil", got)
	}
	// WATCH, then SELECT: the upstream to the leader is dialled again for the other database,
	// and the watches with the old one are gone: nil.
	do(a, "WATCH", "txf:a")
	do(a, "SELECT", "1")
	do(a, "MULTI")
	do(a, "SET", "txf:y", "1")
	if got := do(a, "EXEC"); got != "*-1\r\n" {
		t.Errorf("EXEC after WATCH then SELECT through a follower = %q, want nil", got)
	}
	do(a, "SELECT", "0")
	// A command that changes the connection cannot ride in a forwarded transaction.
	do(a, "MULTI")
	do(a, "SET", "txf:z", "1")
	do(a, "CLIENT", "SETNAME", "x")
	if got := do(a, "EXEC"); !strings.HasPrefix(got, "-EXECABORT") {
		t.Errorf("EXEC of CLIENT SETNAME through a follower = %q, want EXECABORT", got)
	}
	// WATCH, then the leader moves: EXEC cannot be checked any more, so it is nil.
	do(a, "WATCH", "txf:b")
	if got := do(mustDial(t, l.addr), "RAFT", "TRANSFER"); got != "+OK\r\n" {
		t.Fatalf("RAFT TRANSFER = %q", got)
	}
	waitFor := time.Now().Add(10 * time.Second)
	for {
		if nl, err := c.findLeader(); err == nil && nl.id != l.id {
			break
		}
		if time.Now().After(waitFor) {
			t.Fatal("no new leader after RAFT TRANSFER")
		}
		time.Sleep(20 * time.Millisecond)
	}
	do(a, "MULTI")
	do(a, "SET", "txf:b", "unchecked")
	got := do(a, "EXEC")
	if got != "*-1\r\n" {
		t.Errorf("EXEC after the leader that held the WATCH lost office = %q, want nil", got)
	}
	if got := do(a, "GET", "txf:b"); got != "$1\r\n2\r\n" {
		t.Errorf("txf:b = %q after a nil EXEC, want the old value", got)
	}
}
