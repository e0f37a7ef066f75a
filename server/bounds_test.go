package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// Subscriptions are bounded in count and name size, per connection and per node. Past
// each bound a (P|S)SUBSCRIBE subscribes to none of its names and replies an error naming it.
func TestSubscriptionBounds(t *testing.T) {
	for _, cfg := range nodeConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			addr, s := serveNode(t, newFakeNode(), secure(cfg.secured))
			lim := DefaultSubscriptionLimits()
			if lim.Name != 1024 || lim.PatternName != 256 || lim.PerConn != 10_000 || lim.PerNode != 100_000 || lim.Patterns != 1_000 {
				t.Fatalf("defaults = %+v, want the README's", lim)
			}

			c := adminConn(t, addr, cfg.secured)
			long := strings.Repeat("n", 1<<20)
			if got := c.do("SUBSCRIBE", "ok", long); !strings.HasPrefix(got, "-ERR channel name too long: at most 1024 bytes") {
				t.Errorf("SUBSCRIBE with a 1 MiB name = %.80q, want the name bound's error", got)
			}
			if got := c.do("PSUBSCRIBE", "*["+long[:1<<20-8]+"]"); !strings.HasPrefix(got, "-ERR pattern too long: at most 256 bytes") {
				t.Errorf("PSUBSCRIBE with a 1 MiB pattern = %.80q, want the name bound's error", got)
			}
			if got := c.do("SUBSCRIBE", strings.Repeat("n", 1024)); !strings.Contains(got, "subscribe") {
				t.Errorf("SUBSCRIBE with a 1024-byte name = %.80q, want it subscribed", got)
			}
			if got := c.do("PSUBSCRIBE", strings.Repeat("n", 256)); !strings.Contains(got, "psubscribe") {
				t.Errorf("PSUBSCRIBE with a 256-byte pattern = %.80q, want it subscribed", got)
			}
			if got := c.do("PSUBSCRIBE", strings.Repeat("n", 257)); !strings.HasPrefix(got, "-ERR pattern too long") {
				t.Errorf("PSUBSCRIBE with a 257-byte pattern = %.80q, want the pattern bound's error", got)
			}
			if got := adminConn(t, addr, cfg.secured).do("PUBSUB", "NUMSUB", "ok"); got != "*2\r\n$2\r\nok\r\n:0\r\n" {
				t.Errorf("after a refused SUBSCRIBE, PUBSUB NUMSUB ok = %q: want nothing subscribed", got)
			}
			c.do("UNSUBSCRIBE")
			c.do("PUNSUBSCRIBE")

			s.hub.limits = SubscriptionLimits{Name: 64, PatternName: 64, PerConn: 3, PerNode: 5, Patterns: 2}
			a, b := adminConn(t, addr, cfg.secured), adminConn(t, addr, cfg.secured)
			if got := a.do("SUBSCRIBE", "c1", "c2", "c3", "c4"); !strings.HasPrefix(got, "-ERR too many subscriptions: at most 3 per connection") {
				t.Errorf("4 subscriptions on one connection = %q", got)
			}
			// Names repeated or already subscribed do not count twice.
			a.do("SUBSCRIBE", "c1")
			if got := a.do("SUBSCRIBE", "c1", "c2", "c2"); !strings.HasPrefix(got, "*3\r\n$9\r\nsubscribe\r\n$2\r\nc1\r\n:1") {
				t.Errorf("SUBSCRIBE c1 c2 c2 = %q", got)
			}
			for _, want := range []string{":2", ":2"} { // the replies for c2 and c2 follow
				reply, err := readReply(a.br)
				if err != nil || !strings.HasSuffix(reply, want+"\r\n") {
					t.Errorf("reply = %q, %v; want count %s", reply, err, want)
				}
			}
			if got := a.do("PSUBSCRIBE", "p1*"); !strings.Contains(got, ":3") {
				t.Errorf("third subscription = %q", got)
			}
			if got := b.do("SUBSCRIBE", "c1", "c2", "c3"); !strings.HasPrefix(got, "-ERR too many subscriptions on this node: at most 5") {
				t.Errorf("6 subscriptions on the node = %q", got)
			}
			if got := b.do("PSUBSCRIBE", "p2*", "p3*"); !strings.HasPrefix(got, "-ERR too many patterns subscribed on this node: at most 2") {
				t.Errorf("3 patterns on the node = %q", got)
			}
			if got := b.do("PSUBSCRIBE", "p1*", "p2*"); !strings.Contains(got, "psubscribe") {
				t.Errorf("a second subscriber to a subscribed pattern, and a second pattern = %q", got)
			}
			readReply(b.br)
			// Unsubscribing gives the room back.
			a.do("UNSUBSCRIBE", "c1")
			if got := b.do("SUBSCRIBE", "c9"); !strings.Contains(got, "subscribe") {
				t.Errorf("SUBSCRIBE after others left = %q", got)
			}
		})
	}
}

