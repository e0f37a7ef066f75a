package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// proxy forwards TCP connections to a backend until it is cut: then every byte either way is
// dropped, as a network partition drops them, while the connections stay open. While it
// refuses, it closes every connection it accepts. Armed (arm), it keeps the node's reply to
// a request from its client, after the node has acted on the request.
type proxy struct {
	ln      net.Listener
	backend string
	cut     atomic.Bool
	refuse  atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn

	// armed, while times is positive: the next times requests whose bytes hold needle get,
	// instead of their reply, a closed connection or an UNCERTAIN error (tamper); fired
	// counts those that did.
	armed struct {
		sync.Mutex
		needle []byte
		how    tamper
		times  int
	}
	fired atomic.Int32
}

// tamper is what an armed proxy does with the reply it keeps.
type tamper int

const (
	// closeConn closes the connection instead of replying, as a node that crashed or a
	// network that broke after the request arrived.
	closeConn tamper = iota
	// replyUncertain replies raftlock's error for a write whose outcome is unknown, as a
	// leader that lost its leadership after proposing it does.
	replyUncertain
)

// arm makes the next times requests holding needle (a RESP bulk string such as
// "$4\r\nLOCK\r\n") lose their reply as how says.
func (p *proxy) arm(needle string, how tamper, times int) {
	p.armed.Lock()
	defer p.armed.Unlock()
	p.armed.needle, p.armed.how, p.armed.times = []byte(needle), how, times
}

// take reports whether a request chunk is one the proxy is armed for, and disarms one.
func (p *proxy) take(chunk []byte) (tamper, bool) {
	p.armed.Lock()
	defer p.armed.Unlock()
	if p.armed.times <= 0 || !bytes.Contains(chunk, p.armed.needle) {
		return 0, false
	}
	p.armed.times--
	return p.armed.how, true
}

func newProxy(t *testing.T, backend string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, backend: backend}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// proxiedClient returns a proxy in front of serverAddr and a Client of it alone (opts.Addrs is
// replaced), both closed when the test ends.
func proxiedClient(t *testing.T, opts Options) (*proxy, *Client) {
	t.Helper()
	p := newProxy(t, serverAddr)
	opts.Addrs = []string{p.addr()}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

func (p *proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.backend)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		// owed is, once a request the proxy is armed for went to the node, what to do with
		// the next reply: 1 + its tamper.
		var owed atomic.Int32
		p.wg.Go(func() {
			p.pipe(out, in, func(chunk []byte) []byte {
				if how, ok := p.take(chunk); ok {
					owed.Store(1 + int32(how))
				}
				return chunk
			})
		})
		p.wg.Go(func() {
			p.pipe(in, out, func(chunk []byte) []byte {
				switch tamper(owed.Swap(0) - 1) {
				case closeConn:
					p.fired.Add(1)
					in.Close()
					out.Close()
					return nil
				case replyUncertain:
					p.fired.Add(1)
					return []byte("-UNCERTAIN the outcome is unknown (a test proxy kept the reply)\r\n")
				}
				return chunk
			})
		})
	}
}

// pipe copies from src to dst while the proxy is not cut, each chunk as through returns it.
func (p *proxy) pipe(dst io.Writer, src io.Reader, through func([]byte) []byte) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if p.cut.Load() {
			continue
		}
		chunk := through(buf[:n])
		if chunk == nil {
			return
		}
		if _, err := dst.Write(chunk); err != nil {
			return
		}
	}
}

// drop closes every connection open through the proxy.
func (p *proxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) close() {
	p.ln.Close()
	p.drop()
	p.wg.Wait()
}

// TestExpiredOnClientClock: once no renewal can be confirmed (the network drops everything,
// notices included), the handle ends by its own clock, a lease after its last confirmed
// renewal was sent, without waiting for any reply.
func TestExpiredOnClientClock(t *testing.T) {
	p, c := proxiedClient(t, Options{ReadTimeout: 10 * time.Second})
	ctx := t.Context()
	const ttl = 600 * time.Millisecond
	l, err := c.Lock(ctx, "unit/partitioned", ttl)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl) // a renewal or so confirmed first
	p.cut.Store(true)
	cutAt := time.Now()
	select {
	case <-l.Done():
	case <-time.After(3 * ttl):
		t.Fatalf("Done still open %v after the cut; lease %v", 3*ttl, ttl)
	}
	endedAfter := time.Since(cutAt)
	if err := l.Err(); !errors.Is(err, ErrExpired) || !errors.Is(err, ErrLockLost) {
		t.Fatalf("Err = %v, want ErrExpired", err)
	}
	t.Logf("Done closed %v after the cut (lease %v)", endedAfter, ttl)
}

