package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// guardedListener hands raft only the inbound connections it may have: within the caps, past
// the TLS handshake (when configured) within HandshakeTimeout, each closed after IdleTimeout of
// silence. raft never reads a byte of a connection whose handshake failed, and a flood of
// connections costs this node at most the caps' descriptors. Its accept loop and a goroutine
// per handshake are its own; Close stops them, closes every connection it handed out, and
// waits.
type guardedListener struct {
	ln    net.Listener
	tls   *tls.Config // nil: plain TCP
	cfg   TransportConfig
	log   *slog.Logger
	ready chan net.Conn // unbuffered: a prepared connection waits for raft's Accept
	// serve, when set, takes every prepared connection instead of ready: it carries the
	// streams of groups raft groups of the node from (transport_mux.go) and returns when it
	// ends.
	serve func(c *guardedConn, from string)
	// bare, with serve, takes a connection of one group's frames from a node that runs one
	// group (group 0's, for a cluster created with one: acceptPeer).
	bare           func(c *guardedConn)
	groups, layout int
	// ctx ends at Close: it stops the accept loop and every handshake.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		perIP map[string]int
		conns map[*guardedConn]struct{}
	}
	// gate is the node that says which peers may talk to it (handshake.go); nil until the
	// node is attached, and then every connection is refused.
	gate *atomic.Pointer[gateRef]
	// lastWarn (unix nanoseconds) limits the refusals logged to one a second: a flood must
	// not turn into a flood of logs.
	lastWarn  atomic.Int64
	closeOnce sync.Once
	closeErr  error
}

func newGuardedListener(ln net.Listener, cfg TransportConfig, log *slog.Logger, gate *atomic.Pointer[gateRef]) *guardedListener {
	g := &guardedListener{ln: ln, cfg: cfg, log: log, ready: make(chan net.Conn), gate: gate}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	if cfg.TLS != nil {
		g.tls = cfg.TLS.ServerConfig(tls.RequireAndVerifyClientCert)
	}
	g.mu.perIP = make(map[string]int)
	g.mu.conns = make(map[*guardedConn]struct{})
	return g
}

// start starts accepting connections: once, after serve is set if it is to be.
func (g *guardedListener) start() {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.acceptLoop()
	}()
}

