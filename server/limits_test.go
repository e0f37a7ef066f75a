package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/tests/testutil"
)

// pingFast checks that another client is served promptly while a bound holds.
func pingFast(t *testing.T, addr string) {
	t.Helper()
	r := dialRaw(t, addr)
	start := time.Now()
	if got := r.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING = %q", got)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("a second client's PING took %v while the bound held", d)
	}
}

// closedSoon reports whether the server closes nc within d (reading and dropping anything).
func closedSoon(nc net.Conn, d time.Duration) bool {
	nc.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, nc)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

func multibulk(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

func TestMaxClientsBound(t *testing.T) {
	addr, s := startServer(t, func(c *Config) { c.MaxClients = 2 })
	first := dialRaw(t, addr)
	first.do("PING")
	dialRaw(t, addr).do("PING")
	testutil.WaitFor(t, time.Second, testutil.Cond("two clients", func() bool { return s.Clients() == 2 }))
	third := dialRaw(t, addr)
	third.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if got, _ := readReply(third.br); got != "-ERR max number of clients reached\r\n" {
		t.Errorf("third client got %q", got)
	}
	start := time.Now()
	if got := first.do("PING"); got != "+PONG\r\n" || time.Since(start) > 500*time.Millisecond {
		t.Errorf("PING of an admitted client = %q after %v", got, time.Since(start))
	}
}

func TestIdleTimeout(t *testing.T) {
	addr, _ := serveNode(t, newFakeNode(), func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	idle := dialRaw(t, addr)
	idle.do("PING")
	sub := dialRaw(t, addr)
	sub.do("SUBSCRIBE", "news")
	holder, blocked := dialRaw(t, addr), dialRaw(t, addr)
	holder.do("LOCK", "w", "100000")
	waited := make(chan string, 1)
	go func() { waited <- blocked.do("LOCK", "w", "1000", "WAIT", "1500") }()
	if !closedSoon(idle.nc, 2*time.Second) {
		t.Fatal("an idle client was not closed past the timeout")
	}
	// The blocked client waited 1.5 s, longer than the timeout, and is answered, not closed.
	if got := <-waited; got != "$-1\r\n" {
		t.Errorf("LOCK WAIT 1500 with a timeout of 300 ms = %q, want nil", got)
	}
	if got := blocked.do("PING"); got != "+PONG\r\n" {
		t.Errorf("a client blocked past the timeout: PING = %q", got)
	}
	if got := sub.do("PING"); !strings.Contains(got, "pong") {
		t.Errorf("a subscriber idle past the timeout: PING = %q", got)
	}
	pingFast(t, addr)
}

func TestMaxMemory(t *testing.T) {
	addr, s := startServer(t, func(c *Config) { c.MaxMemory = 1 }) // any heap is above it
	if !s.overMemory.Load() {
		t.Fatal("a heap of more than one byte is not above maxmemory 1")
	}
	r := dialRaw(t, addr)
	oom := "-OOM command not allowed when used memory > 'maxmemory'.\r\n"
	for _, cmd := range [][]string{{"LOCK", "k", "1000"}, {"SET", "s", "v"}, {"RPUSH", "l", "x"}} {
		if got := r.do(cmd...); got != oom {
			t.Errorf("%v past maxmemory = %q, want %q", cmd, got, oom)
		}
	}
	if got := r.do("EVAL", "return redis.call('SET', KEYS[1], 'v')", "1", "k"); !strings.Contains(got, "OOM command not allowed") {
		t.Errorf("a script's SET past maxmemory = %q", got)
	}
	// Reads, deletes, releases and renewals go on.
	for cmd, want := range map[string]string{"GET s": "$-1\r\n", "DEL s": ":0\r\n", "UNLOCK k 1": ":0\r\n", "RENEW k 1 1000": ":0\r\n", "PTTL k": ":-2\r\n"} {
		if got := r.do(strings.Fields(cmd)...); got != want {
			t.Errorf("%s past maxmemory = %q, want %q", cmd, got, want)
		}
	}
	pingFast(t, addr)
}

func TestMaxMemoryLetsHeldLocksGoOn(t *testing.T) {
	addr, s := startServer(t, func(c *Config) { c.MaxMemory = 1 << 50; c.MemorySample = time.Hour })
	r := dialRaw(t, addr)
	tok := r.do("LOCK", "k", "10000")
	if !strings.HasPrefix(tok, ":") {
		t.Fatalf("LOCK = %q", tok)
	}
	s.overMemory.Store(true) // as the sampler would past maxmemory
	if got := r.do("LOCK", "k2", "1000"); !strings.HasPrefix(got, "-OOM") {
		t.Errorf("LOCK past maxmemory = %q", got)
	}
	if got := r.do("RENEW", "k", strings.Trim(tok[1:], "\r\n"), "5000"); got != ":1\r\n" {
		t.Errorf("RENEW past maxmemory = %q", got)
	}
	if got := r.do("UNLOCK", "k"); got != ":1\r\n" {
		t.Errorf("UNLOCK past maxmemory = %q", got)
	}
}

// A client blocked in LOCK ... WAIT that pipelines big commands behind it holds at most its
// read-ahead budget (and one command) on the server.
func TestReadAheadBytes(t *testing.T) {
	const budget = 1 << 20
	addr, s := serveNode(t, newFakeNode(), func(c *Config) { c.ReadAheadBytes = budget })
	holder := dialRaw(t, addr)
	holder.do("LOCK", "w", "100000")
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	big := strings.Repeat("x", 512<<10)
	go func() {
		w := bufio.NewWriter(nc)
		w.WriteString(multibulk("LOCK", "w", "1000", "WAIT", "60000"))
		for range 64 { // 32 MiB behind the blocked LOCK
			w.WriteString(multibulk("SET", "v", big))
		}
		w.Flush()
	}()
	time.Sleep(300 * time.Millisecond) // let the client send what it can; the bound is checked below
	if held := s.readAhead.held(); held > budget+(600<<10) {
		t.Errorf("the connection holds %d bytes read ahead, want at most its budget %d and one command", held, budget)
	}
	pingFast(t, addr)
	holder.do("UNLOCK", "w") // the blocked LOCK is granted; the rest follow
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("every command ran", func() bool { return s.readAhead.held() == 0 }))
}

func TestTotalReadAheadBytes(t *testing.T) {
	addr, s := serveNode(t, newFakeNode(), func(c *Config) { c.TotalReadAheadBytes = 1 << 20 })
	holder := dialRaw(t, addr)
	holder.do("LOCK", "w", "100000")
	big := strings.Repeat("x", 256<<10)
	for range 4 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		go func() {
			w := bufio.NewWriter(nc)
			w.WriteString(multibulk("LOCK", "w", "1000", "WAIT", "60000"))
			for range 16 {
				w.WriteString(multibulk("SET", "v", big))
			}
			w.Flush()
		}()
	}
	time.Sleep(300 * time.Millisecond) // let the clients send what they can
	// Each connection may always read one command; beyond that the server's budget holds.
	if held := s.readAhead.held(); held > 1<<20+4*(300<<10) {
		t.Errorf("the server holds %d bytes read ahead, want at most about its budget of %d", held, 1<<20)
	}
	pingFast(t, addr)
}

