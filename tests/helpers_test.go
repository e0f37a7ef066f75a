// Package tests holds raftlock's black-box end-to-end tests: the real binary in real processes,
// spoken to over real sockets on 127.0.0.1 by real clients (go-redis, redis-cli, a raw RESP
// writer), next to a real redis-server where replies must match byte for byte.
package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/tests/testutil"
)

// raftlockBin is the binary TestMain builds once for every test of the package.
var raftlockBin string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	return testutil.RunWithRaftlock(m, "tests", raceEnabled, func(bin string) { raftlockBin = bin })
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	port, err := testutil.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// proc is one running server process, a raftlock node or a redis-server, started by
// testutil.Launch (stopped, and its log checked, when the test ends), with the test it belongs
// to and its client address.
type proc struct {
	*testutil.Proc
	t    testing.TB
	addr string // the client (RESP) address
}

// node is a raftlock process, with what restarting it on the same directory takes.
type node struct {
	*proc
	dir      string
	raftAddr string
	id       string
	starts   int
	args     []string // more flags, passed again at every restart (--peers, --join, tuning)
	bin      string   // the binary it runs (and runs again at restart); empty: raftlockBin
}

// kill9 kills the process with SIGKILL and waits for it to be gone.
func (p *proc) kill9() {
	p.t.Helper()
	if err := p.Kill(); err != nil {
		p.t.Fatalf("kill -9: %v", err)
	}
}

// sigstop pauses the process (SIGSTOP); sigcont resumes it.
func (p *proc) sigstop() {
	p.t.Helper()
	if err := p.Pause(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) sigcont() {
	p.t.Helper()
	if err := p.Resume(); err != nil {
		p.t.Fatal(err)
	}
}

// stop stops the process cleanly (testutil.Proc.Stop).
func (p *proc) stop() error { return p.Stop(testutil.StopGrace) }

// startNode starts a single raftlock node on dir (bootstrapping it when dir is empty) on fresh
// ports, and returns once it answers PING and serves requests as the leader.
func startNode(t testing.TB, dir string) *node {
	t.Helper()
	var lastErr error
	for range 3 { // a port picked free may be taken by someone else before the node binds it
		n := &node{
			dir:      dir,
			raftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))),
			id:       "n1",
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		if lastErr = n.launch(t, addr); lastErr == nil {
			return n
		}
	}
	t.Fatalf("start raftlock: %v", lastErr)
	return nil
}

// restart starts a new process on the node's directory and addresses, after the previous one
// was stopped or killed.
func (n *node) restart(t testing.TB) *node {
	t.Helper()
	if n.Running() {
		t.Fatalf("%s: restart while still running", n.Name())
	}
	// The node's ports were free when it stopped, but on loopback a peer dialing one of them
	// meanwhile can connect to itself (TCP simultaneous open: the kernel picked the very port as
	// the dial's source) and hold it for a moment: try again a few times before failing.
	var err error
	for attempt := range 5 {
		m := &node{dir: n.dir, raftAddr: n.raftAddr, id: n.id, starts: n.starts + attempt, args: n.args, bin: n.bin}
		if err = m.launch(t, n.addr); err == nil {
			return m
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("restart raftlock: %v", err)
	return nil
}

// launch starts the node's process on addr and waits until it serves requests (waitReady).
func (n *node) launch(t testing.TB, addr string) error {
	t.Helper()
	if err := n.start(t, addr); err != nil {
		return err
	}
	return n.waitReady(20 * time.Second)
}

// start starts the node's process on addr without waiting for it: the nodes of a new cluster
// must all be running before any of them can elect a leader.
func (n *node) start(t testing.TB, addr string) error {
	t.Helper()
	n.starts++
	args := append([]string{"--dir", n.dir, "--addr", addr, "--raft-addr", n.raftAddr, "--id", n.id}, n.args...)
	bin := n.bin
	if bin == "" {
		bin = raftlockBin
	}
	p, err := testutil.Launch(t, fmt.Sprintf("raftlock-%s-start%d", n.id, n.starts), bin, args...)
	if err != nil {
		return err
	}
	n.proc = &proc{Proc: p, t: t, addr: addr}
	return nil
}

// waitReady waits until the node answers PING, then until it answers a request that needs the
// leader (DBSIZE) with an integer, or with a redirect to the leader (a follower started with
// --redirect true).
func (n *node) waitReady(timeout time.Duration) error {
	return n.WaitServing(n.addr, timeout, func() error {
		v, err := call(n.addr, "DBSIZE")
		var re *resp.ReplyError
		if _, ok := v.(int64); !ok && !(errors.As(err, &re) && re.Code() == "MOVED") {
			return fmt.Errorf("DBSIZE: %#v, %v", v, err)
		}
		return nil
	})
}

// respConn is a raw RESP connection: it writes commands as multibulk arrays (or raw bytes) and
// reads back each reply's exact bytes, RESP2 or RESP3, for tests that compare replies byte for
// byte (call decodes them instead).
type respConn struct {
	nc      net.Conn
	br      *bufio.Reader
	timeout time.Duration // bounds each read and write
}

// ioTimeout bounds every raw read and write.
const ioTimeout = 5 * time.Second

func dialRESP(addr string) (*respConn, error) {
	nc, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return nil, err
	}
	return &respConn{nc: nc, br: bufio.NewReader(nc), timeout: ioTimeout}, nil
}

func (c *respConn) Close() error { return c.nc.Close() }

// encodeCommand encodes args as a RESP multibulk array.
func encodeCommand(args ...string) []byte { return resp.AppendCommand(nil, args...) }

func (c *respConn) writeRaw(b []byte) error {
	if err := c.nc.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return err
	}
	_, err := c.nc.Write(b)
	return err
}

