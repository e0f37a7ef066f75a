package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"
	"github.com/raftlock/raftlock/raftnode"
)

// A node of a cluster that runs several raft groups (DESIGN.md §13) has one raft listener, and
// one connection to each peer, for all of its groups and both directions: the TLS handshake and
// the raft handshake (handshake.go, version 2) authenticate the nodes once, and a yamux session
// over the connection carries every group's raft connections, each node's, as streams. A node
// opens its streams on the session its peer opened to it when there is one, and dials one
// otherwise (two nodes that dial each other at the same moment keep two: each works). A stream starts with
// its group's number (two bytes, big-endian); the accepting node hands it to that group's raft
// only if the sender is a member of that group's configuration. Each group has its own raft
// transport (pool, pipeline, RPC vetting) over its own stream layer (groupLayer), so one
// group's raft never reads another's frames.
//
// A session ends when its connection fails or stays silent past the keep-alive; the next dial
// of any group opens a new one. Idle streams cost a few hundred bytes and no goroutine.

// MaxGroups bounds the raft groups one transport carries (a stream names its group in two
// bytes; DESIGN.md §13 keeps G to tens).
const MaxGroups = 1024

const (
	// streamsPerGroup bounds the streams a peer keeps open in one session, per group: raft
	// keeps a pool of 3 per peer, a pipeline and a snapshot at most, so only a misbehaving
	// peer reaches it. One more is closed at once.
	streamsPerGroup = 16
	// muxKeepAlive is how often a session is pinged: a session whose peer stopped answering
	// ends after this plus muxWriteTimeout, and the next dial opens another.
	muxKeepAlive    = 5 * time.Second
	muxWriteTimeout = 10 * time.Second
	groupHeaderLen  = 2
)

var errUnknownGroup = errors.New("raft stream names a group this node does not run")

// muxLayer owns the shared listener, the sessions and the groups' stream layers.
type muxLayer struct {
	base   *streamLayer // the listener (its guard serves sessions) and the dials
	groups []*groupLayer
	cfg    TransportConfig
	ymx    *yamux.Config
	log    *slog.Logger
	wg     sync.WaitGroup // the goroutines that route accepted streams

	mu      sync.Mutex
	out     map[string]*yamux.Session // dialed sessions, by peer address
	dialing map[string]*pendingSession
	in      map[*yamux.Session]string // accepted sessions, and the member each came from
	// inFrom is the newest open accepted session of each member: this node's dials to that
	// member open their streams on it rather than on a session of their own (one
	// authenticated connection per pair of nodes).
	inFrom map[string]*yamux.Session
	// peerAt caches memberAt: every raft connection a group opens asks. A configuration change
	// of any group empties it (forgetPeers), so an address a removed member left and a new one
	// took names the new one.
	peerAt map[string]string
	// oneGroup holds, by address, when a peer last refused a session because it runs one
	// group (a node not restarted yet while its cluster converts to more, RAFT GROUPS): for
	// oneGroupRetry from then group 0 dials it with one group's frames without asking again.
	oneGroup map[string]time.Time
	open     int // group transports not yet closed
	shutdown bool
}

// oneGroupRetry is how long a peer that runs one group is dialed without a session first.
const oneGroupRetry = 10 * time.Second

// pendingSession is a dial in progress: other groups dialing the same peer wait for it.
type pendingSession struct {
	done chan struct{}
	sess *yamux.Session
	err  error
}