// The node's read-ahead budget holds across connections: a reader's buffer is charged before it
// grows and a command's copy before it is made, so the peak counted here stays within the
// budget plus at most 16 KiB a connection (only a command that small may pass a full budget).
func TestReadAheadBudgetBeforeCopy(t *testing.T) {
	const budget = 4 << 20
	addr, s := serveNode(t, newFakeNode(), func(c *Config) { c.TotalReadAheadBytes = budget })
	saved := readAheadWait
	readAheadWait = 300 * time.Millisecond
	t.Cleanup(func() { readAheadWait = saved })

	// Fill the budget: a connection blocked in LOCK ... WAIT with commands queued behind it.
	holder := dialRaw(t, addr)
	holder.do("LOCK", "w", "100000")
	filler := dialRaw(t, addr)
	big := strings.Repeat("x", 256<<10)
	go func() {
		w := bufio.NewWriter(filler.nc)
		w.WriteString(multibulk("LOCK", "w", "1000", "WAIT", "60000"))
		for range 24 {
			w.WriteString(multibulk("SET", "v", big))
		}
		w.Flush()
	}()
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("the budget is full", func() bool {
		return s.readAhead.held() > budget-300<<10
	}))

	// Six connections each send a 3 MiB command with nothing outstanding.
	const n = 6
	mib := strings.Repeat("y", 1<<20-16)
	cmd := multibulk("MSET", "a", mib, "b", mib, "c", mib)
	conns := make([]*rawConn, n)
	for i := range conns {
		conns[i] = dialRaw(t, addr)
		go io.WriteString(conns[i].nc, cmd)
	}
	// Each is refused once it has waited readAheadWait with nothing of its own in flight.
	for i, c := range conns {
		c.nc.SetDeadline(time.Now().Add(10 * time.Second))
		got, err := readReply(c.br)
		if err != nil || !strings.HasPrefix(got, "-ERR max read-ahead bytes reached on this node") {
			t.Errorf("connection %d: %q, %v; want the node's read-ahead error", i, got, err)
		}
	}
	if peak := s.readAhead.peak(); peak > budget+n*smallCommand {
		t.Errorf("the node counted %d bytes read ahead at its peak, want at most its budget %d (+ %d small commands)", peak, budget, n)
	}
	pingFast(t, addr)

	// Once the filler's commands ran and every connection is gone, every byte charged is back.
	if got := holder.do("UNLOCK", "w"); got != ":1\r\n" {
		t.Fatalf("UNLOCK = %q", got)
	}
	filler.nc.SetDeadline(time.Now().Add(10 * time.Second))
	for i := range 25 {
		if _, err := readReply(filler.br); err != nil {
			t.Fatalf("the filler's reply %d: %v", i, err)
		}
	}
	holder.nc.Close()
	filler.nc.Close()
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("the budget is empty", func() bool { return s.readAhead.held() == 0 }))
}