// A subscriber that reads nothing is disconnected past its output limit, logged with why.
func TestOutputLimitDisconnectsASlowSubscriber(t *testing.T) {
	addr, srv := serveNode(t, newFakeNode(), func(c *Config) {
		c.OutputLimit = OutputLimit{Hard: 256 << 10, Soft: 128 << 10, SoftTime: time.Hour}
	})
	slow := dialRaw(t, addr)
	slow.nc.(*net.TCPConn).SetReadBuffer(4096) // the kernel holds little for it
	slow.do("SUBSCRIBE", "news")
	pub := dialRaw(t, addr)
	batch := strings.Repeat(multibulk("PUBLISH", "news", strings.Repeat("m", 4000)), 100)
	gone := false
	for i := 0; i < 100 && !gone; i++ { // up to 40 MB: more than the socket buffers hold
		pub.nc.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(pub.nc, batch)
		for range 100 {
			if _, err := readReply(pub.br); err != nil {
				t.Fatal(err)
			}
		}
		gone = pub.do("PUBSUB", "NUMSUB", "news") == "*2\r\n$4\r\nnews\r\n:0\r\n"
	}
	if !gone {
		t.Fatal("a subscriber that reads nothing was never disconnected")
	}
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("the slow subscriber's connection closed", func() bool { return srv.Clients() == 1 }))
	pingFast(t, addr)
}

// A client that stops reading its replies is disconnected once its socket accepts nothing
// for WriteStall.
func TestOutputLimitWriteStall(t *testing.T) {
	addr, s := serveNode(t, newFakeNode(), func(c *Config) {
		c.OutputLimit = DefaultOutputLimit()
		c.OutputLimit.WriteStall = 300 * time.Millisecond
	})
	r := dialRaw(t, addr)
	big := multibulk("ECHO", strings.Repeat("x", 1<<20-64))
	go func() {
		w := bufio.NewWriter(r.nc)
		for range 500 { // 500 MiB of replies, never read
			w.WriteString(big)
		}
		w.Flush()
	}()
	testutil.WaitFor(t, 10*time.Second, testutil.Cond("the non-reading client is closed", func() bool { return s.Clients() == 0 }))
	pingFast(t, addr)
}

