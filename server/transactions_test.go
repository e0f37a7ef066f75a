package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/tests/testutil"
)

// An EXEC refused before it runs ends the transaction, as Redis's execCommandAbort: EXECABORT
// names why, the next EXEC finds no MULTI, and the connection's watches are gone with it.
func TestExecRefusedEndsTransaction(t *testing.T) {
	addr, _ := startServer(t, func(c *Config) { c.MaxKeys = 1 })
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	for _, s := range []struct {
		c          *rawConn
		args       []string
		want, note string
	}{
		{a, []string{"MULTI"}, "+OK\r\n", ""},
		{a, []string{"SET", "q", "1"}, "+QUEUED\r\n", "queued while the table has room"},
		{b, []string{"SET", "full", "1"}, "+OK\r\n", "the table is full now"},
		{a, []string{"EXEC"}, "-EXECABORT Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'.\r\n", "the key bound, checked again at EXEC"},
		{a, []string{"EXEC"}, "-ERR EXEC without MULTI\r\n", "the refusal ended the transaction"},
		{b, []string{"DEL", "full"}, ":1\r\n", ""},
		// A refused EXEC forgets the watches: a write after it does not fail the next EXEC.
		{a, []string{"WATCH", "w"}, "+OK\r\n", ""},
		{a, []string{"EXEC", "x"}, "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n", "wrong arity, outside MULTI"},
		{b, []string{"SET", "w", "1"}, "+OK\r\n", "a write to the key no longer watched"},
		{a, []string{"MULTI"}, "+OK\r\n", ""},
		{a, []string{"GET", "w"}, "+QUEUED\r\n", ""},
		{a, []string{"EXEC"}, "*1\r\n$1\r\n1\r\n", "runs: nothing is watched"},
	} {
		if got := s.c.do(s.args...); got != s.want {
			t.Errorf("%q (%s) = %q, want %q", s.args, s.note, got, s.want)
		}
	}
}

// EXEC refused by the user's permissions aborts the transaction with the NOPERM text, as in
// Redis 7.0.
func TestExecNotPermitted(t *testing.T) {
	addr, _ := startServer(t, nil)
	c := dialRaw(t, addr)
	for _, s := range [][2]string{
		{"ACL SETUSER u on nopass +@all -exec ~*", "+OK\r\n"},
		{"AUTH u x", "+OK\r\n"},
		{"MULTI", "+OK\r\n"},
		{"SET a 1", "+QUEUED\r\n"},
		{"EXEC", "-EXECABORT Transaction discarded because of: NOPERM this user has no permissions to run the 'exec' command\r\n"},
		{"EXEC", "-EXECABORT Transaction discarded because of: NOPERM this user has no permissions to run the 'exec' command\r\n"},
		{"AUTH default x", "+OK\r\n"},
		{"GET a", "$-1\r\n"},
	} {
		if got := c.do(strings.Fields(s[0])...); got != s[1] {
			t.Errorf("%s = %q, want %q", s[0], got, s[1])
		}
	}
}

// The watch registry holds a connection's keys from WATCH until UNWATCH, EXEC, DISCARD, RESET or
// the connection's end, and nothing once no connection watches: writes then skip it.
func TestWatchRegistryForgets(t *testing.T) {
	addr, s := startServer(t, nil)
	watchedKeys := func() int64 { return s.watches.keys.Load() }
	c := dialRaw(t, addr)
	for _, end := range []string{"UNWATCH", "MULTI DISCARD", "MULTI EXEC", "EXEC x", "RESET"} {
		if got := c.do("WATCH", "a", "b", "a"); got != "+OK\r\n" {
			t.Fatalf("WATCH = %q", got)
		}
		c.do("WATCH", "b")
		if n := watchedKeys(); n != 2 {
			t.Fatalf("after WATCH a b a, WATCH b: %d keys in the registry, want 2", n)
		}
		if end == "EXEC x" {
			c.do("EXEC", "x")
		} else {
			for _, cmd := range strings.Fields(end) {
				c.do(cmd)
			}
		}
		if n := watchedKeys(); n != 0 {
			t.Errorf("after %s: %d keys in the registry, want 0", end, n)
		}
	}
	gone := dialRaw(t, addr)
	gone.do("WATCH", "a")
	gone.nc.Close()
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("a closed connection's watches forgotten", func() bool { return watchedKeys() == 0 }))
	s.watches.mu.Lock()
	left := len(s.watches.mu.byKey)
	s.watches.mu.Unlock()
	if left != 0 {
		t.Errorf("%d keys still listed in the registry", left)
	}
}