// A MULTI queue holds at most maxQueuedBytes, counts in the node's
// read-ahead budget without waiting for room, and is refused above --maxmemory as Redis refuses
// to queue anything then; each refusal fails the transaction (EXECABORT).
func TestMultiQueueBounded(t *testing.T) {
	mib := strings.Repeat("q", 1<<20-16)
	t.Run("bytes per transaction", func(t *testing.T) {
		addr, s := serveNode(t, newFakeNode(), nil)
		c := dialRaw(t, addr)
		c.do("MULTI")
		queued := 0
		var refusal string
		for range 16 { // 16 MiB: twice the bound
			got := c.do("ECHO", mib)
			if got != "+QUEUED\r\n" {
				refusal = got
				break
			}
			queued++
		}
		if queued != 7 || !strings.HasPrefix(refusal, "-ERR transaction too large: raftlock queues at most 8388608 bytes") {
			t.Errorf("queued %d commands of 1 MiB, then %q; want 7, then the byte bound's error", queued, refusal)
		}
		if held := s.readAhead.held(); held < int64(queued)<<20-int64(queued)*64 {
			t.Errorf("the node counts %d bytes for a queue of %d MiB", held, queued)
		}
		if got := c.do("EXEC"); !strings.HasPrefix(got, "-EXECABORT") {
			t.Errorf("EXEC = %.60q, want EXECABORT", got)
		}
		testutil.WaitFor(t, 5*time.Second, testutil.Cond("the queue's bytes are given back", func() bool { return s.readAhead.held() == 0 }))
	})
	t.Run("node budget", func(t *testing.T) {
		// Commands of 12 KiB: read without waiting (they fit the reader's first buffer), so
		// it is the queue that meets the node's budget.
		addr, s := serveNode(t, newFakeNode(), func(c *Config) { c.TotalReadAheadBytes = 256 << 10 })
		arg := strings.Repeat("e", 12<<10)
		a, b := dialRaw(t, addr), dialRaw(t, addr)
		a.do("MULTI")
		queued, refusal := 0, ""
		for range 64 { // 768 KiB: three times the budget
			if got := a.do("ECHO", arg); got != "+QUEUED\r\n" {
				refusal = got
				break
			}
			queued++
		}
		if !strings.HasPrefix(refusal, "-ERR max read-ahead bytes reached on this node") {
			t.Fatalf("queued %d commands of 12 KiB against a 256 KiB budget, then %.80q; want the node's read-ahead error", queued, refusal)
		}
		b.do("MULTI")
		if got := b.do("ECHO", arg); !strings.HasPrefix(got, "-ERR max read-ahead bytes reached on this node") {
			t.Errorf("another connection's queue while the budget is full: %.80q", got)
		}
		// DISCARD gives a's bytes back; RESET drops b's transaction, whose bytes come back at
		// its next MULTI; a closed connection's come back too.
		a.do("DISCARD")
		if got := b.do("ECHO", arg); got != "+QUEUED\r\n" {
			t.Errorf("queueing once a's transaction is discarded: %.80q", got)
		}
		b.do("RESET")
		b.do("MULTI")
		if held := s.readAhead.held(); held != 0 {
			t.Errorf("after DISCARD, RESET and MULTI the node still counts %d bytes", held)
		}
		if got := b.do("ECHO", arg); got != "+QUEUED\r\n" {
			t.Errorf("queueing once the budget is free: %.80q", got)
		}
		b.nc.Close()
		testutil.WaitFor(t, 5*time.Second, testutil.Cond("a closed connection's queue is given back", func() bool { return s.readAhead.held() == 0 }))
	})
	t.Run("maxmemory", func(t *testing.T) {
		addr, s := serveNode(t, newFakeNode(), func(c *Config) { c.MaxMemory = 1 })
		testutil.WaitFor(t, 5*time.Second, testutil.Cond("over maxmemory", s.overMemory.Load))
		c := dialRaw(t, addr)
		c.do("MULTI")
		if got := c.do("PING"); got != "-OOM command not allowed when used memory > 'maxmemory'.\r\n" {
			t.Errorf("queueing PING above maxmemory = %q, want -OOM", got)
		}
		if got := c.do("EXEC"); got != "-EXECABORT Transaction discarded because of previous errors.\r\n" {
			t.Errorf("EXEC = %q", got)
		}
	})
}

