package conformance

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/tests/testutil"
)

// raftlockBin is the binary TestMain builds once for every test of the package.
var raftlockBin string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	return testutil.RunWithRaftlock(m, "conformance", raceEnabled, func(bin string) { raftlockBin = bin })
}

// server is one server a conformance scenario runs against.
type server struct {
	addr     string
	raftlock bool // a raftlock node, not a redis-server
	// slotted: a cluster of several raft groups, which runs a script only on keys of one hash
	// slot's group: the scenario sends what the library sends in a Redis Cluster setup.
	slotted bool
}

// waitBound bounds every wait of a scenario: a waiter's wake-up, a blocking pop, a lease to
// run out.
const waitBound = 5 * time.Second

// onBoth runs scenario against a fresh redis-server and a fresh single raftlock node, as the
// subtests "redis-server" and "raftlock": the same assertions on both, so that the redis-server
// run proves the scenario reproduces the library faithfully.
func onBoth(t *testing.T, scenario func(t *testing.T, s server)) {
	t.Helper()
	t.Run("redis-server", func(t *testing.T) {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			t.Fatalf("redis-server not installed: %v", err)
		}
		_, addr := testutil.StartRedis(t, bin)
		scenario(t, server{addr: addr})
	})
	t.Run("raftlock", func(t *testing.T) {
		scenario(t, server{addr: startRaftlock(t), raftlock: true})
	})
	t.Run("raftlock-3-follower", func(t *testing.T) {
		scenario(t, server{addr: startFollower(t), raftlock: true})
	})
}

// onAllWithGroups is onBoth, and the scenario once more through a follower of a 3-node cluster
// of 4 raft groups (subtest "raftlock-4-groups-follower"), in the command sequence of the
// library's Redis Cluster setup (server.slotted): for a library written for Redis Cluster,
// whose keys of one lock share a hash slot, so one group serves each lock whole.
func onAllWithGroups(t *testing.T, scenario func(t *testing.T, s server)) {
	t.Helper()
	onBoth(t, scenario)
	t.Run("raftlock-4-groups-follower", func(t *testing.T) {
		scenario(t, server{addr: startFollower(t, "--groups", "4"), raftlock: true, slotted: true})
	})
}

// startFollower starts a 3-node raftlock cluster (with the extra flags) and returns the client
// address of a follower once it serves (forwarding to the leader; with several groups, once
// every group has a leader it knows): the library's every connection then goes through a node
// that is not the leader.
func startFollower(t *testing.T, extra ...string) string {
	t.Helper()
	addrs, raftAddrs, peers := make([]string, 3), make([]string, 3), make([]string, 3)
	for i := range addrs {
		addrs[i], raftAddrs[i] = freeAddr(t), freeAddr(t)
		peers[i] = fmt.Sprintf("n%d=%s", i+1, raftAddrs[i])
	}
	for i := range addrs {
		args := append([]string{"--dir", t.TempDir(), "--addr", addrs[i], "--raft-addr", raftAddrs[i],
			"--id", fmt.Sprintf("n%d", i+1), "--peers", strings.Join(peers, ",")}, extra...)
		if _, err := testutil.Launch(t, fmt.Sprintf("raftlock-n%d", i+1), raftlockBin, args...); err != nil {
			t.Fatal(err)
		}
	}
	var follower string
	testutil.WaitFor(t, 30*time.Second, func() error {
		for _, addr := range addrs {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			c, err := resp.Dial(ctx, addr, time.Second)
			if err != nil {
				cancel()
				continue
			}
			v, _ := c.Do(ctx, "INFO", "raft")
			n, _ := c.Do(ctx, "DBSIZE") // forwarded: the leader is known and serves
			c.Close()
			cancel()
			if strings.Contains(string(v.Str), "raft_state:Follower") && n.Kind == resp.KindInteger && !strings.Contains(string(v.Str), "leader=,") {
				follower = addr
				return nil
			}
		}
		return errors.New("no follower that serves yet")
	})
	return follower
}

// startRaftlock starts a single raftlock node, bootstrapped on a fresh directory, and returns
// its client address once it serves requests as the leader.
func startRaftlock(t *testing.T) string {
	t.Helper()
	var last error
	for range 3 { // a port picked free may be taken by someone else before the node binds it
		addr, raftAddr := freeAddr(t), freeAddr(t)
		p, err := testutil.Launch(t, "raftlock", raftlockBin,
			"--dir", t.TempDir(), "--addr", addr, "--raft-addr", raftAddr, "--id", "n1")
		if err != nil {
			t.Fatal(err)
		}
		last = p.WaitServing(addr, 20*time.Second, func() error {
			c := dial(t, addr)
			defer c.Close()
			if v, _ := c.Do(c.ctx, "DBSIZE"); v.Kind != resp.KindInteger {
				return fmt.Errorf("DBSIZE: %v", v)
			}
			return nil
		})
		if last == nil {
			return addr
		}
		p.ExpectExit()
	}
	t.Fatalf("start raftlock: %v", last)
	return ""
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testutil.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// conn is one client connection of a scenario, as a library holds one: each call is bounded,
// an I/O error fails the test, and an error reply is returned as a reply.
type conn struct {
	*resp.Client
	t   *testing.T
	ctx context.Context
}

// dial opens a connection to addr, closed when the test ends.
func dial(t *testing.T, addr string) *conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	c, err := resp.Dial(ctx, addr, waitBound)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{Client: c, t: t, ctx: ctx}
}