// Err reads the lease clock itself: a lease after the last confirmed renewal was sent (before
// the cut), Err says the lock is lost, whether or not the timer behind Done has fired yet (a
// loaded machine may run it late).
func TestErrAtTheLeaseEnd(t *testing.T) {
	p, c := proxiedClient(t, Options{ReadTimeout: 10 * time.Second})
	const ttl = 600 * time.Millisecond
	l, err := c.Lock(t.Context(), "unit/partitioned-err", ttl)
	if err != nil {
		t.Fatal(err)
	}
	p.cut.Store(true)
	cutAt := time.Now()
	time.Sleep(time.Until(cutAt.Add(ttl)))
	if err := l.Err(); !errors.Is(err, ErrExpired) {
		t.Fatalf("Err a lease after the cut = %v, want ErrExpired", err)
	}
}

// TestValidateAfterNoticesDropped: a lock released by someone else while the client's
// notice connection was down, so that no notice could reach it, ends once the client is
// subscribed again: it asks VALIDATE for every lock then, long before the next renewal.
func TestValidateAfterNoticesDropped(t *testing.T) {
	p, c := proxiedClient(t, Options{})
	ctx := t.Context()
	l, err := c.Lock(ctx, "unit/unheard", 30*time.Second) // the first renewal in 10 s
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: serverAddr, Protocol: 2})
	defer rdb.Close()
	p.refuse.Store(true)
	p.drop()
	if n, err := rdb.Do(ctx, "UNLOCK", "unit/unheard", l.Token()).Int64(); n != 1 || err != nil {
		t.Fatalf("UNLOCK by another connection: %d, %v", n, err)
	}
	time.Sleep(200 * time.Millisecond) // the notice published to nobody of ours
	if err := l.Err(); err != nil {
		t.Fatalf("the handle ended with %v while it could hear nothing", err)
	}
	p.refuse.Store(false)
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done still open 5 s after the client could connect again")
	}
	var lost *LostError
	if err := l.Err(); !errors.As(err, &lost) || lost.Reason != "not held" {
		t.Fatalf("Err = %v, want a LostError not held (found by VALIDATE, not by a notice)", err)
	}
}

// TestFailover: a dead first address costs one failed dial; the call goes on to the next.
func TestFailover(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c, err := New(Options{Addrs: []string{dead, serverAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	for i := range 3 {
		l, err := c.Lock(ctx, "unit/failover", time.Second)
		if err != nil {
			t.Fatalf("Lock %d: %v", i, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d: %v", i, err)
		}
	}
}

// TestRecoverMulti: after an MLOCK of unknown outcome, the keys are read: held by the
// request's owner, the grant is found with its tokens, and its lease counted from the first
// unknown attempt's send.
func TestRecoverMulti(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) { recoverMulti(t, proto) })
	}
}

func recoverMulti(t *testing.T, proto int) {
	rdb := redis.NewClient(&redis.Options{Addr: serverAddr, Protocol: proto})
	defer rdb.Close()
	ctx := t.Context()
	keys := []string{"unit/rm1", "unit/rm2"}
	r := &request{keys: keys, ttl: 5 * time.Second, lockOptions: lockOptions{kind: multi, owner: newOwner()}}
	if tokens, _, err := r.recover(ctx, rdb); tokens != nil || err != nil {
		t.Fatalf("recover with no unknown attempt: %v, %v; want nothing", tokens, err)
	}
	r.unknownSince = time.Now()
	if tokens, _, err := r.recover(ctx, rdb); tokens != nil || err != nil {
		t.Fatalf("recover before any grant: %v, %v; want nothing", tokens, err)
	}
	v, err := rdb.Do(ctx, r.args(0)...).Slice()
	if err != nil || len(v) != 2 {
		t.Fatalf("MLOCK: %v, %v", v, err)
	}
	tokens, sent, err := r.recover(ctx, rdb)
	if err != nil || len(tokens) != 2 || int64(tokens[0]) != v[0] || int64(tokens[1]) != v[1] {
		t.Fatalf("recover after the grant: %v, %v; want %v", tokens, err, v)
	}
	if !sent.Equal(r.unknownSince) {
		t.Fatalf("recover's lease start %v, want the unknown attempt's %v", sent, r.unknownSince)
	}
	other := &request{keys: keys, ttl: time.Second, lockOptions: lockOptions{kind: multi, owner: "someone-else"}, unknownSince: time.Now()}
	if tokens, _, err := other.recover(ctx, rdb); tokens != nil || err != nil {
		t.Fatalf("recover for another owner: %v, %v; want nothing", tokens, err)
	}
	for i, k := range keys {
		rdb.Do(ctx, "UNLOCK", k, tokens[i])
	}
}
