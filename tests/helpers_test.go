// Package tests holds raftlock's black-box end-to-end tests: the real binary in real processes,
// spoken to over real sockets on 127.0.0.1 by real clients (go-redis, redis-cli, a raw RESP
// writer), next to a real redis-server where replies must match byte for byte.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// raftlockBin is the binary TestMain builds once for every test of the package.
var raftlockBin string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "raftlock-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	raftlockBin = filepath.Join(dir, "raftlock")
	args := []string{"build", "-o", raftlockBin}
	if raceEnabled {
		// The tests run under the race detector: so does the server, and checkLog looks for its
		// reports in the node's log.
		args = append(args, "-race")
	}
	args = append(args, "github.com/raftlock/raftlock/cmd/raftlock")
	build := exec.Command("go", args...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "tests: go %s: %v\n%s", strings.Join(args, " "), err, out)
		return 1
	}
	code := m.Run()
	if code == 0 {
		// Every client and process a test starts is closed by its cleanup.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "tests: leaked goroutines:", err)
			return 1
		}
	}
	return code
}

// waitFor polls cond every few milliseconds until it returns nil, and fails the test with cond's
// last error once timeout has passed (nats-server's checkFor).
func waitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proc is one running server process: a raftlock node or a redis-server.
type proc struct {
	t       testing.TB
	name    string
	addr    string // the client (RESP) address
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has been waited for
	waitErr error         // its exit status; read only after exited is closed
	stopped atomic.Bool   // kill9 or stop was called: an exit is expected
	paused  atomic.Bool   // sigstop was called and sigcont not yet
}

// node is a raftlock process, with what restarting it on the same directory takes.
type node struct {
	*proc
	dir      string
	raftAddr string
	id       string
	starts   int
	args     []string // more flags, passed again at every restart (--peers, --join, tuning)
}

var logSeq atomic.Int64

// launch starts bin with args, its stdout and stderr going to a fresh file under t.TempDir().
// When the test ends the process is stopped (SIGTERM, then SIGKILL), its log is checked for
// panics and data races, and printed if the test failed.
func launch(t testing.TB, name, bin, addr string, args ...string) (*proc, error) {
	t.Helper()
	p := &proc{
		t: t, name: name, addr: addr,
		logPath: filepath.Join(t.TempDir(), fmt.Sprintf("%s-%d.log", name, logSeq.Add(1))),
		exited:  make(chan struct{}),
	}
	f, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child keeps its own copy of the descriptor
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	// Cleanups run last-registered first: the process is stopped before its log is read.
	t.Cleanup(p.checkLog)
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
	})
	return p, nil
}

// running reports whether the process has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill9 kills the process with SIGKILL and waits for it to be gone.
func (p *proc) kill9() {
	p.t.Helper()
	p.stopped.Store(true)
	if !p.running() {
		p.t.Fatalf("%s: kill -9: already exited: %v", p.name, p.waitErr)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatalf("%s: kill -9: %v", p.name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%s: still running 10s after SIGKILL", p.name)
	}
}

// signal sends sig to the process, failing the test if it has exited.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if !p.running() {
		p.t.Fatalf("%s: %v: already exited: %v", p.name, sig, p.waitErr)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

// sigstop pauses the process (SIGSTOP); sigcont resumes it. A paused process keeps its sockets:
// its peers and clients see a node that stopped answering, not one that went away.
func (p *proc) sigstop() {
	p.t.Helper()
	p.signal(syscall.SIGSTOP)
	p.paused.Store(true)
}

func (p *proc) sigcont() {
	p.t.Helper()
	p.signal(syscall.SIGCONT)
	p.paused.Store(false)
}

// expectExit tells the cleanup that the process is about to exit on its own (it was removed
// from the cluster, say): that exit is not a failure.
func (p *proc) expectExit() { p.stopped.Store(true) }

// waitExit waits up to timeout for the process to exit on its own.
func (p *proc) waitExit(timeout time.Duration) error {
	select {
	case <-p.exited:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %v", p.name, timeout)
	}
}

// stop sends SIGTERM and waits for a clean exit (SIGKILL after 15 s). It is idempotent, returns
// nil for a process already stopped by kill9, and an error for one that exited on its own.
func (p *proc) stop() error {
	wasStopped := p.stopped.Swap(true)
	if !p.running() {
		if !wasStopped {
			return fmt.Errorf("exited unexpectedly: %v", p.waitErr)
		}
		return nil
	}
	if wasStopped { // kill9 gave up waiting
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
		}
		return errors.New("still running after kill -9")
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM: %w", err)
	}
	// A process a test paused with SIGSTOP acts on the SIGTERM only once it runs again.
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		return errors.New("no exit within 15s of SIGTERM; killed")
	}
	if p.waitErr != nil {
		return fmt.Errorf("exit after SIGTERM: %w", p.waitErr)
	}
	return nil
}

