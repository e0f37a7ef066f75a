package conformance

import (
	"errors"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/tests/testutil"
)

// StackExchange.Redis (github.com/StackExchange/StackExchange.Redis), read at 3.1.31
// (90bbf1fc):
//   - src/StackExchange.Redis/ServerEndPoint.cs HandshakeAsync and AutoConfigureAsync: one
//     pipelined batch per connection. Interactive: HELLO 2 (discovery; RESP2 is the default),
//     CLIENT SETNAME, CLIENT SETINFO LIB-NAME / LIB-VER, CLIENT ID, CONFIG GET
//     replica-read-only, CONFIG GET databases, SENTINEL MASTERS, INFO replication, INFO
//     server, CLUSTER NODES, then the tracer ECHO <16-byte multiplexer id> whose exact echo
//     completes the connection. All but the tracer are fire-and-forget: an error reply is only
//     logged (so SENTINEL MASTERS and CLUSTER NODES may fail), but every command must get
//     exactly one reply, in order. The subscription connection sends the same CLIENT commands
//     and the tracer, then SUBSCRIBE __Booksleeve_MasterChanged. A bulk reply to CLUSTER NODES
//     makes the endpoint a cluster node (ResultProcessor.ClusterNodesProcessor).
//   - RedisDatabase.cs: LockTake is SET key value EX s NX (PX ms when not whole seconds), true
//     unless nil; LockQuery is GET. LockRelease and LockExtend use DELEX / SET IFEQ only when
//     the server reports 8.4 or later (RedisFeatures.cs); below that a transaction with the
//     condition StringEqual: WATCH key, GET key, and when it matches MULTI, DEL key (release) or
//     EXPIRE key s (extend), EXEC, true unless EXEC answers nil; when it does not match,
//     UNWATCH and false (RedisTransaction.cs).
func TestStackExchangeRedisLock(t *testing.T) {
	onBoth(t, testStackExchangeRedisLock)
}

