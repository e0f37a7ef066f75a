package server

import (
	"context"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/tests/testutil"
)

// intReply is the integer of a RESP integer reply, or fails the test.
func intReply(t *testing.T, what, got string) string {
	t.Helper()
	if !strings.HasPrefix(got, ":") {
		t.Fatalf("%s = %q, want an integer", what, got)
	}
	return strings.TrimSuffix(got[1:], "\r\n")
}

// Shares: each holder its own token and lease; a plain lock waits for all of them; UNLOCK,
// RENEW and VALIDATE work per share; LOCKINFO and LOCKS list them.
func TestSharedLocks(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	a := intReply(t, "LOCK SHARED", r.do("LOCK", "doc", "60000", "SHARED", "OWNER", "reader-a"))
	b := intReply(t, "LOCK SHARED", r.do("LOCK", "doc", "60000", "SHARED", "OWNER", "reader-b"))
	if a == b {
		t.Fatalf("two shares with one token %s", a)
	}
	if got := r.do("LOCK", "doc", "1000"); got != "$-1\r\n" && got != "_\r\n" {
		t.Fatalf("LOCK of a shared key = %q, want nil", got)
	}
	if got := r.do("SET", "doc", "x", "NX"); got != "$-1\r\n" {
		t.Fatalf("SET NX of a shared key = %q, want nil", got)
	}
	if got := r.do("EXISTS", "doc"); got != ":0\r\n" {
		t.Fatalf("EXISTS of a shared key = %q: the shares are not a Redis key", got)
	}
	// The same owner asking again keeps its token.
	if got := intReply(t, "LOCK SHARED again", r.do("LOCK", "doc", "60000", "SHARED", "OWNER", "reader-a")); got != a {
		t.Fatalf("the same owner's share again: token %s, want %s", got, a)
	}
	info := r.do("LOCKINFO", "doc")
	if !strings.Contains(info, "shared") || !strings.Contains(info, "reader-a") || !strings.Contains(info, "reader-b") {
		t.Fatalf("LOCKINFO of a shared lock = %q", info)
	}
	if got := r.do("VALIDATE", "doc", b); got != ":1\r\n" {
		t.Fatalf("VALIDATE of a share = %q", got)
	}
	if got := r.do("RENEW", "doc", b, "90000"); got != ":1\r\n" {
		t.Fatalf("RENEW of a share = %q", got)
	}
	locks := r.do("LOCKS", "TYPE", "shared", "COUNT", "100")
	if strings.Count(locks, "reader-") != 2 {
		t.Fatalf("LOCKS TYPE shared = %q, want both shares", locks)
	}
	if got := r.do("UNLOCK", "doc", a); got != ":1\r\n" {
		t.Fatalf("UNLOCK of a share = %q", got)
	}
	if got := r.do("VALIDATE", "doc", a); got != ":0\r\n" {
		t.Fatalf("VALIDATE of a released share = %q", got)
	}
	r.do("UNLOCK", "doc", b)
	if got := r.do("LOCKINFO", "doc"); got != "$-1\r\n" && got != "_\r\n" {
		t.Fatalf("LOCKINFO with no share left = %q", got)
	}
	if got := r.do("LOCK", "doc", "1000"); !strings.HasPrefix(got, ":") {
		t.Fatalf("LOCK once every share is gone = %q", got)
	}
}

// A semaphore grants up to its permits, refuses another count while held, and SEMRELEASE gives a
// permit back.
func TestSemaphores(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	p1 := intReply(t, "SEMACQUIRE", r.do("SEMACQUIRE", "pool", "2", "60000"))
	intReply(t, "SEMACQUIRE", r.do("SEMACQUIRE", "pool", "2", "60000"))
	if got := r.do("SEMACQUIRE", "pool", "2", "60000"); got != "$-1\r\n" {
		t.Fatalf("a third permit of two = %q, want nil", got)
	}
	if got := r.do("SEMACQUIRE", "pool", "3", "60000"); !strings.HasPrefix(got, "-ERR the semaphore at this key has 2 permits") {
		t.Fatalf("another count = %q, want an error", got)
	}
	if got := r.do("LOCK", "pool", "1000", "SHARED"); !strings.HasPrefix(got, "-ERR") {
		t.Fatalf("a share of a semaphore = %q, want an error", got)
	}
	if got := r.do("SEMRELEASE", "pool", p1); got != ":1\r\n" {
		t.Fatalf("SEMRELEASE = %q", got)
	}
	if got := r.do("SEMRELEASE", "pool", p1); got != ":0\r\n" {
		t.Fatalf("SEMRELEASE again = %q", got)
	}
	if got := r.do("SEMACQUIRE", "pool", "2", "60000"); !strings.HasPrefix(got, ":") {
		t.Fatalf("the permit given back, taken again = %q", got)
	}
	for _, bad := range [][]string{
		{"SEMACQUIRE", "pool", "0", "1000"},
		{"SEMACQUIRE", "pool", "70000", "1000"},
		{"SEMACQUIRE", "pool", "2", "0"},
		{"SEMACQUIRE", "pool", "2", "1000", "DELAY", "60001"},
		{"SEMACQUIRE", "pool", "2", "1000", "SHARED"},
		{"SEMRELEASE", "pool", "x"},
	} {
		if got := r.do(bad...); !strings.HasPrefix(got, "-ERR") {
			t.Errorf("%q = %q, want an error", bad, got)
		}
	}
	if got := r.do("LOCKS", "TYPE", "semaphore"); strings.Count(got, "semaphore") != 2 {
		t.Fatalf("LOCKS TYPE semaphore = %q, want two permits", got)
	}
}