// A write that changes nothing (INCRBY k 0, a no-op LTRIM) touches the watches of its key: the
// watcher's EXEC replies nil. One that errors (WRONGTYPE) does not.
func TestWatchTouchedByNoopWrite(t *testing.T) {
	addr, _ := startServer(t, nil)
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	for _, st := range []struct {
		c          *rawConn
		args       []string
		want, note string
	}{
		{b, []string{"SET", "n", "1"}, "+OK\r\n", ""},
		{b, []string{"RPUSH", "l", "x"}, ":1\r\n", ""},
		{a, []string{"WATCH", "n"}, "+OK\r\n", ""},
		{b, []string{"INCRBY", "n", "0"}, ":1\r\n", "changes nothing"},
		{a, []string{"MULTI"}, "+OK\r\n", ""},
		{a, []string{"INCR", "n"}, "+QUEUED\r\n", ""},
		{a, []string{"EXEC"}, "*-1\r\n", "touched by INCRBY 0"},
		{a, []string{"WATCH", "n", "l"}, "+OK\r\n", ""},
		{b, []string{"LTRIM", "n", "0", "-1"}, "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", "an error"},
		{a, []string{"MULTI"}, "+OK\r\n", ""},
		{a, []string{"INCR", "n"}, "+QUEUED\r\n", ""},
		{a, []string{"EXEC"}, "*1\r\n:2\r\n", "not touched by an error"},
		{a, []string{"WATCH", "l"}, "+OK\r\n", ""},
		{b, []string{"LTRIM", "l", "0", "-1"}, "+OK\r\n", "keeps every element"},
		{a, []string{"MULTI"}, "+OK\r\n", ""},
		{a, []string{"INCR", "n"}, "+QUEUED\r\n", ""},
		{a, []string{"EXEC"}, "*-1\r\n", "touched by LTRIM"},
	} {
		if got := st.c.do(st.args...); got != st.want {
			t.Errorf("%q (%s) = %q, want %q", st.args, st.note, got, st.want)
		}
	}
}

// evalTwice is a Replica whose evaluations run twice, the first result dropped: the Replica contract
// allows an evaluation to run more than once.
type evalTwice struct{ *fakeNode }

func (n evalTwice) Exec(ctx context.Context, keys [][]byte, eval node.Eval, around func(wait func())) ([]fsm.Result, error) {
	return n.fakeNode.Exec(ctx, keys, func(v node.View) []fsm.Command {
		eval(v)
		return eval(v)
	}, around)
}

// EXEC's own commands do not touch its watches, even when its evaluation runs again: Redis
// unwatches before it runs them.
func TestExecOwnWritesDoNotTouch(t *testing.T) {
	addr, _ := serveNode(t, evalTwice{newFakeNode()}, nil)
	c := dialRaw(t, addr)
	for _, st := range [][2]string{
		{"SET n 1", "+OK\r\n"},
		{"WATCH n", "+OK\r\n"},
		{"MULTI", "+OK\r\n"},
		{"INCRBY n 0", "+QUEUED\r\n"},
		{"INCR n", "+QUEUED\r\n"},
		{"EXEC", "*2\r\n:1\r\n:2\r\n"},
		{"WATCH n", "+OK\r\n"},
		{"INCRBY n 0", ":2\r\n"}, // the watcher's own write before MULTI touches, as in Redis
		{"MULTI", "+OK\r\n"},
		{"INCR n", "+QUEUED\r\n"},
		{"EXEC", "*-1\r\n"},
	} {
		if got := c.do(strings.Fields(st[0])...); got != st[1] {
			t.Errorf("%s = %q, want %q", st[0], got, st[1])
		}
	}
}

// TestWatchedKeysAreBounded: a connection that WATCHes key after key with no EXEC, DISCARD or
// UNWATCH keeps at most maxWatchedKeys: past them its watches go (the registry forgets them)
// and its next EXEC fails as on a touched key, once; a WATCH of more keys than the bound at
// once is refused.
func TestWatchedKeysAreBounded(t *testing.T) {
	addr, s := startServer(t, func(c *Config) {
		c.Limits = resp.DefaultLimits()
		c.Limits.MaxArgs = maxWatchedKeys + 2 // room for one WATCH of too many keys
	})
	r := dialRaw(t, addr)
	for i := range maxWatchedKeys {
		if got := r.do("WATCH", "w"+itoa(int64(i))); got != "+OK\r\n" {
			t.Fatalf("WATCH %d = %q", i, got)
		}
	}
	if n := s.watches.keys.Load(); n != maxWatchedKeys {
		t.Fatalf("watched keys = %d, want %d", n, maxWatchedKeys)
	}
	if got := r.do("WATCH", "one-more"); got != "+OK\r\n" {
		t.Fatalf("WATCH past the bound = %q", got)
	}
	if n := s.watches.keys.Load(); n != 0 {
		t.Fatalf("watched keys after the bound = %d, want 0 (let go)", n)
	}
	r.do("MULTI")
	r.do("SET", "x", "1")
	if got := r.do("EXEC"); got != "*-1\r\n" {
		t.Fatalf("EXEC after the bound = %q, want a nil array", got)
	}
	if got := r.do("EXISTS", "x"); got != ":0\r\n" {
		t.Fatalf("the failed EXEC wrote x: EXISTS = %q", got)
	}
	// The failed EXEC unwatched: the retry runs.
	r.do("WATCH", "x")
	r.do("MULTI")
	r.do("SET", "x", "1")
	if got := r.do("EXEC"); got != "*1\r\n+OK\r\n" {
		t.Fatalf("EXEC retried = %q", got)
	}

	args := []string{"WATCH"}
	for i := range maxWatchedKeys + 1 {
		args = append(args, "b"+itoa(int64(i)))
	}
	if got := r.do(args...); !strings.HasPrefix(got, "-ERR too many keys to WATCH") {
		t.Fatalf("WATCH of %d keys at once = %.60q, want the error", maxWatchedKeys+1, got)
	}
	if n := s.watches.keys.Load(); n != 0 {
		t.Fatalf("watched keys after a refused WATCH = %d, want 0", n)
	}
}