// do sends one command and returns its reply's bytes.
func (c *respConn) do(args ...string) ([]byte, error) {
	if err := c.writeRaw(encodeCommand(args...)); err != nil {
		return nil, err
	}
	return c.readReply()
}

// readReply returns the bytes of one complete reply, as resp.ReadReply frames it.
func (c *respConn) readReply() ([]byte, error) {
	if err := c.nc.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return nil, err
	}
	return resp.ReadReply(c.br, resp.MaxClientReply)
}

// readEOF reports whether the peer closes the connection without sending anything more.
func (c *respConn) readEOF() error {
	if err := c.nc.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return err
	}
	b, err := c.br.ReadByte()
	switch {
	case err == nil:
		rest, _ := c.br.Peek(c.br.Buffered())
		return fmt.Errorf("connection still open: read %q", append([]byte{b}, rest...))
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return nil
	default:
		return fmt.Errorf("want EOF, got %w", err)
	}
}

// testContext is t.Context() bounded by timeout.
func testContext(t *testing.T, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// newClient returns a go-redis client of addr speaking RESP proto, closed when the test ends.
// It never retries: a test decides itself what an error means.
func newClient(t testing.TB, addr string, proto int) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr:          addr,
		Protocol:      proto,
		MaxRetries:    -1,
		DialerRetries: 1, // a node that is down fails the request at once
		DialTimeout:   2 * time.Second,
		ReadTimeout:   5 * time.Second,
		WriteTimeout:  5 * time.Second,
		TLSConfig:     testutil.TLSFor(addr),
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// lockState is what LOCKINFO reports about a held lock.
type lockState struct {
	owner string
	token int64
	pttl  int64
}

// lockInfo runs LOCKINFO key; held is false for a nil reply. It reads the RESP2 array and the
// RESP3 map alike.
func lockInfo(ctx context.Context, c doer, key string) (st lockState, held bool, err error) {
	v, err := c.Do(ctx, "LOCKINFO", key).Result()
	if errors.Is(err, redis.Nil) {
		return lockState{}, false, nil
	}
	if err != nil {
		return lockState{}, false, err
	}
	fields := map[string]any{}
	switch v := v.(type) {
	case []any:
		if len(v)%2 != 0 {
			return lockState{}, false, fmt.Errorf("LOCKINFO %s: odd array %v", key, v)
		}
		for i := 0; i < len(v); i += 2 {
			fields[fmt.Sprint(v[i])] = v[i+1]
		}
	case map[any]any:
		for k, x := range v {
			fields[fmt.Sprint(k)] = x
		}
	default:
		return lockState{}, false, fmt.Errorf("LOCKINFO %s: unexpected reply %T %v", key, v, v)
	}
	owner, ok1 := fields["owner"].(string)
	token, ok2 := fields["token"].(int64)
	pttl, ok3 := fields["pttl"].(int64)
	if !ok1 || !ok2 || !ok3 || len(fields) != 3 {
		return lockState{}, false, fmt.Errorf("LOCKINFO %s: unexpected fields %v", key, fields)
	}
	return lockState{owner: owner, token: token, pttl: pttl}, true, nil
}

// doer is what runs an arbitrary command: *redis.Client, *redis.Conn, a pipeline.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}
