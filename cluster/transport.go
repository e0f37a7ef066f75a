package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/certs"
	"github.com/raftlock/raftlock/raftnode"
)

// TransportConfig configures the raft transport. A zero field means the documented default.
type TransportConfig struct {
	// Bind is the listen address. Required.
	Bind string
	// Advertise is the address other nodes dial (default: the address the listener got).
	Advertise string
	// TLS, when set, makes the transport mutual TLS: a peer must present a certificate signed
	// by TLS's CA before a byte of its reaches raft, and this node presents its own when it
	// dials. nil: plain TCP.
	TLS *certs.Source
	// MaxConns bounds the inbound connections open at once (default 512), MaxConnsPerIP those
	// from one IP address (default 64): a peer keeps a handful open to each other peer (raft's
	// pool of 3, the pipeline, a snapshot), so only a flood reaches either. One more is closed
	// at once.
	MaxConns      int
	MaxConnsPerIP int
	// HandshakeTimeout bounds an inbound connection's TLS handshake, or the wait for its first
	// byte without TLS (default 5 s); IdleTimeout closes an inbound connection that sends
	// nothing for that long (default 5 min). Outbound connections idle for half of it are
	// replaced before their next use, so a peer's close never fails an RPC.
	HandshakeTimeout time.Duration
	IdleTimeout      time.Duration
	// Logger receives the transport's logs, raft's transport's included. Default slog.Default().
	Logger *slog.Logger
	// Layout, for NewGroupTransports, is the number of raft groups the cluster was created with
	// (0: as many as it runs). Nodes of one layout talk whatever groups each runs: while a
	// cluster converts to more groups (RAFT GROUPS), some run more than others, and a node of
	// a cluster created with one group takes a peer that still runs one for group 0.
	Layout int
}

func (c TransportConfig) withDefaults() TransportConfig {
	if c.MaxConns == 0 {
		c.MaxConns = 512
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = 64
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 5 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 5 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first invalid field by name.
func (c TransportConfig) Validate() error {
	switch {
	case c.Bind == "":
		return errors.New("raftnode: TransportConfig.Bind is required")
	case c.MaxConns < 0 || c.MaxConnsPerIP < 0:
		return errors.New("raftnode: TransportConfig.MaxConns and MaxConnsPerIP must not be negative")
	case c.HandshakeTimeout < 0 || c.IdleTimeout < 0:
		return errors.New("raftnode: TransportConfig.HandshakeTimeout and IdleTimeout must not be negative")
	case c.TLS != nil && !c.TLS.HasCA():
		return errors.New("raftnode: TransportConfig.TLS needs a CA file: peers are verified against it")
	}
	return nil
}

// Transport is raft's network transport over the stream layer of this file, which also knows
// the connections it dialed: AbortConnections cuts them when a shutdown must not wait for them.
type Transport struct {
	*raft.NetworkTransport
	layer *streamLayer
	// group is this transport's group's stream layer when the node runs several raft groups
	// (NewGroupTransports), nil when it runs one.
	group *groupLayer
	// vetted is what Consumer hands raft: the network transport's RPCs that vetRPC passed. The
	// goroutine between them stops at Close.
	vetted   chan raft.RPC
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	log      *slog.Logger
}

// Consumer returns the RPCs raft is to handle: those of authenticated peers (handshake.go)
// whose configurations are well-formed (vetRPC).
func (t *Transport) Consumer() <-chan raft.RPC { return t.vetted }

// AbortConnections closes every connection this transport dialed to a peer, and dials no more.
// raft's shutdown waits for its replication goroutines, and one blocked writing to a peer that
// reads nothing (a partition that drops packets, a paused process) stays blocked until the
// write deadline (Timeout, 10 s); a node asked to stop must not wait that long. It returns how
// many connections it closed.
func (t *Transport) AbortConnections() int {
	if t.group != nil {
		n := t.group.abortOutbound()
		if t.group.id == 0 {
			n += t.layer.abortOutbound() // group 0's connections to peers that run one group
		}
		t.group.mux.groupAborted()
		return n
	}
	return t.layer.abortOutbound()
}

// Close closes the listener, as raft's transport does, and every dialed connection. With
// several groups the listener and the sessions close with the last group's transport.
func (t *Transport) Close() error {
	err := t.NetworkTransport.Close()
	var last error
	t.stopOnce.Do(func() {
		close(t.stop)
		if t.group != nil {
			t.group.abortOutbound()
			if t.group.id == 0 {
				t.layer.abortOutbound() // group 0's connections to peers that run one group
			}
			last = t.group.mux.groupClosed()
		}
	})
	if t.group == nil {
		t.layer.abortOutbound()
	}
	t.wg.Wait()
	return errors.Join(err, last)
}

// NewTransport starts raft's network transport on cfg.Bind over the stream layer of this file.
// Outgoing connections leave from Bind's IP address, so a node on 127.0.0.2 talks to its peers
// from 127.0.0.2: a fault harness (or a firewall) can then tell the links between nodes apart
// and cut one direction of one link.
func NewTransport(cfg TransportConfig) (*Transport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	layer, err := newStreamLayer(cfg, 0)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "raft-transport")
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  raftnode.HCLogger(log),
	})
	t := startTransport(nt, layer, nil, log)
	layer.guard.start()
	return t, nil
}

