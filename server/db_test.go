package server

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// SELECT n: each database holds its own keys, counted by DBSIZE, reached by scripts, locks and
// transactions in it; invalidations and errors name the client's key, not the table's.
func TestDatabases(t *testing.T) {
	addr, _ := startFake(t)
	r := dialRaw(t, addr)
	for _, s := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "k", "zero"}, "+OK\r\n"},
		{[]string{"SELECT", "3"}, "+OK\r\n"},
		{[]string{"GET", "k"}, "$-1\r\n"},
		{[]string{"SET", "k", "three"}, "+OK\r\n"},
		{[]string{"SET", "k2", "x"}, "+OK\r\n"},
		{[]string{"DBSIZE"}, ":2\r\n"},
		{[]string{"EVAL", "return {KEYS[1], redis.call('get', KEYS[1])}", "1", "k"}, "*2\r\n$1\r\nk\r\n$5\r\nthree\r\n"},
		{[]string{"UNLOCK", "nolock"}, "-ERR this connection holds no lock on 'nolock': use UNLOCK with the token\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"GET", "k"}, "+QUEUED\r\n"},
		{[]string{"SELECT", "0"}, "+QUEUED\r\n"},
		{[]string{"GET", "k"}, "+QUEUED\r\n"},
		{[]string{"EXEC"}, "*3\r\n$5\r\nthree\r\n+OK\r\n$4\r\nzero\r\n"},
		{[]string{"DBSIZE"}, ":1\r\n"},
		{[]string{"SELECT", "16"}, "-ERR DB index is out of range\r\n"},
		{[]string{"SELECT", "-1"}, "-ERR DB index is out of range\r\n"},
		{[]string{"SELECT", "x"}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"GET", "k2"}, "$-1\r\n"}, // RESET goes back to database 0
	} {
		if got := r.do(s.args...); got != s.want {
			t.Errorf("%q = %q, want %q", s.args, got, s.want)
		}
	}
	// LOCK and a token-less UNLOCK in database 5.
	r.do("SELECT", "5")
	if got := r.do("LOCK", "job", "10000"); !strings.HasPrefix(got, ":") {
		t.Fatalf("LOCK in database 5 = %q", got)
	}
	if got := r.do("UNLOCK", "job"); got != ":1\r\n" {
		t.Errorf("UNLOCK job in database 5 = %q", got)
	}
	// An invalidation names the client's key.
	tr := dialRaw(t, addr)
	tr.do("HELLO", "3")
	tr.do("SELECT", "7")
	tr.do("CLIENT", "TRACKING", "ON")
	tr.do("GET", "watched")
	w := dialRaw(t, addr)
	w.do("SELECT", "7")
	w.do("SET", "watched", "v")
	tr.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := readReply(tr.br); err != nil || got != ">2\r\n$10\r\ninvalidate\r\n*1\r\n$7\r\nwatched\r\n" {
		t.Errorf("invalidation = %q, %v", got, err)
	}
}

// A command whose code panics (here: the node underneath) costs its connection, not the node:
// the client hears an error, and other clients are served.
func TestPanicClosesOnlyItsConnection(t *testing.T) {
	f := newFakeNode()
	f.execHook = func(context.Context, [][]byte) {
		if panicNext.Swap(false) {
			panic("boom")
		}
	}
	addr, _ := serveNode(t, f, nil)
	victim := dialRaw(t, addr)
	panicNext.Store(true)
	if got := victim.do("GET", "k"); !strings.HasPrefix(got, "-ERR internal error") {
		t.Errorf("reply to the panicking command = %q", got)
	}
	if got := dialRaw(t, addr).do("SET", "k", "v"); got != "+OK\r\n" {
		t.Errorf("another client after the panic: SET = %q", got)
	}
}

var panicNext atomic.Bool

