package server

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// A pipeline of lock commands on distinct keys is in flight together (one commit for many),
// and the replies still come in order with tokens in the order the commands were sent.
func TestPipelinedCommandsCommitTogether(t *testing.T) {
	addr, spy := startFake(t)
	r := dialRaw(t, addr)
	const n = 64
	// The fake node commits nothing until all n are proposed: a connection that waited for each
	// commit before proposing the next would stall here until holdTimeout.
	spy.holdCommits(n)
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
	if most := spy.most.Load(); most < n-1 {
		t.Errorf("at most %d pipelined command(s) waited for a commit at once; want all %d", most, n)
	}
	if got := r.do("DBSIZE"); got != fmt.Sprintf(":%d\r\n", n) {
		t.Errorf("DBSIZE = %q", got)
	}

	// Scripts that declare their keys pipeline too: the Redis lock recipe's SET NX, then its
	// compare-and-delete unlock, key by key.
	for _, step := range []struct {
		cmd   func(key string) string
		reply string
	}{
		{func(key string) string {
			return fmt.Sprintf("*6\r\n$3\r\nSET\r\n$3\r\n%s\r\n$2\r\nme\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n5000\r\n", key)
		}, "+OK\r\n"},
		{func(key string) string {
			return fmt.Sprintf("*5\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n1\r\n$3\r\n%s\r\n$2\r\nme\r\n", len(unlockScript), unlockScript, key)
		}, ":1\r\n"},
	} {
		spy.most.Store(0)
		spy.holdCommits(n)
		b.Reset()
		for i := range n {
			b.WriteString(step.cmd(fmt.Sprintf("s%02d", i)))
		}
		r.nc.Write([]byte(b.String()))
		for i := range n {
			if reply, err := readReply(r.br); err != nil || reply != step.reply {
				t.Fatalf("reply %d = %q, %v; want %q", i, reply, err, step.reply)
			}
		}
		if most := spy.most.Load(); most < n-1 {
			t.Errorf("at most %d pipelined command(s) waited for a commit at once; want all %d", most, n)
		}
	}
}

// unlockScript is the compare-and-delete unlock of the Redis lock recipe.
const unlockScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// Pipelined commands on the same key, and commands that run alone, see every earlier command
// of the connection: the pipeline means what it would mean sent one at a time.
func TestPipelineKeepsPerConnectionOrder(t *testing.T) {
	addr, _ := startFake(t)
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
	got := sendPipeline(t, r, cmds)
	checkReplies(t, cmds, got, []string{":?", ":1\r\n", ":?", "+OK\r\n", "$2\r\nv1\r\n", "+OK\r\n", "$2\r\nv2\r\n", ":2\r\n", ":2\r\n", ":0\r\n", "+PONG\r\n", ":?", ":1\r\n", ":?",
		"+OK\r\n", ":1\r\n", ":0\r\n", ":0\r\n"})
	var ttl int
	if _, err := fmt.Sscanf(got[13], ":%d", &ttl); err != nil || ttl <= 5000 || ttl > 9000 {
		t.Errorf("PTTL after RENEW 9000 = %q", got[13])
	}
}

// The forward watch cuts a forwarded request's wait short once this node sees another leader
// than the one it waits on and the request has waited a check, and leaves one that waits on
// the leader alone.
func TestForwardWatchCutsWaitsOnAnotherLeader(t *testing.T) {
	_, s := startServer(t, nil)
	id := s.node.Leadership().ID
	stale, staleFar := net.Pipe()
	current, currentFar := net.Pipe()
	for _, c := range []net.Conn{stale, staleFar, current, currentFar} {
		defer c.Close()
	}
	s.forwards.watch(stale, "gone")
	s.forwards.watch(current, id)
	start := time.Now()
	stale.SetReadDeadline(start.Add(5 * time.Second)) // a watch that never cuts fails below, not by hanging
	_, err := stale.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a wait on a leader that is not the node's: Read returned %v; want its deadline cut", err)
	}
	if waited := time.Since(start); waited < leaderCheckEvery || waited > 2*leaderCheckEvery+time.Second {
		t.Errorf("cut after %v; want after one check (%v), within two", waited, leaderCheckEvery)
	}
	t1 := time.Now()
	current.SetReadDeadline(t1.Add(2*leaderCheckEvery + 50*time.Millisecond)) // two checks
	if _, err := current.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() || time.Since(t1) < 2*leaderCheckEvery {
		t.Errorf("a wait on the leader: Read returned %v after %v; want it to run to its own deadline", err, time.Since(t1))
	}
	s.forwards.unwatch(stale, "gone")
	s.forwards.unwatch(current, id)
	s.forwards.mu.Lock()
	defer s.forwards.mu.Unlock()
	if len(s.forwards.inflight) != 0 {
		t.Errorf("%d waits still registered after unwatch", len(s.forwards.inflight))
	}
}

// The list of commands in flight keeps their order as it slides along its fixed backing array
// and moves back to the array's start.
func TestPipelineListKeepsOrderAcrossItsArray(t *testing.T) {
	var p pipeline
	var want []*inflight
	next := 0
	pushN := func(n int) {
		for range n {
			f := &inflight{keys: [][]byte{[]byte(fmt.Sprint(next))}}
			next++
			p.push(f)
			want = append(want, f)
		}
	}
	popN := func(n int) {
		for range n {
			if p.inflight[0] != want[0] {
				t.Fatalf("head is %s, want %s", p.inflight[0].keys[0], want[0].keys[0])
			}
			p.inflight[0] = nil
			p.inflight = p.inflight[1:]
			want = want[1:]
		}
	}
	pushN(maxInFlight)
	for round := range 3 * maxInFlight {
		popN(1 + round%5)
		pushN(1 + round%5)
		if len(p.inflight) != len(want) || &p.inflight[:cap(p.inflight)][cap(p.inflight)-1] != &p.room[maxInFlight-1] {
			t.Fatalf("round %d: %d in flight (want %d), or the list left its array", round, len(p.inflight), len(want))
		}
		for i := range want {
			if p.inflight[i] != want[i] {
				t.Fatalf("round %d: position %d is %s, want %s", round, i, p.inflight[i].keys[0], want[i].keys[0])
			}
		}
	}
}