// newStreamLayer listens on cfg.Bind; its guard accepts nothing until started. groups, above
// 0: the connections carry the sessions of that many raft groups (transport_mux.go).
func newStreamLayer(cfg TransportConfig, groups int) (*streamLayer, error) {
	var adv *net.TCPAddr
	var err error
	if cfg.Advertise != "" {
		if adv, err = resolveAdvertise(cfg.Advertise); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("raft transport on %s: %w", cfg.Bind, err)
	}
	if adv == nil {
		if adv, err = resolveAdvertise(ln.Addr().String()); err != nil {
			ln.Close()
			return nil, err
		}
	}
	local := ln.Addr().(*net.TCPAddr)
	var from *net.TCPAddr
	if !local.IP.IsUnspecified() {
		from = &net.TCPAddr{IP: local.IP}
	}
	layer := &streamLayer{
		advertise: adv,
		from:      from,
		idle:      cfg.IdleTimeout,
		groups:    groups,
		layout:    groups,
	}
	if cfg.Layout > 0 && cfg.Layout < groups {
		layer.layout = cfg.Layout
	}
	layer.guard = newGuardedListener(ln, cfg, cfg.Logger.With("component", "raft-listener"), &layer.gate)
	if cfg.TLS != nil {
		layer.dialTLS = cfg.TLS.PeerConfig(nil)
	}
	return layer, nil
}

// startTransport wraps raft's network transport nt over layer (and, with several groups, over
// group's streams) and starts vetting its RPCs.
func startTransport(nt *raft.NetworkTransport, layer *streamLayer, group *groupLayer, log *slog.Logger) *Transport {
	t := &Transport{NetworkTransport: nt, layer: layer, group: group, vetted: make(chan raft.RPC),
		stop: make(chan struct{}), log: log}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.vetLoop(nt.Consumer())
	}()
	return t
}

func resolveAdvertise(addr string) (*net.TCPAddr, error) {
	adv, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("raft advertise address %q: %w", addr, err)
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft advertise address %q is not a reachable address", addr)
	}
	return adv, nil
}

// streamLayer is raft's stream layer: inbound connections through guardedListener (the cap,
// the deadlines, the TLS handshake), outbound ones from a fixed source address, over TLS when
// configured.
type streamLayer struct {
	guard     *guardedListener
	advertise *net.TCPAddr
	from      *net.TCPAddr
	dialTLS   *tls.Config // nil: plain TCP
	idle      time.Duration
	// groups, above 0: the connections carry yamux sessions of that many raft groups
	// (transport_mux.go), of a cluster created with layout of them.
	groups, layout int
	// gate is the node this transport serves (handshake.go): set by New before raft starts.
	gate atomic.Pointer[gateRef]

	// out holds the dialed connections still open; aborted stops new dials (abortOutbound).
	outMu   sync.Mutex
	out     map[*redialConn]struct{}
	aborted bool
}