// NewGroupTransports starts one raft listener on cfg.Bind that carries groups raft groups, and
// returns each group's raft transport (index = group number). Every node of the cluster must
// run the same number of groups: a peer that speaks for one group, or for a group this node
// does not run, is refused. The listener closes when the last group's transport closes.
func NewGroupTransports(cfg TransportConfig, groups int) ([]*Transport, error) {
	if groups < 2 || groups > MaxGroups {
		return nil, fmt.Errorf("raft groups must be in [2, %d] (one group: NewTransport), got %d", MaxGroups, groups)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base, err := newStreamLayer(cfg, groups)
	if err != nil {
		return nil, err
	}
	ymx := yamux.DefaultConfig()
	ymx.KeepAliveInterval = muxKeepAlive
	ymx.ConnectionWriteTimeout = muxWriteTimeout
	ymx.StreamOpenTimeout = muxWriteTimeout
	ymx.StreamCloseTimeout = muxWriteTimeout
	ymx.LogOutput = nil
	ymx.Logger = yamuxLogger{cfg.Logger.With("component", "raft-mux")}
	m := &muxLayer{base: base, cfg: cfg, ymx: ymx, log: cfg.Logger.With("component", "raft-mux"),
		out: map[string]*yamux.Session{}, dialing: map[string]*pendingSession{},
		in: map[*yamux.Session]string{}, inFrom: map[string]*yamux.Session{}, peerAt: map[string]string{},
		oneGroup: map[string]time.Time{}, open: groups}
	ts := make([]*Transport, groups)
	for g := range groups {
		gl := &groupLayer{mux: m, id: uint16(g), accept: make(chan net.Conn), closed: make(chan struct{}),
			out: map[*groupStream]struct{}{}}
		m.groups = append(m.groups, gl)
		log := cfg.Logger.With("component", "raft-transport", "group", g)
		nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  gl,
			MaxPool: 3,
			Timeout: 10 * time.Second,
			Logger:  raftnode.HCLogger(log),
		})
		ts[g] = startTransport(nt, base, gl, log)
	}
	// Sessions are served only once every group can take its streams.
	base.guard.serve, base.guard.bare, base.guard.groups, base.guard.layout = m.serve, m.serveBare, groups, base.layout
	base.guard.start()
	return ts, nil
}

// serve runs an accepted session until it ends: the guard's handshake goroutine calls it with
// the connection and the node the handshake authenticated. The session carries the streams of
// both nodes: the peer's, accepted here, and this node's to the peer (session).
func (m *muxLayer) serve(c *guardedConn, from string) {
	defer c.Close()
	sess, err := yamux.Server(c, m.ymx)
	if err != nil {
		m.base.guard.warn("raft session refused", "peer", from, "err", err)
		return
	}
	m.mu.Lock()
	if m.shutdown {
		m.mu.Unlock()
		sess.Close()
		return
	}
	m.in[sess] = from
	m.inFrom[from] = sess
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.in, sess)
		if m.inFrom[from] == sess {
			delete(m.inFrom, from)
		}
		m.mu.Unlock()
		sess.Close()
	}()
	m.acceptStreams(sess, from)
}

// serveBare hands group 0's raft a connection of one group's frames from a node that runs one
// group (acceptPeer admitted it as a member of group 0, whose member speaks for the node).
func (m *muxLayer) serveBare(c *guardedConn) {
	gl := m.groups[0]
	select {
	case gl.accept <- c:
	case <-gl.closed:
		c.Close()
	}
}

// runsOneGroup reports whether the peer at addr refused a session lately because it runs one
// group; refused records that it did now.
func (m *muxLayer) runsOneGroup(addr string, refused bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if refused {
		m.oneGroup[addr] = time.Now()
		return true
	}
	at, ok := m.oneGroup[addr]
	if ok && time.Since(at) > oneGroupRetry {
		delete(m.oneGroup, addr)
		ok = false
	}
	return ok
}

// acceptStreams hands each stream the peer from opens on sess to its group (route) until the
// session ends, at most streamsPerGroup per group open at once.
func (m *muxLayer) acceptStreams(sess *yamux.Session, from string) {
	var streams atomic.Int32
	limit := int32(streamsPerGroup * len(m.groups))
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		if streams.Add(1) > limit {
			streams.Add(-1)
			st.Close()
			m.base.guard.warn("raft stream refused", "peer", from, "err", "too many raft streams open in one session")
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(&acceptedStream{Stream: st, release: func() { streams.Add(-1) }}, from)
		}()
	}
}

// route reads a stream's group and hands it to that group's raft, if from is its member.
func (m *muxLayer) route(st *acceptedStream, from string) {
	gl, err := m.readGroup(st)
	if err == nil {
		if gate := gl.gate.Load().get(); gate == nil {
			err = errNotStarted
		} else {
			err = gate.admits(from)
		}
	}
	if err != nil {
		st.Close()
		m.base.guard.warn("raft stream refused", "peer", from, "err", err)
		return
	}
	select {
	case gl.accept <- st:
	case <-gl.closed:
		st.Close()
	}
}

