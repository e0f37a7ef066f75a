package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/raftnode"
)

// concurrencySpy counts how many of a connection's requests wait for their commit at once.
type concurrencySpy struct {
	*raftnode.Node
	waiting, most atomic.Int32
}

func (s *concurrencySpy) ExecYielding(ctx context.Context, keys [][]byte, eval func(fsm.View) []fsm.Command, around func(func())) ([]fsm.Result, error) {
	return s.Node.ExecYielding(ctx, keys, eval, func(wait func()) {
		around(func() {
			n := s.waiting.Add(1)
			for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
			}
			wait()
			s.waiting.Add(-1)
		})
	})
}

// A pipeline of lock commands on distinct keys is in flight together (one commit for many),
// and the replies still come in order with tokens in the order the commands were sent.
func TestPipelinedCommandsCommitTogether(t *testing.T) {
	spy := &concurrencySpy{Node: startNode(t)}
	addr, _ := serveNode(t, spy, nil)
	r := dialRaw(t, addr)
	const n = 64
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "*3\r\n$4\r\nLOCK\r\n$3\r\nk%02d\r\n$4\r\n5000\r\n", i)
	}
	r.nc.Write([]byte(b.String()))
	var prev int64
	for i := range n {
		reply, err := readReply(r.br)
		if err != nil {
			t.Fatal(err)
		}
		var tok int64
		if _, err := fmt.Sscanf(reply, ":%d\r\n", &tok); err != nil || tok <= prev {
			t.Fatalf("reply %d = %q; want a token above %d", i, reply, prev)
		}
		prev = tok
	}
	if most := spy.most.Load(); most < 2 {
		t.Errorf("at most %d pipelined command(s) waited for a commit at once; want several", most)
	}
	if got := r.do("DBSIZE"); got != fmt.Sprintf(":%d\r\n", n) {
		t.Errorf("DBSIZE = %q", got)
	}

	// Scripts that declare their keys pipeline too: the Redis unlock recipe, key by key.
	spy.most.Store(0)
	b.Reset()
	for i := range n {
		key := fmt.Sprintf("s%02d", i)
		fmt.Fprintf(&b, "*6\r\n$3\r\nSET\r\n$3\r\n%s\r\n$2\r\nme\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n5000\r\n", key)
		fmt.Fprintf(&b, "*5\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n1\r\n$3\r\n%s\r\n$2\r\nme\r\n", len(unlockScript), unlockScript, key)
	}
	r.nc.Write([]byte(b.String()))
	for i := range 2 * n {
		reply, err := readReply(r.br)
		if want := []string{"+OK\r\n", ":1\r\n"}[i%2]; err != nil || reply != want {
			t.Fatalf("reply %d = %q, %v; want %q", i, reply, err, want)
		}
	}
	if most := spy.most.Load(); most < 2 {
		t.Errorf("at most %d pipelined script(s) waited for a commit at once; want several", most)
	}
}

// unlockScript is the compare-and-delete unlock of the Redis lock recipe.
const unlockScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// Pipelined commands on the same key, and commands that run alone, see every earlier command
// of the connection: the pipeline means what it would mean sent one at a time.
func TestPipelineKeepsPerConnectionOrder(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	cmds := [][]string{
		{"LOCK", "a", "5000"},
		{"UNLOCK", "a"}, // the token LOCK just remembered
		{"LOCK", "a", "5000"},
		{"SET", "b", "v1", "NX", "PX", "5000"},
		{"GET", "b"},
		{"SET", "b", "v2", "XX"},
		{"GET", "b"},
		{"DBSIZE"}, // runs alone, after the rest
		{"DEL", "a", "b"},
		{"EXISTS", "a", "b"},
		{"PING"},
		{"LOCK", "c", "5000"},
		{"RENEW", "c", "9000"},
		{"PTTL", "c"},
		{"SET", "d", "me", "NX", "PX", "5000"},
		{"EVAL", unlockScript, "1", "d", "me"},
		{"EVAL", unlockScript, "1", "d", "me"}, // gone already
		{"EXISTS", "d"},
	}
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(c))
		for _, a := range c {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	r.nc.Write([]byte(b.String()))
	var got []string
	for range cmds {
		reply, err := readReply(r.br)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, reply)
	}
	want := []string{":?", ":1\r\n", ":?", "+OK\r\n", "$2\r\nv1\r\n", "+OK\r\n", "$2\r\nv2\r\n", ":2\r\n", ":2\r\n", ":0\r\n", "+PONG\r\n", ":?", ":1\r\n", ":?",
		"+OK\r\n", ":1\r\n", ":0\r\n", ":0\r\n"}
	for i, w := range want {
		if w == ":?" {
			if !strings.HasPrefix(got[i], ":") {
				t.Errorf("%v = %q; want an integer", cmds[i], got[i])
			}
			continue
		}
		if got[i] != w {
			t.Errorf("%v = %q; want %q", cmds[i], got[i], w)
		}
	}
	var ttl int
	if _, err := fmt.Sscanf(got[13], ":%d", &ttl); err != nil || ttl <= 5000 || ttl > 9000 {
		t.Errorf("PTTL after RENEW 9000 = %q", got[13])
	}
}

// watchLeader's timer callback reads the timer it re-arms: under -race this fails if the
// callback can run before the timer is stored (it did, for requests forwarded longer than one
// check).
func TestWatchLeaderRearms(t *testing.T) {
	_, s := startServer(t, nil)
	c := &conn{s: s}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	id, _ := s.node.LeaderClient()
	stop := c.watchLeader(id, a)
	time.Sleep(2*leaderCheckEvery + 50*time.Millisecond) // two checks, each re-arming
	stop()
}