// logText is everything the process has written so far.
func (p *proc) logText() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	return string(b)
}

// checkLog fails the test when the log shows a panic or a data race, and prints the log when the
// test failed for any reason.
func (p *proc) checkLog() {
	text := p.logText()
	for _, bad := range []string{"panic:", "DATA RACE", "fatal error:"} {
		if strings.Contains(text, bad) {
			p.t.Errorf("%s: log contains %q", p.name, bad)
		}
	}
	if p.t.Failed() {
		const max = 64 << 10
		if len(text) > max {
			text = "...\n" + text[len(text)-max:]
		}
		p.t.Logf("%s log (%s):\n%s", p.name, p.logPath, text)
	}
}

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
	if n.running() {
		t.Fatalf("%s: restart while still running", n.name)
	}
	m := &node{dir: n.dir, raftAddr: n.raftAddr, id: n.id, starts: n.starts, args: n.args}
	if err := m.launch(t, n.addr); err != nil {
		t.Fatalf("restart raftlock: %v", err)
	}
	return m
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
	p, err := launch(t, fmt.Sprintf("raftlock-%s-start%d", n.id, n.starts), raftlockBin, addr, args...)
	if err != nil {
		return err
	}
	n.proc = p
	return nil
}

// waitReady waits until the node answers PING, then until it answers a request that needs the
// leader (DBSIZE) with an integer, or with a redirect to the leader (a follower started with
// --redirect true).
func (n *node) waitReady(timeout time.Duration) error {
	return n.waitServing(timeout, func(c *respConn) error {
		if r, err := c.do("DBSIZE"); err != nil || r[0] != ':' && !bytes.HasPrefix(r, []byte("-MOVED ")) {
			return fmt.Errorf("DBSIZE: %q, %v", r, err)
		}
		return nil
	})
}

// waitServing polls until the process answers PING and then passes check (if any) on the same
// connection. When it gives up, it kills the process and returns an error with its log.
func (p *proc) waitServing(timeout time.Duration, check func(*respConn) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if !p.running() {
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.waitErr, p.logText())
		}
		last = func() error {
			c, err := dialRESP(p.addr)
			if err != nil {
				return err
			}
			defer c.Close()
			if r, err := c.do("PING"); err != nil || string(r) != "+PONG\r\n" {
				return fmt.Errorf("PING: %q, %v", r, err)
			}
			if check != nil {
				return check(c)
			}
			return nil
		}()
		if last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.stopped.Store(true)
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
	return fmt.Errorf("%s not ready after %v: %v\n%s", p.name, timeout, last, p.logText())
}

// respConn is a raw RESP connection: it writes commands as multibulk arrays (or raw bytes) and
// reads back each reply's exact bytes, RESP2 or RESP3.
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
func encodeCommand(args ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

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

// readReply returns the bytes of one complete reply.
func (c *respConn) readReply() ([]byte, error) {
	if err := c.nc.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return nil, err
	}
	var out []byte
	if err := c.readValue(&out, 0); err != nil {
		return out, err
	}
	return out, nil
}

func (c *respConn) readValue(out *[]byte, depth int) error {
	if depth > 32 {
		return errors.New("reply nested too deep")
	}
	line, err := c.br.ReadBytes('\n')
	*out = append(*out, line...)
	if err != nil {
		return err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return fmt.Errorf("malformed reply line %q", line)
	}
	body := string(line[1 : len(line)-2])
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return nil
	case '$', '!', '=':
		n, err := strconv.Atoi(body)
		if err != nil {
			return fmt.Errorf("bad length in %q", line)
		}
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.br, buf); err != nil {
			return err
		}
		*out = append(*out, buf...)
		return nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return fmt.Errorf("bad count in %q", line)
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range n {
			if err := c.readValue(out, depth+1); err != nil {
				return err
			}
		}
		if line[0] == '|' { // an attribute precedes the reply it describes
			return c.readValue(out, depth+1)
		}
		return nil
	}
	return fmt.Errorf("unknown reply type in %q", line)
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
