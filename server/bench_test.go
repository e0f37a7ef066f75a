package server

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"runtime/trace"
	"strconv"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
	xtrace "golang.org/x/exp/trace"
)

// The request path's costs, socket to reply, one request at a time on one connection: what one
// LOCK + UNLOCK (or SET NX PX + EVALSHA of the compare-and-delete release) costs on the leader,
// and through a follower that forwards it. allocs/op counts the whole process: the server, the
// in-memory raft node under it, and the benchmark's client, which allocates nothing per op.
// After the timed loop, 200 more ops run under the execution tracer: wakeups/op counts the
// goroutines that went from waiting to runnable (a channel, a lock, a timer or the network woke
// them), the hand-offs between goroutines an op costs, the client's two (it waits for each
// reply) included; goroutines/op those created. Run with
//
//	go test -run x -bench RequestPath -benchmem ./server/
//
// and profile one with -cpuprofile or -memprofile.

// followerOf is the leader's node as a follower sees it: not the leader, and the leader's
// client address known, so its server forwards every request there, as a follower's does.
type followerOf struct {
	*raftnode.Replica
	leaderAddr string
}

func (f followerOf) IsLeader() bool { return false }
func (f followerOf) Leadership() node.Leadership {
	return node.Leadership{ID: "n1", ClientAddr: f.leaderAddr, Changed: f.Replica.LeaderChanged()}
}

// benchConn is a client that allocates nothing per request: it writes prebuilt commands and
// reads each reply's first line.
type benchConn struct {
	b   *testing.B
	nc  net.Conn
	br  *bufio.Reader
	buf []byte
}

func dialBench(b *testing.B, addr string) *benchConn {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	return &benchConn{b: b, nc: nc, br: bufio.NewReader(nc)}
}

// do sends args as one multibulk and returns its reply's first line (without CRLF); valid
// until the next call.
func (c *benchConn) do(args ...[]byte) []byte {
	c.buf = append(c.buf[:0], '*')
	c.buf = strconv.AppendInt(c.buf, int64(len(args)), 10)
	c.buf = append(c.buf, "\r\n"...)
	for _, a := range args {
		c.buf = append(c.buf, '$')
		c.buf = strconv.AppendInt(c.buf, int64(len(a)), 10)
		c.buf = append(c.buf, "\r\n"...)
		c.buf = append(c.buf, a...)
		c.buf = append(c.buf, "\r\n"...)
	}
	if _, err := c.nc.Write(c.buf); err != nil {
		c.b.Fatal(err)
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		c.b.Fatal(err)
	}
	if line[0] == '$' && line[1] != '-' { // a bulk string: its line follows
		if line, err = c.br.ReadSlice('\n'); err != nil {
			c.b.Fatal(err)
		}
	}
	return bytes.TrimSuffix(line, []byte("\r\n"))
}

// handoffs runs op n times under the execution tracer and returns the goroutines woken (waiting
// to runnable) and created per op.
func handoffs(b *testing.B, op func(), n int) (woken, created float64) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		b.Fatal(err)
	}
	for range n {
		op()
	}
	trace.Stop()
	r, err := xtrace.NewReader(&buf)
	if err != nil {
		b.Fatal(err)
	}
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		if ev.Kind() != xtrace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != xtrace.ResourceGoroutine {
			continue
		}
		switch from, to := st.Goroutine(); {
		case from == xtrace.GoWaiting && to == xtrace.GoRunnable:
			woken++
		case from == xtrace.GoNotExist && to == xtrace.GoRunnable:
			created++
		}
	}
	return woken / float64(n), created / float64(n)
}

// benchAddrs serves one in-memory node and returns the address to send requests to: the
// leader's own, or a follower's that forwards to it.
func benchAddrs(b *testing.B, viaFollower bool) string {
	n := startNode(b)
	leader, _ := serveNode(b, n, nil)
	if !viaFollower {
		return leader
	}
	follower, _ := serveNode(b, followerOf{n, leader}, func(c *Config) { c.NodeID = "n2" })
	return follower
}

func BenchmarkRequestPath(b *testing.B) {
	for _, path := range []struct {
		name        string
		viaFollower bool
	}{{"leader", false}, {"follower", true}} {
		b.Run("lock-unlock/"+path.name, func(b *testing.B) {
			c := dialBench(b, benchAddrs(b, path.viaFollower))
			lock, unlock, key, ttl := []byte("LOCK"), []byte("UNLOCK"), []byte("bench:lock"), []byte("10000")
			token := make([]byte, 0, 20)
			runPath(b, func() {
				reply := c.do(lock, key, ttl)
				if reply[0] != ':' {
					b.Fatalf("LOCK: %q", reply)
				}
				token = append(token[:0], reply[1:]...)
				if reply := c.do(unlock, key, token); string(reply) != ":1" {
					b.Fatalf("UNLOCK: %q", reply)
				}
			})
		})
		b.Run("setnx-evalsha/"+path.name, func(b *testing.B) {
			c := dialBench(b, benchAddrs(b, path.viaFollower))
			sha := append([]byte(nil), c.do([]byte("SCRIPT"), []byte("LOAD"), []byte(compareAndDelete))...)
			set, evalsha, key, value := []byte("SET"), []byte("EVALSHA"), []byte("bench:lock"), []byte("owner-0123456789")
			nx, px, ttl, one := []byte("NX"), []byte("PX"), []byte("10000"), []byte("1")
			runPath(b, func() {
				if reply := c.do(set, key, value, nx, px, ttl); string(reply) != "+OK" {
					b.Fatalf("SET NX PX: %q", reply)
				}
				if reply := c.do(evalsha, sha, one, key, value); string(reply) != ":1" {
					b.Fatalf("EVALSHA: %q", reply)
				}
			})
		})
	}
}

// compareAndDelete is the release script of redsync, redis-py and most Redis lock libraries.
const compareAndDelete = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// runPath runs op b.N times after a warmup, then counts its hand-offs.
func runPath(b *testing.B, op func()) {
	for range 100 { // connections, script caches and pools warm
		op()
	}
	time.Sleep(10 * time.Millisecond)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		op()
	}
	b.StopTimer()
	woken, created := handoffs(b, op, 200)
	b.ReportMetric(woken, "wakeups/op")
	b.ReportMetric(created, "goroutines/op")
}
