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
				got[i] = append(got[i], runSteps(t, addr, []connStep{
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
				})...)
			}
			if diff := strings.Join(diffLines(got[0], got[1]), "\n"); diff != "" {
				t.Errorf("replies differ (redis-server, then raftlock):\n%s", diff)
			}
		})
	}
}

// TestRedisCompatWatchTouch: a write command touches the keys it writes even when it changes
// nothing (Redis's signalModifiedKey), so EXEC of a client that WATCHes one replies nil; a write
// that errors, or that decides not to write, touches nothing. Each case runs on redis-server and
// raftlock with a watcher and a writer connection, in RESP2 and RESP3, and every reply must be
// byte-identical.
func TestRedisCompatWatchTouch(t *testing.T) {
	rs := startRedis(t)
	n := startNode(t, t.TempDir())
	// In each case "k" is the watched key; setup runs first on the writer, then the watcher
	// WATCHes k, the writer sends touch, and the watcher runs MULTI, INCR k:n, EXEC.
	cases := []struct {
		name         string
		setup, touch [][]string
	}{
		{"INCRBY 0", [][]string{{"SET", "k", "5"}}, [][]string{{"INCRBY", "k", "0"}}},
		{"DECRBY 0", [][]string{{"SET", "k", "5"}}, [][]string{{"DECRBY", "k", "0"}}},
		{"INCR of a non-integer", [][]string{{"SET", "k", "abc"}}, [][]string{{"INCR", "k"}}},
		{"INCRBY of a hash", [][]string{{"HSET", "k", "f", "1"}}, [][]string{{"INCRBY", "k", "1"}}},
		{"SET same KEEPTTL", [][]string{{"SET", "k", "v", "PX", "100000"}}, [][]string{{"SET", "k", "v", "KEEPTTL"}}},
		{"SET same", [][]string{{"SET", "k", "v"}}, [][]string{{"SET", "k", "v"}}},
		{"SET NX of a held key", [][]string{{"SET", "k", "v"}}, [][]string{{"SET", "k", "w", "NX"}}},
		{"SET XX of a missing key", nil, [][]string{{"SET", "k", "w", "XX"}}},
		{"SET GET of a hash", [][]string{{"HSET", "k", "f", "1"}}, [][]string{{"SET", "k", "v", "GET"}}},
		{"SETNX of a held key", [][]string{{"SET", "k", "v"}}, [][]string{{"SETNX", "k", "w"}}},
		{"GETSET same", [][]string{{"SET", "k", "v"}}, [][]string{{"GETSET", "k", "v"}}},
		{"MSET same", [][]string{{"SET", "k", "v"}}, [][]string{{"MSET", "k", "v", "k:other", "x"}}},
		{"GETEX without options", [][]string{{"SET", "k", "v"}}, [][]string{{"GETEX", "k"}}},
		{"GETEX PERSIST without expiry", [][]string{{"SET", "k", "v"}}, [][]string{{"GETEX", "k", "PERSIST"}}},
		{"GETDEL of a missing key", nil, [][]string{{"GETDEL", "k"}}},
		{"PERSIST without expiry", [][]string{{"SET", "k", "v"}}, [][]string{{"PERSIST", "k"}}},
		{"EXPIRE GT without expiry", [][]string{{"SET", "k", "v"}}, [][]string{{"EXPIRE", "k", "100", "GT"}}},
		{"PEXPIRE of a missing key", nil, [][]string{{"PEXPIRE", "k", "100000"}}},
		{"HSET same value", [][]string{{"HSET", "k", "f", "v"}}, [][]string{{"HSET", "k", "f", "v"}}},
		{"HMSET same value", [][]string{{"HSET", "k", "f", "v"}}, [][]string{{"HMSET", "k", "f", "v"}}},
		{"HSETNX of a field there", [][]string{{"HSET", "k", "f", "v"}}, [][]string{{"HSETNX", "k", "f", "w"}}},
		{"HDEL of a missing field", [][]string{{"HSET", "k", "f", "v"}}, [][]string{{"HDEL", "k", "g"}}},
		{"HINCRBY 0", [][]string{{"HSET", "k", "f", "1"}}, [][]string{{"HINCRBY", "k", "f", "0"}}},
		{"HINCRBY of a non-integer", [][]string{{"HSET", "k", "f", "x"}}, [][]string{{"HINCRBY", "k", "f", "1"}}},
		{"HSET of a string", [][]string{{"SET", "k", "v"}}, [][]string{{"HSET", "k", "f", "v"}}},
		{"SADD of a member there", [][]string{{"SADD", "k", "m"}}, [][]string{{"SADD", "k", "m"}}},
		{"SREM of a missing member", [][]string{{"SADD", "k", "m"}}, [][]string{{"SREM", "k", "x"}}},
		{"ZADD same score", [][]string{{"ZADD", "k", "1", "m"}}, [][]string{{"ZADD", "k", "1", "m"}}},
		{"ZADD GT lower", [][]string{{"ZADD", "k", "5", "m"}}, [][]string{{"ZADD", "k", "GT", "1", "m"}}},
		{"ZADD new score", [][]string{{"ZADD", "k", "1", "m"}}, [][]string{{"ZADD", "k", "2", "m"}}},
		{"ZINCRBY 0", [][]string{{"ZADD", "k", "1", "m"}}, [][]string{{"ZINCRBY", "k", "0", "m"}}},
		{"ZREM of a missing member", [][]string{{"ZADD", "k", "1", "m"}}, [][]string{{"ZREM", "k", "x"}}},
		{"ZREMRANGEBYSCORE of none", [][]string{{"ZADD", "k", "1", "m"}}, [][]string{{"ZREMRANGEBYSCORE", "k", "5", "9"}}},
		{"LTRIM keeping every element", [][]string{{"RPUSH", "k", "a", "b"}}, [][]string{{"LTRIM", "k", "0", "-1"}}},
		{"LTRIM of a missing key", nil, [][]string{{"LTRIM", "k", "0", "-1"}}},
		{"LTRIM of a string", [][]string{{"SET", "k", "v"}}, [][]string{{"LTRIM", "k", "0", "-1"}}},
		{"LSET same element", [][]string{{"RPUSH", "k", "a"}}, [][]string{{"LSET", "k", "0", "a"}}},
		{"LREM of none", [][]string{{"RPUSH", "k", "a"}}, [][]string{{"LREM", "k", "0", "x"}}},
		{"LPOP 0", [][]string{{"RPUSH", "k", "a"}}, [][]string{{"LPOP", "k", "0"}}},
		{"LPUSHX of a missing key", nil, [][]string{{"LPUSHX", "k", "a"}}},
		{"RPUSH of a string", [][]string{{"SET", "k", "v"}}, [][]string{{"RPUSH", "k", "a"}}},
		{"a script's INCRBY 0", [][]string{{"SET", "k", "5"}}, [][]string{{"EVAL", "return redis.call('incrby', KEYS[1], 0)", "1", "k"}}},
		{"a transaction's INCRBY 0", [][]string{{"SET", "k", "5"}}, [][]string{{"MULTI"}, {"INCRBY", "k", "0"}, {"EXEC"}}},
		{"the watcher's own INCRBY 0", [][]string{{"SET", "k", "5"}}, [][]string{{"mine", "INCRBY", "k", "0"}}},
	}
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			var got [2][]string
			for i, addr := range []string{rs.addr, n.addr} {
				a, b := mustDial(t, addr), mustDial(t, addr)
				if proto == 3 {
					a.do("HELLO", "3")
				}
				for j, tc := range cases {
					prefix := fmt.Sprintf("touch%d:%d:", proto, j)
					key := func(args []string) []string {
						out := append([]string(nil), args...)
						for x, arg := range out {
							if arg == "k" || strings.HasPrefix(arg, "k:") {
								out[x] = prefix + arg
							}
						}
						return out
					}
					step := func(c *respConn, args []string) {
						r, err := c.do(key(args)...)
						if err != nil {
							t.Fatalf("%s %s %q: %v", addr, tc.name, args, err)
						}
						got[i] = append(got[i], fmt.Sprintf("%s: %q -> %q", tc.name, args, r))
					}
					for _, cmd := range tc.setup {
						step(b, cmd)
					}
					step(a, []string{"WATCH", "k"})
					for _, cmd := range tc.touch {
						if cmd[0] == "mine" {
							step(a, cmd[1:])
						} else {
							step(b, cmd)
						}
					}
					step(a, []string{"MULTI"})
					step(a, []string{"INCR", "k:n"})
					step(a, []string{"EXEC"})
					step(b, []string{"DEL", "k", "k:n", "k:other"})
				}
			}
			if diff := strings.Join(diffLines(got[0], got[1]), "\n"); diff != "" {
				t.Errorf("replies differ (redis-server, then raftlock):\n%s", diff)
			}
		})
	}
}