var errTransportAborted = errors.New("raft transport: shutting down")

var _ raft.StreamLayer = (*streamLayer)(nil)

func (s *streamLayer) Accept() (net.Conn, error) { return s.guard.Accept() }
func (s *streamLayer) Close() error              { return s.guard.Close() }
func (s *streamLayer) Addr() net.Addr            { return s.advertise }

// Dial connects to a peer; raft pools the connection. It is replaced before its next use once
// it has been idle for half the peer's IdleTimeout (the peer would have closed it by then).
func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.dialPooled(string(addr), timeout, s.groups)
}

// dialPooled is Dial of a connection whose hello says groups (0: one group's frames follow).
func (s *streamLayer) dialPooled(addr string, timeout time.Duration, groups int) (net.Conn, error) {
	dial := func() (net.Conn, error) { return s.dialAs(addr, timeout, groups) }
	nc, err := dial()
	if err != nil {
		return nil, err
	}
	c := newRedialConn(nc, dial, s.idle/2)
	s.outMu.Lock()
	defer s.outMu.Unlock()
	if s.aborted {
		nc.Close()
		return nil, errTransportAborted
	}
	if s.out == nil {
		s.out = map[*redialConn]struct{}{}
	}
	s.out[c] = struct{}{}
	c.onClose = func() { s.forget(c) }
	return c, nil
}

func (s *streamLayer) forget(c *redialConn) {
	s.outMu.Lock()
	delete(s.out, c)
	s.outMu.Unlock()
}

// abortOutbound closes every dialed connection still open and refuses new dials.
func (s *streamLayer) abortOutbound() int {
	s.outMu.Lock()
	s.aborted = true
	conns := make([]*redialConn, 0, len(s.out))
	for c := range s.out {
		conns = append(conns, c)
	}
	s.out = nil
	s.outMu.Unlock()
	for _, c := range conns {
		c.conn().Close()
	}
	return len(conns)
}

// errSelfConnect refuses a dial that connected to itself (selfConnected).
var errSelfConnect = errors.New("raft transport: the dial connected to itself: nothing listens at the peer's address")

// selfConnected reports whether c is a TCP connection to itself. A dial to a port on this host
// that nothing listens on can connect to itself, when the kernel picks that same port as the
// dial's source (TCP simultaneous open). Such a connection talks to itself, and holds the port
// that the peer, restarting, needs to listen on.
func selfConnected(c net.Conn) bool {
	return c.LocalAddr().String() == c.RemoteAddr().String()
}

// dial connects to a peer and runs the handshakes: a session of this node's groups follows.
func (s *streamLayer) dial(addr string, timeout time.Duration) (net.Conn, error) {
	return s.dialAs(addr, timeout, s.groups)
}

// dialAs is dial of a connection whose hello says groups (0: one group's frames follow).
func (s *streamLayer) dialAs(addr string, timeout time.Duration, groups int) (net.Conn, error) {
	s.outMu.Lock()
	aborted := s.aborted
	s.outMu.Unlock()
	if aborted {
		return nil, errTransportAborted
	}
	d := net.Dialer{Timeout: timeout}
	if s.from != nil {
		d.LocalAddr = s.from
	}
	c, err := d.Dial("tcp", addr)
	if err != nil && s.from != nil && errors.Is(err, errAddrNotAvail) {
		// The bind IP cannot reach this peer (a wildcard-free bind on another interface):
		// let the kernel choose.
		c, err = net.DialTimeout("tcp", addr, timeout)
	}
	if err != nil {
		return nil, err
	}
	if selfConnected(c) {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // closed with a reset: no FIN exchange with itself keeps the port
		}
		c.Close()
		return nil, errSelfConnect
	}
	deadline := time.Time{}
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	gate := s.gate.Load().get()
	if s.dialTLS == nil {
		if err := dialPeer(gate, c, nil, addr, deadline, groups, s.layout); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	tc := tls.Client(c, s.dialTLS)
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("raft TLS handshake with %s: %w", addr, err)
	}
	if err := dialPeer(gate, tc, tc, addr, deadline, groups, s.layout); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}