// Past MaxKeys, commands that may create a key are refused with Redis's OOM error (in a script
// and in MULTI too); reads, deletes and renewals go on, and a delete makes room again.
func TestMaxKeys(t *testing.T) {
	f := newFakeNode()
	addr, _ := serveNode(t, f, func(c *Config) { c.MaxKeys = 2 })
	r := dialRaw(t, addr)
	oom := "-" + errOOM + "\r\n"
	for _, s := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "a", "1"}, "+OK\r\n"},
		{[]string{"LOCK", "b", "10000"}, ":?"},
		{[]string{"SET", "c", "1"}, oom},
		{[]string{"LOCK", "c", "10000"}, oom},
		{[]string{"INCR", "c"}, oom},
		{[]string{"EVAL", "return redis.pcall('set', KEYS[1], 'x')", "1", "c"}, "-ERR " + errOOM + "\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"SETNX", "c", "x"}, oom},
		{[]string{"EXEC"}, "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{[]string{"GET", "a"}, "$1\r\n1\r\n"},
		{[]string{"PEXPIRE", "a", "100000"}, ":1\r\n"},
		{[]string{"DEL", "a"}, ":1\r\n"},
		{[]string{"SET", "c", "1"}, "+OK\r\n"},
	} {
		got := r.do(s.args...)
		if s.want == ":?" && strings.HasPrefix(got, ":") {
			continue
		}
		if got != s.want {
			t.Errorf("%q = %q, want %q", s.args, got, s.want)
		}
	}
}

// CLIENT LIST shows every connection of the node with what it set; CLIENT KILL closes one.
func TestClientListAndKill(t *testing.T) {
	addr, _ := startFake(t)
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	b.do("CLIENT", "SETNAME", "worker-b")
	b.do("SELECT", "4")
	list := a.do("CLIENT", "LIST")
	if !strings.Contains(list, "name=worker-b db=4 user=default resp=2") || strings.Count(list, "id=") != 2 {
		t.Fatalf("CLIENT LIST = %q", list)
	}
	id := strings.TrimPrefix(strings.TrimSpace(b.do("CLIENT", "ID")), ":")
	if got := a.do("CLIENT", "KILL", "ID", id); got != ":1\r\n" {
		t.Fatalf("CLIENT KILL ID %s = %q", id, got)
	}
	b.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := readReply(b.br); err == nil {
		t.Error("the killed connection still answers")
	}
	if got := a.do("PING"); got != "+PONG\r\n" {
		t.Errorf("the killer's PING = %q", got)
	}
}

// A command's table keys are the same whether its arguments came from the reader (argArena.copy:
// made in place, no allocation) or from anywhere else (a script's redis.call: new slices), and
// the client's arguments are left as they were either way.
func TestWithDBKeysInPlaceAndNot(t *testing.T) {
	mset, get := lookupCommand([]byte("mset")), lookupCommand([]byte("get"))
	client := [][]byte{[]byte("MSET"), []byte("k1"), []byte("v1"), []byte(""), []byte("v2"), []byte("key3"), []byte("v3")}
	want := [][]byte{[]byte("MSET"), []byte("\x05k1"), []byte("v1"), []byte("\x05"), []byte("v2"), []byte("\x05key3"), []byte("v3")}
	wire := new(argArena).copy(client, 0)
	built := make([][]byte, 0, 64) // spare capacity, but not the reader's: never written past its length
	for _, a := range client {
		built = append(built, bytes.Clone(a))
	}
	for name, args := range map[string][][]byte{"wire": wire, "built": built} {
		got := withDBKeys(mset, args, 5)
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Errorf("%s: table args %q, want %q", name, got, want)
		}
		if !slices.EqualFunc(args, client, bytes.Equal) {
			t.Errorf("%s: the client's args became %q", name, args)
		}
	}
	if extra := built[len(built):cap(built)]; slices.ContainsFunc(extra, func(b []byte) bool { return b != nil }) {
		t.Errorf("withDBKeys wrote past the length of args it did not make")
	}
	wire = new(argArena).copy([][]byte{[]byte("GET"), []byte("somekey")}, 0)
	if n := testing.AllocsPerRun(100, func() { withDBKeys(get, wire, 2) }); n != 0 {
		t.Errorf("withDBKeys on the reader's args: %v allocations, want 0", n)
	}
	if got := withDBKeys(get, wire, 2); string(got[1]) != "\x02somekey" || string(wire[1]) != "somekey" {
		t.Errorf("GET's table key %q (client's %q)", got[1], wire[1])
	}
	// A list cut from the reader's is not the reader's: its keys are copied.
	sub := wire[1:]
	if k := tableKeyRoom(sub, 0); k != nil {
		t.Errorf("tableKeyRoom of a cut list = %q, want nil", k)
	}
}