// The node's client-tracking table is bounded as Redis's tracking-table-max-keys bounds it (and in
// bytes too, raftlock keys being up to 4096 bytes): past the bound a key is evicted and every
// connection tracking it is sent its invalidation, as Redis does.
func TestTrackingTableBounded(t *testing.T) {
	for _, cfg := range nodeConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			addr, s := serveNode(t, newFakeNode(), secure(cfg.secured))
			if s.tracker.maxKeys != 1_000_000 || s.tracker.maxBytes != 64<<20 {
				t.Fatalf("tracking table bounds = %d keys, %d bytes; want the README's 1000000 and 64 MiB", s.tracker.maxKeys, s.tracker.maxBytes)
			}
			tableLen := func() (int, int) {
				t.Helper()
				s.tracker.mu.Lock()
				defer s.tracker.mu.Unlock()
				want := 0
				for k, conns := range s.tracker.mu.byKey {
					want += len(k) + trackedKeyOverhead + len(conns)*trackedPairOverhead
				}
				if s.tracker.mu.bytes != want {
					t.Errorf("the table counts %d bytes, its keys and readers make %d", s.tracker.mu.bytes, want)
				}
				return len(s.tracker.mu.byKey), s.tracker.mu.bytes
			}
			// getAndPushes sends GET key and reads its reply and want pushes, in whatever order they
			// come; it returns the keys invalidated.
			getAndPushes := func(c *rawConn, key string, want int) []string {
				t.Helper()
				c.do("GET", key)
				var pushed []string
				c.nc.SetDeadline(time.Now().Add(5 * time.Second))
				for range want {
					got, err := readReply(c.br)
					if err != nil {
						t.Fatalf("waiting for an invalidation after GET %s: %v", key, err)
					}
					if !strings.HasPrefix(got, ">2\r\n$10\r\ninvalidate\r\n") {
						t.Fatalf("after GET %s: %q, want an invalidation", key, got)
					}
					pushed = append(pushed, strings.Split(got, "\r\n")[5])
				}
				return pushed
			}
			s.tracker.maxKeys = 4
			a, b := adminConn(t, addr, cfg.secured), adminConn(t, addr, cfg.secured)
			for _, c := range []*rawConn{a, b} {
				c.do("HELLO", "3")
				c.do("CLIENT", "TRACKING", "ON")
			}
			for _, k := range []string{"k1", "k2", "k3"} {
				a.do("GET", k)
			}
			b.do("GET", "k4")
			b.do("GET", "k1") // a second reader of k1 costs no room
			if n, _ := tableLen(); n != 4 {
				t.Fatalf("table holds %d keys, want 4", n)
			}
			// The fifth key, read by a connection with one key of its own, evicts one of the others:
			// its readers hear of it (a connection reading only the evicted key would too).
			c := adminConn(t, addr, cfg.secured)
			c.do("HELLO", "3")
			c.do("CLIENT", "TRACKING", "ON")
			c.do("GET", "k5")
			if n, _ := tableLen(); n != 4 {
				t.Errorf("after a fifth key the table holds %d keys, want 4", n)
			}
			// Exactly one of k1..k4 was evicted: its readers (a, b or both) were told. A write to
			// every key then tells each connection of the keys it still tracks, and of no evicted one.
			w := adminConn(t, addr, cfg.secured)
			for _, k := range []string{"k1", "k2", "k3", "k4", "k5"} {
				w.do("SET", k, "v")
			}
			heard := map[string]int{}
			for name, conn := range map[string]*rawConn{"a": a, "b": b, "c": c} {
				// Every push was queued before w's SET replied: they come before or just after the
				// PING's reply; read until nothing more comes for a moment.
				io.WriteString(conn.nc, multibulk("PING"))
				for {
					conn.nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
					got, err := readReply(conn.br)
					if err != nil {
						break
					}
					if got != "+PONG\r\n" {
						heard[name+":"+strings.Split(got, "\r\n")[5]]++
					}
				}
			}
			// Each reader hears of each key it read exactly once: by eviction or by the write.
			want := map[string]int{"a:k1": 1, "a:k2": 1, "a:k3": 1, "b:k4": 1, "b:k1": 1, "c:k5": 1}
			for k, n := range heard {
				if want[k] != n {
					t.Errorf("%s heard %d times, want %d (all heard: %v)", k, n, want[k], heard)
				}
			}
			if len(heard) != len(want) {
				t.Errorf("heard %v, want %v", heard, want)
			}

			// Connections that stop tracking take their keys out of the count.
			a.do("GET", "k1")
			b.do("GET", "k1")
			b.do("GET", "k2")
			if n, _ := tableLen(); n != 2 {
				t.Errorf("table holds %d keys, want 2", n)
			}
			a.do("CLIENT", "TRACKING", "OFF")
			if n, _ := tableLen(); n != 2 {
				t.Errorf("table holds %d keys, want 2 (b's)", n)
			}
			b.do("QUIT")
			testutil.WaitFor(t, 5*time.Second, testutil.Cond("b's keys are forgotten", func() bool {
				n, size := tableLen()
				return n == 0 && size == 0
			}))

			// The byte bound: keys of 1000 bytes, room for three.
			s.tracker.maxKeys, s.tracker.maxBytes = 1_000_000, 3*(1001+trackedKeyOverhead+trackedPairOverhead)
			d := adminConn(t, addr, cfg.secured)
			d.do("HELLO", "3")
			d.do("CLIENT", "TRACKING", "ON")
			for i := range 3 {
				d.do("GET", strings.Repeat(string(rune('p'+i)), 1000))
			}
			if pushed := getAndPushes(d, strings.Repeat("z", 1000), 1); len(pushed) != 1 {
				t.Errorf("a fourth key of 1000 bytes: pushed %q", pushed)
			}
			if n, size := tableLen(); n != 3 || size > s.tracker.maxBytes {
				t.Errorf("table holds %d keys, %d bytes; want 3, at most %d", n, size, s.tracker.maxBytes)
			}
		})
	}
}