func testStackExchangeRedisLock(t *testing.T, s server) {
	const (
		key     = "se-lock:nightly-report"
		tokenA  = "host-a:4711:5e0b"
		tokenB  = "host-b:1123:9c2d"
		channel = "__Booksleeve_MasterChanged"
	)
	uniqueID := string([]byte{0x8f, 0x13, 0x00, 0xa7, 0x5c, 0x2e, 0x41, 0xd9, 0x9b, 0x06, 0xfe, 0x70, 0x21, 0x3a, 0xc4, 0x88})

	// The interactive connection's handshake, pipelined.
	a := dial(t, s.addr)
	handshake := [][]string{
		{"HELLO", "2"},
		{"CLIENT", "SETNAME", "conformance-app"},
		{"CLIENT", "SETINFO", "LIB-NAME", "SE.Redis"},
		{"CLIENT", "SETINFO", "LIB-VER", "3.1.31"},
		{"CLIENT", "ID"},
		{"CONFIG", "GET", "replica-read-only"},
		{"CONFIG", "GET", "databases"},
		{"SENTINEL", "MASTERS"},
		{"INFO", "replication"},
		{"INFO", "server"},
		{"CLUSTER", "NODES"},
		{"ECHO", uniqueID},
	}
	replies := a.pipeline(handshake)
	if hello, _ := replies[0].([]any); !fieldIs(hello, "proto", int64(2)) || !hasField(hello, "version") {
		t.Errorf("HELLO 2: got %s, want a map with proto 2 and the version", show(replies[0]))
	}
	if replies[1] != "OK" {
		t.Errorf("CLIENT SETNAME: got %s, want OK", show(replies[1]))
	}
	for i := 2; i <= 3; i++ { // CLIENT SETINFO is Redis 7.2's: an error is tolerated
		if _, isErr := replies[i].(error); replies[i] != "OK" && !isErr {
			t.Errorf("%s: got %s, want OK or an error", strings.Join(handshake[i], " "), show(replies[i]))
		}
	}
	if _, ok := replies[4].(int64); !ok {
		t.Errorf("CLIENT ID: got %s, want an integer", show(replies[4]))
	}
	// Only a "no" would matter (a read-only replica); an empty array teaches nothing.
	if cfg, ok := replies[5].([]any); !ok || len(cfg) != 2 || cfg[0] != "replica-read-only" || cfg[1] != "yes" {
		t.Errorf("CONFIG GET replica-read-only: got %s, want [replica-read-only yes]", show(replies[5]))
	}
	t.Logf("CONFIG GET replica-read-only: %s", show(replies[5]))
	if !equal(replies[6], []any{"databases", "16"}) {
		t.Errorf("CONFIG GET databases: got %s, want [databases, 16]", show(replies[6]))
	}
	if _, isErr := replies[7].(error); !isErr {
		t.Errorf("SENTINEL MASTERS: got %s, want an error (not a sentinel)", show(replies[7]))
	}
	if info, _ := replies[8].(string); !strings.Contains(info, "role:master\r\n") {
		t.Errorf("INFO replication: got %s, want role:master", show(replies[8]))
	}
	if info, _ := replies[9].(string); !strings.Contains(info, "\r\nredis_version:") {
		t.Errorf("INFO server: got %s, want redis_version", show(replies[9]))
	}
	switch nodes := replies[10].(type) {
	case error: // standalone
		t.Logf("CLUSTER NODES: %v (standalone)", nodes)
	case string: // a cluster: a master (the leader) owns every slot, so commands route to it
		t.Logf("CLUSTER NODES: %q (cluster)", nodes)
		if !strings.Contains(nodes, "master - 0 0 1 connected 0-16383") {
			t.Errorf("CLUSTER NODES: %q, want a master of slots 0-16383", nodes)
		}
	default:
		t.Errorf("CLUSTER NODES: got %s, want an error or the nodes' text", show(nodes))
	}
	if replies[11] != uniqueID {
		t.Fatalf("tracer ECHO: got %s, want the multiplexer id back (the connection never completes)", show(replies[11]))
	}

	// The subscription connection.
	sub := dial(t, s.addr)
	subReplies := sub.pipeline([][]string{
		{"CLIENT", "SETNAME", "conformance-app"},
		{"CLIENT", "SETINFO", "LIB-NAME", "SE.Redis"},
		{"CLIENT", "SETINFO", "LIB-VER", "3.1.31"},
		{"CLIENT", "ID"},
		{"ECHO", uniqueID},
		{"SUBSCRIBE", channel},
	})
	if subReplies[4] != uniqueID || !equal(subReplies[5], []any{"subscribe", channel, int64(1)}) {
		t.Fatalf("subscription handshake: got %s", show(subReplies))
	}

	b := dial(t, s.addr)
	// LockTake: 30 s is whole seconds, so EX.
	a.want("OK", "SET", key, tokenA, "EX", "30", "NX")
	b.want(nil, "SET", key, tokenB, "EX", "30", "NX")
	b.want(tokenA, "GET", key) // LockQuery
	a.pttlIn(key, 29000, 30000)
	if s.raftlock {
		a.lockToken(key)
	}
	// LockTake with 1.5 s: PX.
	b.want("OK", "SET", key+":short", tokenB, "PX", "1500", "NX")
	b.pttlIn(key+":short", 1000, 1500)

	// LockExtend by a stranger: the condition fails, UNWATCH, false.
	b.wantPipeline([]any{"OK", tokenA, "OK"},
		[][]string{{"WATCH", key}, {"GET", key}, {"UNWATCH"}})
	// LockExtend by the holder: EXEC applies the EXPIRE.
	a.wantPipeline([]any{"OK", tokenA, "OK", "QUEUED", []any{int64(1)}},
		[][]string{{"WATCH", key}, {"GET", key}, {"MULTI"}, {"EXPIRE", key, "45"}, {"EXEC"}})
	a.pttlIn(key, 44000, 45000)

	// A write between the GET and the EXEC (the lock taken over): EXEC answers nil, false.
	a.wantPipeline([]any{"OK", tokenA},
		[][]string{{"WATCH", key}, {"GET", key}})
	b.want(int64(1), "DEL", key)
	b.want("OK", "SET", key, tokenB, "EX", "30", "NX")
	a.wantPipeline([]any{"OK", "QUEUED", nil},
		[][]string{{"MULTI"}, {"DEL", key}, {"EXEC"}})
	a.want(tokenB, "GET", key)

	// LockRelease by the holder.
	b.wantPipeline([]any{"OK", tokenB, "OK", "QUEUED", []any{int64(1)}},
		[][]string{{"WATCH", key}, {"GET", key}, {"MULTI"}, {"DEL", key}, {"EXEC"}})
	a.want(nil, "GET", key)
	// LockRelease when nothing is held: GET nil does not equal the token, UNWATCH, false.
	a.wantPipeline([]any{"OK", nil, "OK"},
		[][]string{{"WATCH", key}, {"GET", key}, {"UNWATCH"}})
	a.want("OK", "SET", key, tokenA, "EX", "30", "NX")
}

// pipeline sends cmds in one write and returns their replies, one each, in order.
func (c *conn) pipeline(cmds [][]string) []any {
	c.t.Helper()
	for _, cmd := range cmds {
		c.Send(cmd...)
	}
	if err := c.Flush(c.ctx); err != nil {
		c.t.Fatalf("pipeline: %v", err)
	}
	out := make([]any, len(cmds))
	for i := range cmds {
		v, err := c.Receive(c.ctx)
		var re *resp.ReplyError
		if err != nil && !errors.As(err, &re) {
			c.t.Fatalf("pipeline, reply %d (%s): %v", i, strings.Join(cmds[i], " "), err)
		}
		out[i] = testutil.Plain(v)
	}
	return out
}

// wantPipeline fails the test unless pipelining cmds gets the replies want.
func (c *conn) wantPipeline(want []any, cmds [][]string) {
	c.t.Helper()
	if got := c.pipeline(cmds); !equal(got, want) {
		c.t.Fatalf("%v: got %s, want %s", cmds, show(got), show(want))
	}
}

// fieldIs reports whether the field, value pairs of a RESP2 map hold name with value v.
func fieldIs(pairs []any, name string, v any) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i] == name {
			return equal(pairs[i+1], v)
		}
	}
	return false
}

// hasField reports whether the field, value pairs of a RESP2 map hold name.
func hasField(pairs []any, name string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i] == name {
			return true
		}
	}
	return false
}