func (m *muxLayer) readGroup(st *acceptedStream) (*groupLayer, error) {
	if err := st.SetReadDeadline(time.Now().Add(m.cfg.HandshakeTimeout)); err != nil {
		return nil, err
	}
	var h [groupHeaderLen]byte
	if _, err := io.ReadFull(st, h[:]); err != nil {
		return nil, fmt.Errorf("raft stream header: %w", err)
	}
	if err := st.SetReadDeadline(time.Time{}); err != nil {
		return nil, err
	}
	g := int(binary.BigEndian.Uint16(h[:]))
	if g >= len(m.groups) {
		return nil, fmt.Errorf("%w: group %d of %d", errUnknownGroup, g, len(m.groups))
	}
	return m.groups[g], nil
}

// session returns the open session to addr: the one the member at addr opened to this node,
// or the one this node dialed, dialing one if there is neither.
func (m *muxLayer) session(addr string, timeout time.Duration) (*yamux.Session, error) {
	peer := m.memberAt(addr)
	m.mu.Lock()
	if m.shutdown {
		m.mu.Unlock()
		return nil, errTransportAborted
	}
	if s := m.inFrom[peer]; peer != "" && s != nil && !s.IsClosed() {
		m.mu.Unlock()
		return s, nil
	}
	if s := m.out[addr]; s != nil && !s.IsClosed() {
		m.mu.Unlock()
		return s, nil
	}
	if p := m.dialing[addr]; p != nil {
		m.mu.Unlock()
		<-p.done
		return p.sess, p.err
	}
	p := &pendingSession{done: make(chan struct{})}
	m.dialing[addr] = p
	m.mu.Unlock()

	sess, err := m.dialSession(addr, timeout)
	m.mu.Lock()
	delete(m.dialing, addr)
	if err == nil && m.shutdown {
		sess.Close()
		sess, err = nil, errTransportAborted
	}
	if err == nil {
		m.out[addr] = sess
		if peer != "" {
			// The peer opens its streams to this node over this yamux session too, admitted as the
			// member the dial verified (its certificate, with raft TLS), as an accepted
			// session's handshake verifies the dialer. wg.Add under mu: a shutdown, which sets
			// m.shutdown under mu before it waits on wg, cannot miss this goroutine.
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.acceptStreams(sess, peer)
			}()
		}
	}
	m.mu.Unlock()
	p.sess, p.err = sess, err
	close(p.done)
	return sess, err
}

// memberAt is the ID of the member at raft address addr in any group's configuration (every
// node is a member of every group), "" if none knows it yet.
func (m *muxLayer) memberAt(addr string) string {
	m.mu.Lock()
	id, ok := m.peerAt[addr]
	m.mu.Unlock()
	if ok {
		return id
	}
	for _, g := range m.groups {
		if gate := g.gate.Load().get(); gate != nil {
			if id := gate.memberAt(addr); id != "" {
				m.mu.Lock()
				m.peerAt[addr] = id
				m.mu.Unlock()
				return id
			}
		}
	}
	return ""
}

// forgetPeers empties the memberAt cache: a group's configuration changed.
func (m *muxLayer) forgetPeers() {
	m.mu.Lock()
	clear(m.peerAt)
	m.mu.Unlock()
}

func (m *muxLayer) dialSession(addr string, timeout time.Duration) (*yamux.Session, error) {
	c, err := m.base.dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	sess, err := yamux.Client(c, m.ymx)
	if err != nil {
		c.Close()
		return nil, err
	}
	return sess, nil
}

// groupAborted is a group's AbortConnections: its stopping raft must not wait on a peer that
// reads nothing, and a stream's write can wait on its session's connection, which only closing
// the session frees. The node's groups stop together, so the sessions close, for all of them,
// at the first.
func (m *muxLayer) groupAborted() { m.closeSessions() }

// groupClosed closes the listener and every session once the last group's transport closed.
func (m *muxLayer) groupClosed() error {
	m.mu.Lock()
	m.open--
	last := m.open == 0
	m.mu.Unlock()
	if !last {
		return nil
	}
	m.closeSessions()
	err := m.base.guard.Close()
	m.wg.Wait()
	return err
}

func (m *muxLayer) closeSessions() {
	m.mu.Lock()
	m.shutdown = true
	var all []*yamux.Session
	for _, s := range m.out {
		all = append(all, s)
	}
	for s := range m.in {
		all = append(all, s)
	}
	m.out = map[string]*yamux.Session{}
	m.inFrom = map[string]*yamux.Session{}
	m.mu.Unlock()
	for _, s := range all {
		s.Close()
	}
}

