package server

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/tests/testutil"
)

// A script that loops must not stall requests on other keys: it holds the node's view lock for
// its budget at most, and runs outside it past that.

// sendOnly writes a command without reading its reply.
func (r *rawConn) sendOnly(args ...string) {
	r.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	r.nc.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(r.nc, b.String()); err != nil {
		r.t.Fatal(err)
	}
}

// replied reports whether a reply is waiting on the connection (within wait).
func (r *rawConn) replied(wait time.Duration) bool {
	r.nc.SetReadDeadline(time.Now().Add(wait))
	defer r.nc.SetReadDeadline(time.Time{})
	_, err := r.br.Peek(1)
	return err == nil
}

// reply reads the next reply.
func (r *rawConn) reply() string {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	reply, err := readReply(r.br)
	if err != nil {
		r.t.Fatalf("reading a reply: %v", err)
	}
	return reply
}

// TestScriptLoopDoesNotStallOtherKeys: while a script loops (with a time limit of a minute, so
// only SCRIPT KILL ends it), LOCK on another key is answered, and the script has not replied
// yet; then SCRIPT KILL stops it. Before, the LOCK waited for the script's end.
func TestScriptLoopDoesNotStallOtherKeys(t *testing.T) {
	addr, s := startServer(t, func(c *Config) { c.ScriptTimeout = time.Minute })
	a, b, c := dialRaw(t, addr), dialRaw(t, addr), dialRaw(t, addr)
	a.sendOnly("EVAL", "local i = 0 while true do i = i + 1 end", "1", "looping")
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("the script running", func() bool { return s.scripts.Running() == 1 }))
	for i := range 3 {
		if got := b.do("LOCK", fmt.Sprintf("other%d", i), "10000"); !strings.HasPrefix(got, ":") {
			t.Fatalf("LOCK other%d = %q, want a token", i, got)
		}
	}
	if a.replied(20 * time.Millisecond) {
		t.Fatalf("the script replied %q before SCRIPT KILL", a.reply())
	}
	// Running, or waiting between its run holding the view and its run without it: killed.
	if got := c.do("SCRIPT", "KILL"); got != "+OK\r\n" {
		t.Errorf("SCRIPT KILL = %q", got)
	}
	if got := a.reply(); !strings.HasPrefix(got, "-ERR Script killed by user with SCRIPT KILL...") {
		t.Errorf("the killed script replied %q", got)
	}
	if got := b.do("EXISTS", "looping"); got != ":0\r\n" {
		t.Errorf("EXISTS looping = %q", got)
	}
}

// readHook is a node whose ExecLocal calls hook with each key looked up: the reads of a script
// running outside the view lock (script_view.go).
type readHook struct {
	*raftnode.Replica
	mu   sync.Mutex
	hook func(key []byte)
}

type lookupSpy struct {
	node.View
	h *readHook
}

func (v lookupSpy) Lookup(key []byte) (fsm.Lock, time.Duration, bool) {
	v.h.mu.Lock()
	f := v.h.hook
	v.h.mu.Unlock()
	if f != nil {
		f(key)
	}
	return v.View.Lookup(key)
}

func (h *readHook) ExecLocal(eval func(node.View)) {
	h.Replica.ExecLocal(func(v node.View) { eval(lookupSpy{View: v, h: h}) })
}

// TestScriptRerunWhenItsReadsChange: a script that read a key before another client changed it
// runs again, and its reply and effects are those of the new value, never a mix.
func TestScriptRerunWhenItsReadsChange(t *testing.T) {
	h := &readHook{Replica: startNode(t)}
	addr, s := serveNode(t, h, func(c *Config) { c.ScriptTimeout = time.Minute })
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	if got := b.do("SET", "k", "old"); got != "+OK\r\n" {
		t.Fatalf("SET = %q", got)
	}
	read := make(chan struct{})
	var once sync.Once
	h.mu.Lock()
	h.hook = func(key []byte) {
		if string(key) == string(fsm.DBKey(0, []byte("k"))) {
			once.Do(func() { close(read) })
		}
	}
	h.mu.Unlock()
	before := s.scripts.Stats()
	a.sendOnly("EVAL", `local v = redis.call('get', KEYS[1])
		while redis.call('get', KEYS[2]) ~= 'go' do end
		redis.call('set', KEYS[3], v)
		return v`, "3", "k", "go", "out")
	select {
	case <-read: // the script read k without the view lock
	case <-time.After(10 * time.Second):
		t.Fatal("the script made no read outside the view lock")
	}
	if got := b.do("SET", "k", "new"); got != "+OK\r\n" {
		t.Fatalf("SET k new = %q", got)
	}
	if got := b.do("SET", "go", "go"); got != "+OK\r\n" {
		t.Fatalf("SET go = %q", got)
	}
	if got := a.reply(); got != "$3\r\nnew\r\n" {
		t.Errorf("the script replied %q, want the value it read on its run after k changed", got)
	}
	if got := b.do("GET", "out"); got != "$3\r\nnew\r\n" {
		t.Errorf("GET out = %q", got)
	}
	after := s.scripts.Stats()
	if runs := after.Runs - before.Runs; runs != 2 || after.OverBudget-before.OverBudget != 1 {
		t.Errorf("%d runs outside the view lock and %d over budget, want 2 and 1", runs, after.OverBudget-before.OverBudget)
	}
}