// EXEC refused before it runs forgets the watches, as Redis's execCommandAbort: a write to a
// key watched before it does not fail the next transaction.
func TestRedisCompatExecAbortUnwatches(t *testing.T) {
	rs := startRedis(t)
	n := startNode(t, t.TempDir())
	var got [2][]string
	for i, addr := range []string{rs.addr, n.addr} {
		a, b := mustDial(t, addr), mustDial(t, addr)
		got[i] = append(got[i], runSteps(t, addr, []connStep{
			{a, []string{"WATCH", "abort:k"}},
			{a, []string{"MULTI"}},
			{a, []string{"SET", "abort:k", "mine"}},
			{a, []string{"EXEC", "x"}},
			{b, []string{"SET", "abort:k", "theirs"}},
			{a, []string{"MULTI"}},
			{a, []string{"GET", "abort:k"}},
			{a, []string{"EXEC"}},
			{a, []string{"DEL", "abort:k"}},
		})...)
	}
	if diff := strings.Join(diffLines(got[0], got[1]), "\n"); diff != "" {
		t.Errorf("replies differ (redis-server, then raftlock):\n%s", diff)
	}
}

// connStep is one command of a transcript, on one of the test's connections.
type connStep struct {
	c   *respConn
	cmd []string
}

// runSteps sends each step's command on its connection and returns the transcript, a line per
// step: the command and its raw reply (for comparing one server's with another's).
func runSteps(t *testing.T, addr string, steps []connStep) []string {
	t.Helper()
	var out []string
	for _, step := range steps {
		r, err := step.c.do(step.cmd...)
		if err != nil {
			t.Fatalf("%s %q: %v", addr, step.cmd, err)
		}
		out = append(out, fmt.Sprintf("%q -> %q", step.cmd, r))
	}
	return out
}

// mustReply sends args on conn and fails the test unless the raw reply is want.
func mustReply(t *testing.T, conn *respConn, want string, args ...string) {
	t.Helper()
	if got, err := conn.do(args...); err != nil || string(got) != want {
		t.Fatalf("%q = %q, %v; want %q", args, got, err, want)
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
	// A write that changes nothing, through the other follower, touches the watch too: the
	// leader evaluates it, and the watch lives there.
	do(a, "WATCH", "txf:b")
	do(b, "SET", "txf:b", "2", "KEEPTTL")
	do(a, "MULTI")
	do(a, "SET", "txf:b", "mine")
	if got := do(a, "EXEC"); got != "*-1\r\n" {
		t.Errorf("EXEC after a WATCHed key was set to its own value elsewhere = %q, want nil", got)
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