// sessions reports the open dialed and accepted sessions (tests, status).
func (m *muxLayer) sessions() (out, in int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.out {
		if !s.IsClosed() {
			out++
		}
	}
	return out, len(m.in)
}

// groupLayer is one group's raft stream layer over the node's sessions.
type groupLayer struct {
	mux    *muxLayer
	id     uint16
	accept chan net.Conn // unbuffered: a routed stream waits for raft's Accept
	// gate is the group's member (handshake.go's peerGate): a stream is routed to it only
	// from a node in its configuration.
	gate      atomic.Pointer[gateRef]
	closed    chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	out     map[*groupStream]struct{} // dialed streams still open
	aborted bool
}

var _ raft.StreamLayer = (*groupLayer)(nil)

func (l *groupLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops this group's Accept; the listener is the mux's (groupClosed).
func (l *groupLayer) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *groupLayer) Addr() net.Addr { return l.mux.base.advertise }

// Dial opens a stream to the peer at addr for this group, over the session to it.
func (l *groupLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l.mu.Lock()
	aborted := l.aborted
	l.mu.Unlock()
	if aborted {
		return nil, errTransportAborted
	}
	// A peer that still runs one group, of a cluster created with one (it converts: RAFT
	// GROUPS), takes group 0's frames on a connection of their own; the other groups wait for
	// its restart.
	bare := l.id == 0 && l.mux.base.layout == 1
	if l.mux.base.layout == 1 && l.mux.runsOneGroup(string(addr), false) {
		if !bare {
			return nil, fmt.Errorf("raft stream to %s: %w (group %d waits for its restart)", addr, errOneGroup, l.id)
		}
		return l.mux.base.dialPooled(string(addr), timeout, 0)
	}
	sess, err := l.mux.session(string(addr), timeout)
	if l.mux.base.layout == 1 && peerRunsOneGroup(err) {
		l.mux.runsOneGroup(string(addr), true)
		if bare {
			return l.mux.base.dialPooled(string(addr), timeout, 0)
		}
	}
	if err != nil {
		return nil, err
	}
	st, err := sess.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("raft stream to %s: %w", addr, err)
	}
	var h [groupHeaderLen]byte
	binary.BigEndian.PutUint16(h[:], l.id)
	if timeout > 0 {
		st.SetWriteDeadline(time.Now().Add(timeout))
	}
	if _, err := st.Write(h[:]); err != nil {
		st.Close()
		return nil, fmt.Errorf("raft stream to %s: %w", addr, err)
	}
	st.SetWriteDeadline(time.Time{})
	c := &groupStream{Stream: st}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.aborted {
		st.Close()
		return nil, errTransportAborted
	}
	l.out[c] = struct{}{}
	c.forget = func() {
		l.mu.Lock()
		delete(l.out, c)
		l.mu.Unlock()
	}
	return c, nil
}

// abortOutbound closes every stream this group dialed and refuses new dials.
func (l *groupLayer) abortOutbound() int {
	l.mu.Lock()
	l.aborted = true
	streams := make([]*groupStream, 0, len(l.out))
	for c := range l.out {
		streams = append(streams, c)
	}
	l.out = map[*groupStream]struct{}{}
	l.mu.Unlock()
	for _, c := range streams {
		c.Stream.Close()
	}
	return len(streams)
}

// groupStream is a dialed stream that leaves its group's list when closed.
type groupStream struct {
	*yamux.Stream
	forget    func()
	closeOnce sync.Once
}

func (c *groupStream) Close() error {
	err := c.Stream.Close()
	c.closeOnce.Do(func() {
		if c.forget != nil {
			c.forget()
		}
	})
	return err
}

// acceptedStream is an accepted stream that frees its place under the session's cap when closed.
type acceptedStream struct {
	*yamux.Stream
	release   func()
	closeOnce sync.Once
}

func (c *acceptedStream) Close() error {
	err := c.Stream.Close()
	c.closeOnce.Do(c.release)
	return err
}

// yamuxLogger turns yamux's log lines into debug records: a session's end is routine (a peer
// restarts), and raft logs what it costs.
type yamuxLogger struct{ log *slog.Logger }

func (l yamuxLogger) Print(v ...any)                 { l.log.Debug(fmt.Sprint(v...)) }
func (l yamuxLogger) Printf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l yamuxLogger) Println(v ...any)               { l.log.Debug(fmt.Sprint(v...)) }