// MLOCK takes every key or none, in one entry.
func TestMLock(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	got := r.do("MLOCK", "60000", "a", "b", "c", "OWNER", "me")
	if !regexp.MustCompile(`^\*3\r\n:\d+\r\n:\d+\r\n:\d+\r\n$`).MatchString(got) {
		t.Fatalf("MLOCK of three free keys = %q", got)
	}
	if got := r.do("MLOCK", "60000", "c", "d"); got != "*-1\r\n" && got != "$-1\r\n" && got != "_\r\n" {
		t.Fatalf("MLOCK of a held and a free key = %q, want nil", got)
	}
	if got := r.do("EXISTS", "d"); got != ":0\r\n" {
		t.Fatalf("the refused MLOCK took d: EXISTS = %q", got)
	}
	for _, bad := range [][]string{
		{"MLOCK", "60000", "x", "x"},
		{"MLOCK", "0", "x"},
		{"MLOCK", "60000", "x", "WAIT", "-1"},
	} {
		if got := r.do(bad...); !strings.HasPrefix(got, "-ERR") {
			t.Errorf("%q = %q, want an error", bad, got)
		}
	}
}

// A plain LOCK ... WAIT behind shares waits in LOCKWAITERS, and a later share does not overtake
// it: it gets the key once every share is gone.
func TestWriterNotOvertaken(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	share := intReply(t, "LOCK SHARED", r.do("LOCK", "k", "60000", "SHARED"))
	w := dialRaw(t, addr)
	w.sendOnly("LOCK", "k", "60000", "OWNER", "writer", "WAIT", "10000")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(r.do("LOCKWAITERS", "k"), "writer") {
		if time.Now().After(deadline) {
			t.Fatalf("the writer never shows in LOCKWAITERS: %q", r.do("LOCKWAITERS", "k"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := r.do("LOCK", "k", "60000", "SHARED"); got != "$-1\r\n" {
		t.Fatalf("a share while a writer waits = %q, want nil", got)
	}
	if got := r.do("UNLOCK", "k", share); got != ":1\r\n" {
		t.Fatalf("UNLOCK of the share = %q", got)
	}
	if !w.replied(5 * time.Second) {
		t.Fatal("the writer was not granted the key once the share was gone")
	}
	if got := w.reply(); !strings.HasPrefix(got, ":") {
		t.Fatalf("the writer's LOCK = %q", got)
	}
	if got := r.do("LOCKWAITERS", "k"); got != "*0\r\n" {
		t.Fatalf("LOCKWAITERS after the grant = %q", got)
	}
}

// A waiter at the head that gives up (its WAIT passes) hands the key on to the one behind it: a
// share behind a writer that timed out is granted at once, not at the end of its own WAIT.
func TestHeadThatLeavesHandsOn(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	intReply(t, "LOCK SHARED", r.do("LOCK", "k", "60000", "SHARED"))
	writer := dialRaw(t, addr)
	writer.sendOnly("LOCK", "k", "60000", "OWNER", "writer", "WAIT", "300")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(r.do("LOCKWAITERS", "k"), "writer") {
		if time.Now().After(deadline) {
			t.Fatal("the writer never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	reader := dialRaw(t, addr)
	start := time.Now()
	got := reader.do("LOCK", "k", "60000", "SHARED", "WAIT", "20000")
	if !strings.HasPrefix(got, ":") {
		t.Fatalf("the share behind the writer = %q", got)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("the share waited %v: the writer's leaving did not hand the key on", waited)
	}
	if got := writer.reply(); got != "$-1\r\n" {
		t.Fatalf("the writer's LOCK = %q, want nil after its WAIT", got)
	}
}

// SET ... NX inside a script, on a key with shares, is refused (nil), as outside: the script is
// not aborted at apply.
func TestSetNXInScriptOnSharedKey(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	intReply(t, "LOCK SHARED", r.do("LOCK", "k", "60000", "SHARED"))
	if got := r.do("EVAL", "return redis.call('SET', KEYS[1], 'v', 'NX', 'PX', 1000)", "1", "k"); got != "$-1\r\n" {
		t.Fatalf("SET NX in a script on a shared key = %q, want nil", got)
	}
	if got := r.do("SETNX", "k", "v"); got != ":0\r\n" {
		t.Fatalf("SETNX on a shared key = %q, want 0", got)
	}
	if got := r.do("INCR", "k"); got != ":1\r\n" {
		t.Fatalf("INCR beside the shares = %q: a write that takes no lock is as in Redis", got)
	}
}

// LOCKS lists only the keys the user may read: an owner is a string's value.
func TestLocksHonoursKeyPermissions(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	r.do("SET", "app:1", "mine")
	r.do("SET", "secret", "theirs")
	if got := r.do("ACL", "SETUSER", "app", "on", ">pw", "+@all", "~app:*"); got != "+OK\r\n" {
		t.Fatalf("ACL SETUSER = %q", got)
	}
	u := dialRaw(t, addr)
	if got := u.do("AUTH", "app", "pw"); got != "+OK\r\n" {
		t.Fatalf("AUTH = %q", got)
	}
	got := u.do("LOCKS", "COUNT", "100")
	if !strings.Contains(got, "app:1") || strings.Contains(got, "secret") || strings.Contains(got, "theirs") {
		t.Fatalf("LOCKS as a user of ~app:* = %q", got)
	}
}

// In a cluster that cannot queue yet (a rolling upgrade from before the queues: log format 5),
// LOCK ... WAIT still waits: it tries again until the key is free or its WAIT passes.
func TestLockWaitBeforeTheQueues(t *testing.T) {
	addr, _ := serveNode(t, newFakeNodeIn(fsm.FormatBatch), nil)
	holder, waiter := dialRaw(t, addr), dialRaw(t, addr)
	tok := intReply(t, "LOCK", holder.do("LOCK", "k", "60000"))
	got := make(chan string, 1)
	go func() { got <- waiter.do("LOCK", "k", "60000", "WAIT", "5000") }()
	time.Sleep(50 * time.Millisecond) // let it wait; the assertion does not depend on it
	holder.do("UNLOCK", "k", tok)
	select {
	case r := <-got:
		if !strings.HasPrefix(r, ":") {
			t.Fatalf("LOCK ... WAIT before the queues = %q, want a token", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("LOCK ... WAIT before the queues was not granted after the release")
	}
	if got := waiter.do("LOCK", "k", "60000", "WAIT", "200"); got != "$-1\r\n" {
		t.Fatalf("LOCK ... WAIT on a held key before the queues = %q, want nil after its WAIT", got)
	}
}

// A share and a permit taken for a client that hung up before its reply are released (ghost-lock
// cleanup), as a LOCK's grant is: the node's commits reach the requests only once the client is
// gone (execAfterHangUp).
func TestKindsGhostsReleased(t *testing.T) {
	n := newExecAfterHangUp(startNode(t), 0)
	addr, _ := serveNode(t, n, nil)
	check := dialRaw(t, addr)
	for _, c := range []struct{ key, cmd string }{
		{"pool", multibulk("SEMACQUIRE", "pool", "2", "60000")},
		{"doc", multibulk("LOCK", "doc", "60000", "SHARED")},
	} {
		n.delayed.Store(1)
		r := dialRaw(t, addr)
		r.nc.Write([]byte(c.cmd))
		testutil.WaitFor(t, 5*time.Second, testutil.Cond(c.key+" proposed", func() bool { return n.delayed.Load() < 1 }))
		r.nc.Close()
		testutil.WaitFor(t, 10*time.Second, testutil.Cond(c.key+"'s ghost released", func() bool {
			got := check.do("LOCKINFO", c.key)
			return got == "$-1\r\n" || got == "_\r\n"
		}))
	}
}

// execAfterHangUp is a node whose first delayed requests' outcomes reach them only once their
// client is gone (or 5 s passed): a client that hangs up before its reply.
type execAfterHangUp struct {
	*raftnode.Replica
	delayed atomic.Int32
}

func (n *execAfterHangUp) Exec(ctx context.Context, keys [][]byte, eval node.Eval, around func(wait func())) ([]fsm.Result, error) {
	if n.delayed.Add(-1) < 0 {
		return n.Replica.Exec(ctx, keys, eval, around)
	}
	return n.Replica.Exec(ctx, keys, eval, func(wait func()) {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
		if around != nil {
			around(wait)
			return
		}
		wait()
	})
}

func newExecAfterHangUp(n *raftnode.Replica, delayed int32) *execAfterHangUp {
	e := &execAfterHangUp{Replica: n}
	e.delayed.Store(delayed)
	return e
}