// A connection's name (CLIENT SETNAME, HELLO SETNAME)
// and its CLIENT SETINFO values are at most maxClientName bytes; past it, an error, and the
// name stays as it was.
func TestClientNameBounded(t *testing.T) {
	for _, cfg := range nodeConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			addr, _ := serveNode(t, newFakeNode(), secure(cfg.secured))
			c := adminConn(t, addr, cfg.secured)
			ok := strings.Repeat("n", maxClientName)
			long := strings.Repeat("n", 1<<20-8)
			if maxClientName != 512 {
				t.Fatalf("maxClientName = %d, want the README's 512", maxClientName)
			}
			for _, tc := range []struct {
				args []string
				want string
			}{
				{[]string{"CLIENT", "SETNAME", ok}, "+OK\r\n"},
				{[]string{"CLIENT", "SETNAME", long}, "-ERR Client name is too long: at most 512 bytes\r\n"},
				{[]string{"CLIENT", "SETNAME", ok + "x"}, "-ERR Client name is too long: at most 512 bytes\r\n"},
				{[]string{"HELLO", "2", "SETNAME", long}, "-ERR Client name is too long: at most 512 bytes\r\n"},
				{[]string{"CLIENT", "SETINFO", "LIB-NAME", long}, "-ERR lib-name is too long: at most 512 bytes\r\n"},
				{[]string{"CLIENT", "SETINFO", "lib-ver", long}, "-ERR lib-ver is too long: at most 512 bytes\r\n"},
				{[]string{"CLIENT", "GETNAME"}, "$512\r\n" + ok + "\r\n"},
			} {
				if got := c.do(tc.args...); got != tc.want {
					t.Errorf("%.40q: got %.80q, want %.80q", tc.args, got, tc.want)
				}
			}
		})
	}
}