// do sends one command and returns its reply as testutil.Plain gives it; an error reply comes
// back as a *resp.ReplyError value.
func (c *conn) do(args ...string) any {
	c.t.Helper()
	v, err := c.Do(c.ctx, args...)
	var re *resp.ReplyError
	if err != nil && !errors.As(err, &re) {
		c.t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return testutil.Plain(v)
}

// receive reads the next reply or push within timeout; ok is false when none came in time (the
// connection is then closed, as the library would drop it).
func (c *conn) receive(timeout time.Duration) (v any, ok bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	r, err := c.Receive(ctx)
	var re *resp.ReplyError
	if err != nil && !errors.As(err, &re) {
		return nil, false
	}
	return testutil.Plain(r), true
}

// want fails the test unless the reply to args is want (compared as testutil.Plain values;
// an error reply compares by its text).
func (c *conn) want(want any, args ...string) any {
	c.t.Helper()
	got := c.do(args...)
	if !equal(got, want) {
		c.t.Fatalf("%s: got %s, want %s", strings.Join(args, " "), show(got), show(want))
	}
	return got
}

func equal(a, b any) bool { return show(a) == show(b) }

// show formats a Plain value so that replies of different kinds never print alike.
func show(v any) string {
	switch v := v.(type) {
	case nil:
		return "(nil)"
	case string:
		return strconv.Quote(v)
	case int64:
		return fmt.Sprintf("(integer) %d", v)
	case int:
		return fmt.Sprintf("(integer) %d", v)
	case error:
		return "(error) " + v.Error()
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = show(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprintf("%T %v", v, v)
}

// isErr reports whether v is an error reply whose text starts with prefix.
func isErr(v any, prefix string) bool {
	err, ok := v.(error)
	return ok && strings.HasPrefix(err.Error(), prefix)
}

// pttlIn fails the test unless PTTL key is in (lo, hi].
func (c *conn) pttlIn(key string, lo, hi int64) {
	c.t.Helper()
	got, ok := c.do("PTTL", key).(int64)
	if !ok || got <= lo || got > hi {
		c.t.Fatalf("PTTL %s: got %v, want in (%d, %d]", key, got, lo, hi)
	}
}

// lockToken returns the fencing token raftlock's LOCKINFO reports for key (RESP2 reply: field,
// value pairs).
func (c *conn) lockToken(key string) int64 {
	c.t.Helper()
	v, ok := c.do("LOCKINFO", key).([]any)
	if !ok {
		c.t.Fatalf("LOCKINFO %s: got %s, want the holder's fields", key, show(v))
	}
	for i := 0; i+1 < len(v); i += 2 {
		if v[i] == "token" {
			if tok, ok := v[i+1].(int64); ok && tok > 0 {
				return tok
			}
		}
	}
	c.t.Fatalf("LOCKINFO %s: %s has no positive token", key, show(v))
	return 0
}

// script is a Lua script as a library sends it: by its SHA1 once loaded.
type script struct {
	src string
	sha string
}

// load runs SCRIPT LOAD and remembers the SHA1 it returns.
func (c *conn) load(src string) script {
	c.t.Helper()
	sha, ok := c.do("SCRIPT", "LOAD", src).(string)
	if !ok || len(sha) != 40 {
		c.t.Fatalf("SCRIPT LOAD: got %s, want a SHA1", show(sha))
	}
	return script{src: src, sha: sha}
}

// evalArgs is the argument list after EVAL's script or EVALSHA's sha: numkeys, keys, args.
func evalArgs(keys []string, args ...string) []string {
	out := append([]string{strconv.Itoa(len(keys))}, keys...)
	return append(out, args...)
}

// eval runs src with EVAL.
func (c *conn) eval(src string, keys []string, args ...string) any {
	c.t.Helper()
	return c.do(append([]string{"EVAL", src}, evalArgs(keys, args...)...)...)
}

// evalsha runs s by its SHA1 with EVALSHA.
func (c *conn) evalsha(s script, keys []string, args ...string) any {
	c.t.Helper()
	return c.do(append([]string{"EVALSHA", s.sha}, evalArgs(keys, args...)...)...)
}

// subscribe puts c in subscribed mode on channel and checks the confirmation.
func (c *conn) subscribe(channel string) {
	c.t.Helper()
	c.want([]any{"subscribe", channel, int64(1)}, "SUBSCRIBE", channel)
}

// message waits up to timeout for the next message pushed to a subscribed c and returns its
// channel and payload; ok is false if none came.
func (c *conn) message(timeout time.Duration) (channel, payload string, ok bool) {
	c.t.Helper()
	v, ok := c.receive(timeout)
	if !ok {
		return "", "", false
	}
	m, isArr := v.([]any)
	if !isArr || len(m) != 3 || m[0] != "message" {
		c.t.Fatalf("subscribed connection: got %s, want a message", show(v))
	}
	channel, _ = m[1].(string)
	payload, _ = m[2].(string)
	return channel, payload, true
}

// sha1hex is the SHA1 Redis names a script by.
func sha1hex(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

// errorf is fmt.Errorf, for the conditions testutil.WaitFor polls.
func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