// SCRIPT KILL from another connection stops a running script (any: its effects replicate only
// at its end, so a killed script has none), while a third client's PING stays fast.
func TestScriptKillFromAnotherConnection(t *testing.T) {
	addr, _ := startServer(t, func(c *Config) { c.ScriptTimeout = time.Minute })
	admin := dialRaw(t, addr)
	if got := admin.do("SCRIPT", "KILL"); got != "-NOTBUSY No scripts in execution right now.\r\n" {
		t.Errorf("SCRIPT KILL with none running = %q", got)
	}
	runner := dialRaw(t, addr)
	got := make(chan string, 1)
	go func() {
		got <- runner.do("EVAL", "redis.call('SET', KEYS[1], 'written') while true do end", "1", "wrote")
	}()
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("the script runs", func() bool {
		return admin.do("SCRIPT", "KILL") == "+OK\r\n"
	}))
	pingFast(t, addr)
	select {
	case r := <-got:
		if !strings.HasPrefix(r, "-ERR Script killed by user with SCRIPT KILL...") {
			t.Errorf("killed EVAL = %q", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SCRIPT KILL did not stop the script")
	}
	if r := admin.do("EXISTS", "wrote"); r != ":0\r\n" {
		t.Errorf("the killed script's SET applied: EXISTS = %q", r)
	}
}

// The EVAL retained 1.28 GB in 0.36 s: now it fails at the script memory limit.
func TestScriptMemoryBound(t *testing.T) {
	addr, _ := startServer(t, func(c *Config) {
		c.ScriptTimeout = 20 * time.Second
		c.Scripts = DefaultScriptLimits()
		c.Scripts.Memory = 64 << 20
	})
	r := dialRaw(t, addr)
	start := time.Now()
	got := r.do("EVAL", "local t = {} for i=1,1e8 do t[i] = string.rep('x', 1000) end", "0")
	if !strings.HasPrefix(got, "-ERR Script killed: it used more than the script memory limit (64 MiB)") {
		t.Errorf("EVAL = %q", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stopped after %v", d)
	}
	pingFast(t, addr)
}

func TestScriptCacheBound(t *testing.T) {
	addr, _ := startServer(t, func(c *Config) {
		c.Scripts = DefaultScriptLimits()
		c.Scripts.CacheScripts = 2
	})
	r := dialRaw(t, addr)
	sha1 := r.do("SCRIPT", "LOAD", "return 1")
	r.do("EVAL", "return 2", "0")
	full := "-ERR the script cache is full (at most 2 scripts and 67108864 bytes): run stored scripts with EVALSHA, or empty the cache with SCRIPT FLUSH\r\n"
	if got := r.do("SCRIPT", "LOAD", "return 3"); got != full {
		t.Errorf("SCRIPT LOAD past the cap = %q", got)
	}
	if got := r.do("EVAL", "return 3", "0"); got != full {
		t.Errorf("EVAL of a new script past the cap = %q", got)
	}
	if got := r.do("EVALSHA", strings.TrimSpace(sha1[strings.Index(sha1, "\n")+1:]), "0"); got != ":1\r\n" {
		t.Errorf("EVALSHA of a stored script = %q", got)
	}
	if got := r.do("EVAL", "return 2", "0"); got != ":2\r\n" {
		t.Errorf("EVAL of a stored script = %q", got)
	}
	if got := r.do("EVAL_RO", "return 4", "0"); got != ":4\r\n" {
		t.Errorf("EVAL_RO (not cached) = %q", got)
	}
	r.do("SCRIPT", "FLUSH")
	if got := r.do("SCRIPT", "LOAD", "return 3"); !strings.HasPrefix(got, "$40") {
		t.Errorf("SCRIPT LOAD after FLUSH = %q", got)
	}
	pingFast(t, addr)
}

func TestRaftSnapshotAndDigestRate(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	if got := r.do("RAFT", "SNAPSHOT"); got != "+OK\r\n" {
		t.Fatalf("first RAFT SNAPSHOT = %q", got)
	}
	if got := r.do("RAFT", "SNAPSHOT"); !strings.HasPrefix(got, "-ERR RAFT SNAPSHOT too soon: at most one every 5s on this node") {
		t.Errorf("second RAFT SNAPSHOT at once = %q", got)
	}
	if got := r.do("RAFT", "DIGEST"); !strings.HasPrefix(got, "*2") {
		t.Fatalf("first RAFT DIGEST = %q", got)
	}
	if got := r.do("RAFT", "DIGEST"); !strings.HasPrefix(got, "-ERR RAFT DIGEST too soon") {
		t.Errorf("second RAFT DIGEST at once = %q", got)
	}
	pingFast(t, addr)
	var g rateGate
	g.every = time.Hour
	if g.enter("X") != "" || !strings.HasPrefix(g.enter("X"), "ERR X is busy") {
		t.Error("a second X while one runs is not refused as busy")
	}
}

// watching is how many requests s's waiters hold in all and on key (watching it, or queued
// on it in the node).
func watching(s *Server, key string) (total, onKey int) {
	s.waiters.mu.Lock()
	defer s.waiters.mu.Unlock()
	return s.waiters.mu.n, len(s.waiters.mu.byKey[key]) + s.waiters.mu.queued[key]
}

// Blocked requests past MaxWaitersPerKey or MaxWaiters are refused at once; one that need not
// wait is still served.
func TestWaitersBound(t *testing.T) {
	addr, s := startServer(t, func(c *Config) { c.MaxWaitersPerKey = 2; c.MaxWaiters = 3 })
	holder := dialRaw(t, addr)
	if got := holder.do("LOCK", "w", "100000"); !strings.HasPrefix(got, ":") {
		t.Fatalf("LOCK = %q", got)
	}
	key := string(fsm.DBKey(0, []byte("w")))
	replies := make(chan string, 3)
	for range 2 {
		c := dialRaw(t, addr)
		go func() { replies <- c.do("LOCK", "w", "1000", "WAIT", "10000") }()
	}
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("two waiters on w", func() bool {
		_, on := watching(s, key)
		return on == 2
	}))
	third := dialRaw(t, addr)
	start := time.Now()
	if got, want := third.do("LOCK", "w", "1000", "WAIT", "10000"), "-ERR too many clients waiting on this key (at most 2)\r\n"; got != want {
		t.Errorf("a third LOCK WAIT on w = %q, want %q", got, want)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("the refusal took %v", d)
	}
	if got := third.do("LOCK", "w", "1000"); got != "$-1\r\n" {
		t.Errorf("LOCK without WAIT past the bound = %q, want nil", got)
	}
	popper := dialRaw(t, addr)
	go func() { replies <- popper.do("BLPOP", "q", "10") }()
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("three waiters", func() bool {
		total, _ := watching(s, key)
		return total == 3
	}))
	if got, want := third.do("BRPOP", "other", "10"), "-ERR too many clients waiting on this node (at most 3)\r\n"; got != want {
		t.Errorf("a fourth blocked request = %q, want %q", got, want)
	}
	third.do("RPUSH", "other", "x") // LPOP needs no waiting: still served
	if got := third.do("BLPOP", "other", "10"); got != "*2\r\n$5\r\nother\r\n$1\r\nx\r\n" {
		t.Errorf("BLPOP of a non-empty list past the bound = %q", got)
	}
	pingFast(t, addr)
	// The waiters are served as before, and leave no trace.
	holder.do("UNLOCK", "w")
	third.do("RPUSH", "q", "e")
	var tokens, pops int
	for range 3 {
		switch got := <-replies; {
		case strings.HasPrefix(got, ":"):
			tokens++
		case got == "*2\r\n$1\r\nq\r\n$1\r\ne\r\n":
			pops++
		default:
			t.Errorf("a waiter got %q", got)
		}
	}
	if tokens != 2 || pops != 1 {
		t.Errorf("the waiters got %d tokens and %d pops, want 2 (the second once the first's lease ends) and 1", tokens, pops)
	}
	testutil.WaitFor(t, 12*time.Second, testutil.Cond("no waiters", func() bool {
		total, _ := watching(s, key)
		return total == 0
	}))
}