// PUBLISH runs on the apply goroutine, so what it costs is bounded: a node holds at most 1,000 patterns of at most 256 bytes, each compiled once, and a PUBLISH
// costs each pattern at most O(len(channel)·⌈256/64⌉) word operations. Here the node is full of
// the costliest patterns (a 249-token run of ? and a class between two *s, never matching) and
// a 4096-byte channel is published: the matcher's count of word operations stays within that
// bound (a recursive matcher needs about 4096 × 250 steps a pattern, 10^9 in all).
func TestPublishPatternFanoutBounded(t *testing.T) {
	h := newHub(quiet)
	lim := h.limits
	for i := range lim.Patterns {
		p := "*" + strings.Repeat("?", lim.PatternName-8) + fmt.Sprintf("[x%03d]*", i%1000)
		if len(p) != lim.PatternName {
			t.Fatalf("pattern of %d bytes", len(p))
		}
		c := &conn{}
		if msg := h.subscribe(c, subPattern, [][]byte{[]byte(p)}, &subscriptions{}, []node.LogEnd{{}}); msg != "" {
			t.Fatalf("pattern %d: %s", i, msg)
		}
	}
	if msg := h.subscribe(&conn{}, subPattern, [][]byte{[]byte("one-too-many*")}, &subscriptions{}, []node.LogEnd{{}}); !strings.HasPrefix(msg, "ERR too many patterns") {
		t.Fatalf("pattern %d: %q, want the node's pattern bound", lim.Patterns+1, msg)
	}
	channel := bytes.Repeat([]byte("a"), 4096)
	var steps int64
	for _, g := range h.mu.globs {
		steps -= g.steps // compiling's
	}
	start := time.Now()
	if n := h.deliver(0, node.LogPosition{Index: 1, Term: 1}, channel, []byte("m"), false); n != 0 {
		t.Fatalf("delivered to %d subscribers, want none", n)
	}
	took := time.Since(start)
	for _, g := range h.mu.globs {
		steps += g.steps
	}
	perPattern := int64(len(channel)) * (int64(lim.PatternName)/64 + 2)
	if steps > int64(lim.Patterns)*perPattern {
		t.Errorf("one PUBLISH took %d matcher steps over %d patterns, want at most %d", steps, lim.Patterns, int64(lim.Patterns)*perPattern)
	}
	t.Logf("%d steps for %d patterns, in %v", steps, lim.Patterns, took)
}

// A connection with nothing outstanding whose command arrived (its buffer charged) but whose copy
// finds no room waits readAheadWait and is refused, rather than waiting for ever on bytes only it
// could give back.
func TestReadAheadLoneCommandRefused(t *testing.T) {
	// Room for the buffer a 1 MiB argument grows (2 MiB, less the first 16 KiB) but not for
	// its copy besides.
	addr, s := serveNode(t, newFakeNode(), func(c *Config) { c.TotalReadAheadBytes = 3<<20 - 32<<10 })
	saved := readAheadWait
	readAheadWait = 300 * time.Millisecond
	t.Cleanup(func() { readAheadWait = saved })
	c := dialRaw(t, addr)
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c.nc, multibulk("ECHO", strings.Repeat("e", 1<<20-16)))
	got, err := readReply(c.br)
	if err != nil || !strings.HasPrefix(got, "-ERR max read-ahead bytes reached on this node") {
		t.Fatalf("reply = %.80q, %v; want the node's read-ahead error", got, err)
	}
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("the budget is empty", func() bool { return s.readAhead.held() == 0 }))
	pingFast(t, addr)
}