// Accept returns the next connection that passed the guard.
func (g *guardedListener) Accept() (net.Conn, error) {
	select {
	case c := <-g.ready:
		return c, nil
	case <-g.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes every connection the listener handed out. It is idempotent.
func (g *guardedListener) Close() error {
	g.closeOnce.Do(func() {
		g.cancel()
		g.closeErr = g.ln.Close()
		g.mu.Lock()
		conns := make([]*guardedConn, 0, len(g.mu.conns))
		for c := range g.mu.conns {
			conns = append(conns, c)
		}
		g.mu.Unlock()
		for _, c := range conns {
			c.raw.Close() // its reader sees the error and closes the rest
		}
		g.wg.Wait()
	})
	return g.closeErr
}

func (g *guardedListener) acceptLoop() {
	var backoff time.Duration
	for {
		nc, err := g.ln.Accept()
		if err != nil {
			if g.ctx.Err() != nil {
				return
			}
			// Out of descriptors, or a transient error: wait and go on, as raft's own loop does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			g.warn("raft accept failed; backing off", "err", err, "backoff", backoff)
			select {
			case <-g.ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		c, err := g.admit(nc)
		if err != nil {
			nc.Close()
			g.warn("raft connection refused", "remote", nc.RemoteAddr().String(), "err", err)
			continue
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.prepare(c)
		}()
	}
}

// errTooManyRaftConns is why a connection beyond a cap is closed at once.
var errTooManyRaftConns = errors.New("too many raft connections open")

// admit counts nc against the caps, or refuses it.
func (g *guardedListener) admit(nc net.Conn) (*guardedConn, error) {
	ip := nc.RemoteAddr().String()
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		ip = a.IP.String()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.mu.conns) >= g.cfg.MaxConns || g.mu.perIP[ip] >= g.cfg.MaxConnsPerIP {
		return nil, errTooManyRaftConns
	}
	c := &guardedConn{Conn: nc, raw: nc, first: g.cfg.HandshakeTimeout, idle: g.cfg.IdleTimeout, stopped: g.ctx}
	c.release = func() { g.release(c, ip) }
	g.mu.perIP[ip]++
	g.mu.conns[c] = struct{}{}
	return c, nil
}

func (g *guardedListener) release(c *guardedConn, ip string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.mu.conns, c)
	if g.mu.perIP[ip]--; g.mu.perIP[ip] <= 0 {
		delete(g.mu.perIP, ip)
	}
}

// prepare runs the TLS handshake, if any, and the raft handshake (handshake.go), and hands the
// connection to raft's Accept.
func (g *guardedListener) prepare(c *guardedConn) {
	var tc *tls.Conn
	if g.tls != nil {
		ctx, cancel := context.WithTimeout(g.ctx, g.cfg.HandshakeTimeout)
		tc = tls.Server(c.raw, g.tls)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			c.Close()
			g.warn("raft connection refused: TLS handshake failed", "remote", c.raw.RemoteAddr().String(), "err", err)
			return
		}
		// The raft handshake, or the first frame, must follow within HandshakeTimeout too.
		c.Conn = tc
	}
	// The whole hello within HandshakeTimeout, not a byte per IdleTimeout.
	late := time.AfterFunc(g.cfg.HandshakeTimeout, func() { c.raw.Close() })
	peer, err := acceptPeer(g.gate.Load().get(), c, tc, g.groups, g.layout)
	if !late.Stop() && err == nil {
		err = errors.New("raft handshake not finished within the handshake timeout")
	}
	if err != nil {
		c.Close()
		g.warn("raft connection refused", "remote", c.raw.RemoteAddr().String(), "err", err)
		return
	}
	if g.serve != nil && peer.bare {
		g.bare(c)
		return
	}
	if g.serve != nil {
		g.serve(c, peer.from)
		return
	}
	c.ahead = peer.ahead
	select {
	case g.ready <- c:
	case <-g.ctx.Done():
		c.Close()
	}
}

// warn logs at most one message a second.
func (g *guardedListener) warn(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := g.lastWarn.Load()
	if now-last < int64(time.Second) || !g.lastWarn.CompareAndSwap(last, now) {
		return
	}
	g.log.Warn(msg, args...)
}

// guardedConn is an inbound raft connection with a deadline on every read: first (the wait for
// its first byte) and then idle. Conn is the TLS connection over raw, or raw itself; only
// prepare, and then raft's handler goroutine, use it; the listener's Close touches only raw.
// ahead is what the raft handshake read of a legacy peer's first frame, which raft reads first.
type guardedConn struct {
	net.Conn
	raw         net.Conn
	first, idle time.Duration
	started     bool
	ahead       []byte
	stopped     context.Context // the listener's: done once it closes
	closeOnce   sync.Once
	release     func()
}

func (c *guardedConn) Read(b []byte) (int, error) {
	if len(c.ahead) > 0 {
		n := copy(b, c.ahead)
		c.ahead = c.ahead[n:]
		return n, nil
	}
	d := c.idle
	if !c.started {
		c.started, d = true, c.first
	}
	if err := c.Conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	if err != nil && c.stopped.Err() != nil {
		// The transport is closing and closed it: a clean end, not an error for raft to log.
		err = io.EOF
	}
	return n, err
}

// Close closes the connection and frees its place under the caps. It is idempotent.
func (c *guardedConn) Close() error {
	err := net.ErrClosed
	c.closeOnce.Do(func() {
		err = c.Conn.Close()
		c.release()
	})
	return err
}

// redialConn is an outbound raft connection that replaces itself, just before a write, once it
// has been idle (no read in progress, nothing read or written) for longer than stale: by then
// the peer's IdleTimeout may have closed it, and raft would see the RPC it is about to send
// fail (a lost vote, a failed heartbeat). raft uses a pooled connection for one request and its
// response at a time, so between uses nothing is buffered on it and a new connection is as good
// as the old. A pipeline connection always has a read in progress and is never replaced.
type redialConn struct {
	cur     atomic.Pointer[net.Conn]
	dial    func() (net.Conn, error)
	stale   time.Duration
	onClose func()       // set by the stream layer once, before the connection is handed out
	last    atomic.Int64 // unix nanoseconds of the last read or write
	reading atomic.Int32
	// deadlines are the last ones raft set, applied again to a replacement.
	deadlines struct {
		sync.Mutex
		read, write time.Time
	}
}

func newRedialConn(nc net.Conn, dial func() (net.Conn, error), stale time.Duration) *redialConn {
	c := &redialConn{dial: dial, stale: stale}
	c.cur.Store(&nc)
	c.touch()
	return c
}

func (c *redialConn) conn() net.Conn { return *c.cur.Load() }
func (c *redialConn) touch()         { c.last.Store(time.Now().UnixNano()) }

func (c *redialConn) Read(b []byte) (int, error) {
	c.reading.Add(1)
	n, err := c.conn().Read(b)
	c.touch()
	c.reading.Add(-1)
	return n, err
}

func (c *redialConn) Write(b []byte) (int, error) {
	if c.stale > 0 && c.reading.Load() == 0 && time.Since(time.Unix(0, c.last.Load())) > c.stale {
		nc, err := c.dial()
		if err != nil {
			return 0, err
		}
		c.deadlines.Lock()
		nc.SetReadDeadline(c.deadlines.read)
		nc.SetWriteDeadline(c.deadlines.write)
		c.deadlines.Unlock()
		old := c.cur.Swap(&nc)
		(*old).Close()
	}
	n, err := c.conn().Write(b)
	c.touch()
	return n, err
}

func (c *redialConn) Close() error {
	if c.onClose != nil {
		c.onClose()
	}
	return c.conn().Close()
}

func (c *redialConn) LocalAddr() net.Addr  { return c.conn().LocalAddr() }
func (c *redialConn) RemoteAddr() net.Addr { return c.conn().RemoteAddr() }

func (c *redialConn) SetDeadline(t time.Time) error {
	c.deadlines.Lock()
	c.deadlines.read, c.deadlines.write = t, t
	c.deadlines.Unlock()
	return c.conn().SetDeadline(t)
}

func (c *redialConn) SetReadDeadline(t time.Time) error {
	c.deadlines.Lock()
	c.deadlines.read = t
	c.deadlines.Unlock()
	return c.conn().SetReadDeadline(t)
}

func (c *redialConn) SetWriteDeadline(t time.Time) error {
	c.deadlines.Lock()
	c.deadlines.write = t
	c.deadlines.Unlock()
	return c.conn().SetWriteDeadline(t)
}