// CLIENT TRACKING ... BCAST takes at most MaxTrackingPrefixes prefixes of at most
// MaxTrackingPrefixBytes together; a refused call leaves the connection's tracking as it was.
func TestTrackingPrefixBound(t *testing.T) {
	addr, _ := serveNode(t, newFakeNode(), func(c *Config) { c.MaxTrackingPrefixes = 2; c.MaxTrackingPrefixBytes = 8 })
	bc := dialRaw(t, addr)
	bc.do("HELLO", "3")
	for _, tc := range []struct {
		prefixes []string
		want     string
	}{
		{[]string{"a", "b"}, "+OK\r\n"},
		{[]string{"a", "b", "c"}, "-ERR too many tracking prefixes (at most 2)\r\n"},
		{[]string{"abcd", "efghi"}, "-ERR tracking prefixes too long (at most 8 bytes in all)\r\n"},
	} {
		args := []string{"CLIENT", "TRACKING", "ON", "BCAST"}
		for _, p := range tc.prefixes {
			args = append(args, "PREFIX", p)
		}
		if got := bc.do(args...); got != tc.want {
			t.Errorf("%q = %q, want %q", tc.prefixes, got, tc.want)
		}
	}
	if got := bc.do("CLIENT", "TRACKINGINFO"); !strings.HasSuffix(got, "$8\r\nprefixes\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n") {
		t.Errorf("TRACKINGINFO after the refusals = %q, want prefixes a and b", got)
	}
	pingFast(t, addr)
}