// TestScriptHostageReplies: through the server, the backtracking pattern stops at the
// time limit, SCRIPT KILL stops it inside the matcher, and a string.rep bomb gets the memory
// error. Before, the find ran 22 s (SCRIPT KILL answered OK and changed nothing) and the bomb
// allocated 1.34 GB.
func TestScriptHostageReplies(t *testing.T) {
	const find = `return string.find(string.rep('a', 28), string.rep('a?', 28) .. string.rep('a', 28))`
	t.Run("time limit", func(t *testing.T) {
		addr, _ := startServer(t, func(c *Config) { c.ScriptTimeout = 200 * time.Millisecond })
		a := dialRaw(t, addr)
		if got := a.do("EVAL", find, "0"); !strings.HasPrefix(got, "-ERR Script killed: it ran longer than the script time limit (200ms)") {
			t.Errorf("EVAL = %q", got)
		}
	})
	t.Run("SCRIPT KILL", func(t *testing.T) {
		addr, s := startServer(t, func(c *Config) { c.ScriptTimeout = time.Minute })
		a, c := dialRaw(t, addr), dialRaw(t, addr)
		a.sendOnly("EVAL", find, "0")
		testutil.WaitFor(t, 5*time.Second, testutil.Cond("the script running", func() bool { return s.scripts.Running() == 1 }))
		if got := c.do("SCRIPT", "KILL"); got != "+OK\r\n" {
			t.Errorf("SCRIPT KILL = %q", got)
		}
		if got := a.reply(); !strings.HasPrefix(got, "-ERR Script killed by user with SCRIPT KILL...") {
			t.Errorf("the killed script replied %q", got)
		}
	})
	t.Run("memory", func(t *testing.T) {
		addr, _ := startServer(t, func(c *Config) { c.Scripts.Memory = 64 << 20 })
		a := dialRaw(t, addr)
		if got := a.do("EVAL", `local t = {} for i = 1, 20 do t[i] = string.rep('x', 16 * 2^20) end return #t`, "0"); !strings.HasPrefix(got, "-ERR Script killed: it used more than the script memory limit (64 MiB)") {
			t.Errorf("EVAL = %q", got)
		}
	})
}

// TestScriptInsideExec: an EVAL queued in MULTI runs inside EXEC, which holds the view lock
// throughout (it is neither compiled nor rerun outside it), and a looping one is stopped by
// the transaction's time limit.
//
// The scripts of a transaction hold the view lock throughout, so they run execScriptTime in all
// however long the script time limit (here a minute): past it the looping one is killed with a
// reply that says why, and the others' effects stand.
func TestScriptInsideExec(t *testing.T) {
	addr, _ := startServer(t, func(c *Config) { c.ScriptTimeout = time.Minute })
	a := dialRaw(t, addr)
	for _, step := range []struct{ args []string }{
		{[]string{"MULTI"}},
		{[]string{"EVAL", "redis.call('set', KEYS[1], 'v') return redis.call('get', KEYS[1])", "1", "tk"}},
		{[]string{"EVAL", "local i = 0 while true do i = i + 1 end", "0"}},
	} {
		a.do(step.args...)
	}
	got := a.do("EXEC")
	if !strings.HasPrefix(got, "*2\r\n$1\r\nv\r\n-ERR Script killed: the scripts of a MULTI/EXEC may run 10ms in all") {
		t.Errorf("EXEC = %q", got)
	}
}

// TestScriptReadLogBounded: a script that runs past its time holding the view is checked
// holding it, so what it may read is bounded: 5000 keys pass, 10001 are refused with nothing
// written; a key read again and again counts once.
func TestScriptReadLogBounded(t *testing.T) {
	addr, s := startServer(t, func(c *Config) { c.ScriptTimeout = time.Minute })
	a := dialRaw(t, addr)
	const reads = `for i = 1, tonumber(ARGV[1]) do redis.call('get', ARGV[2] .. i) end
		local i = 0 while i < 2e5 do i = i + 1 end
		redis.call('set', KEYS[1], 'done') return 1`
	before := s.scripts.Stats().OverBudget
	if got := a.do("EVAL", reads, "1", "out1", "5000", "k"); got != ":1\r\n" {
		t.Errorf("5000 keys = %q", got)
	}
	if got := a.do("EVAL", `for i = 1, 20000 do redis.call('get', ARGV[1]) end
		local i = 0 while i < 2e5 do i = i + 1 end
		redis.call('set', KEYS[1], 'done') return 1`, "1", "out2", "same"); got != ":1\r\n" {
		t.Errorf("one key 20000 times = %q", got)
	}
	if got := a.do("EVAL", reads, "1", "out3", "10001", "k"); !strings.HasPrefix(got, "-ERR the script read more than 10000 keys") {
		t.Errorf("10001 keys = %q", got)
	}
	if got := a.do("MGET", "out1", "out2", "out3"); got != "*3\r\n$4\r\ndone\r\n$4\r\ndone\r\n$-1\r\n" {
		t.Errorf("MGET = %q", got)
	}
	if n := s.scripts.Stats().OverBudget - before; n == 0 {
		t.Errorf("no run went past its budget: the test did not test runs outside the lock")
	}
}
