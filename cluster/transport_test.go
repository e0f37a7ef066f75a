package cluster

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/certs"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testGate is the peer policy of a transport without a node: the transport tests' members
// and cluster, where a Node answers from its raft configuration and its table.
type testGate struct {
	id      string
	mu      sync.Mutex
	cluster string
	members map[string]string // ID -> raft address; nil: no configuration yet
	hello   bool
}

func (g *testGate) helloRequired() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.hello }
func (g *testGate) localID() string     { return g.id }

func (g *testGate) handshakeCluster() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cluster
}

func (g *testGate) adoptCluster(id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cluster == "" {
		g.cluster = id
	}
	if g.cluster != id {
		return errForeignCluster
	}
	return nil
}

func (g *testGate) admits(id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.members[id]; ok || g.members == nil {
		return nil
	}
	return errNotMember
}

func (g *testGate) memberAt(addr string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, a := range g.members {
		if a == addr {
			return id
		}
	}
	return ""
}

// newTestTransport starts a transport on 127.0.0.1:0 with cfg's other fields, closed when the
// test ends, and answers every RPC it receives with term 7 until then. It admits any peer
// (a gate with no configuration) unless the test attaches another gate.
func newTestTransport(t *testing.T, cfg TransportConfig) *Transport {
	t.Helper()
	cfg.Bind, cfg.Logger = "127.0.0.1:0", quietLogger()
	tr, err := NewTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.layer.gate.Store(&gateRef{&testGate{id: "n1"}})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case rpc := <-tr.Consumer():
				rpc.Respond(&raft.RequestVoteResponse{Term: 7}, nil)
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		tr.Close()
	})
	return tr
}

// testAuthority is a CA in a test's temporary directory, issuing certificates as raftlock cert
// does.
type testAuthority struct {
	*certs.Authority
	dir, file string
}

func newAuthority(t *testing.T) *testAuthority {
	t.Helper()
	ca, err := certs.NewAuthority("test CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file, _, err := certs.WriteFiles(dir, "ca", ca.Cert, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &testAuthority{Authority: ca, dir: dir, file: file}
}

// node returns the TLS material of node id's certificate.
func (ca *testAuthority) node(t *testing.T, id string) *certs.Source {
	t.Helper()
	is, err := ca.IssueNode(id, []string{"127.0.0.1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca.load(t, id, is)
}

// client returns the TLS material of a client certificate for user.
func (ca *testAuthority) client(t *testing.T, user string) *certs.Source {
	t.Helper()
	is, err := ca.IssueClient(user, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca.load(t, user, is)
}

func (ca *testAuthority) load(t *testing.T, name string, is *certs.Issued) *certs.Source {
	t.Helper()
	cert, key, err := certs.WriteFiles(ca.dir, name, is.Cert, is.Key)
	if err != nil {
		t.Fatal(err)
	}
	src, err := certs.Load(certs.Files{Cert: cert, Key: key, CA: ca.file})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func vote(from *Transport, to raft.ServerAddress) error {
	var out raft.RequestVoteResponse
	err := from.RequestVote("n2", to, &raft.RequestVoteRequest{Term: 1}, &out)
	if err == nil && out.Term != 7 {
		err = errors.New("unexpected answer")
	}
	return err
}

// TestTransportMutualTLS: peers with node certificates of the cluster CA talk; a peer without
// TLS, or with another CA's certificate, is refused at the handshake.
func TestTransportMutualTLS(t *testing.T) {
	ca := newAuthority(t)
	a := newTestTransport(t, TransportConfig{TLS: ca.node(t, "a")})
	b := newTestTransport(t, TransportConfig{TLS: ca.node(t, "b")})
	if err := vote(a, b.LocalAddr()); err != nil {
		t.Fatalf("a to b over mTLS: %v", err)
	}
	plain := newTestTransport(t, TransportConfig{})
	if err := vote(plain, b.LocalAddr()); err == nil {
		t.Errorf("a plain peer to b: answered; want refused")
	}
	other := newAuthority(t)
	stranger := newTestTransport(t, TransportConfig{TLS: other.node(t, "s")})
	if err := vote(stranger, b.LocalAddr()); err == nil {
		t.Errorf("another CA's peer to b: answered; want refused")
	}
	if err := vote(b, stranger.LocalAddr()); err == nil {
		t.Errorf("b to another CA's peer: answered; want refused (b verifies whom it dials too)")
	}
	if err := vote(b, a.LocalAddr()); err != nil {
		t.Fatalf("b to a over mTLS after the refusals: %v", err)
	}
}

// readsEOF reports whether the server closes nc within d without sending anything.
func readsEOF(nc net.Conn, d time.Duration) bool {
	nc.SetReadDeadline(time.Now().Add(d))
	_, err := nc.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestTransportBounds: connections beyond the per-IP cap are closed at once, a connection that
// sends nothing is closed after the handshake timeout, and one idle past the idle timeout is
// closed; a peer's pooled connection, idle past half of that, is replaced before its next RPC.
func TestTransportBounds(t *testing.T) {
	srv := newTestTransport(t, TransportConfig{MaxConnsPerIP: 2, HandshakeTimeout: 300 * time.Millisecond, IdleTimeout: 600 * time.Millisecond})
	addr := string(srv.LocalAddr())
	var held []net.Conn
	for range 2 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		held = append(held, nc)
	}
	time.Sleep(50 * time.Millisecond) // both accepted and counted
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if !readsEOF(third, 200*time.Millisecond) {
		t.Errorf("a third connection from one IP: still open; want closed at once")
	}
	for i, nc := range held {
		start := time.Now()
		if !readsEOF(nc, 2*time.Second) {
			t.Errorf("silent connection %d: still open after 2s; want closed after the 300ms handshake timeout", i)
		} else if el := time.Since(start); el > time.Second {
			t.Errorf("silent connection %d closed after %v; want about 300ms", i, el)
		}
	}

	// Freed places: a peer gets in, and its pooled connection outlives the idle timeout.
	peer := newTestTransport(t, TransportConfig{IdleTimeout: 600 * time.Millisecond})
	if err := vote(peer, srv.LocalAddr()); err != nil {
		t.Fatalf("a peer after the silent connections left: %v", err)
	}
	time.Sleep(800 * time.Millisecond) // the server closed the pooled connection by now
	if err := vote(peer, srv.LocalAddr()); err != nil {
		t.Fatalf("the peer's next RPC after its pooled connection idled out: %v", err)
	}
}

// A write to a peer that accepts but reads nothing blocks until the transport's 10 s write
// deadline; AbortConnections, which a node's Close calls when raft's shutdown waits on such a
// write, must end it at once, and the transport must dial no more afterwards.
func TestAbortConnectionsEndsABlockedWrite(t *testing.T) {
	tr := newTestTransport(t, TransportConfig{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn // accepted, held open, never read
	var heldMu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c)
			heldMu.Unlock()
		}
	}()
	defer func() {
		heldMu.Lock()
		defer heldMu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()

	big := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax},
		Term:      1,
		Entries:   []*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: make([]byte, 64<<20)}},
	}
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		var resp raft.AppendEntriesResponse
		errc <- tr.AppendEntries("peer", raft.ServerAddress(ln.Addr().String()), big, &resp)
	}()
	select {
	case err := <-errc:
		t.Fatalf("AppendEntries to a peer that reads nothing returned before the abort: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if n := tr.AbortConnections(); n != 1 {
		t.Errorf("AbortConnections closed %d connections, want the 1 dialed", n)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("AppendEntries succeeded on an aborted connection")
		}
		// The write deadline is 10 s away; the abort must not wait for it.
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("AppendEntries ended %v after it began: the abort did not cut the write", d)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("AppendEntries still blocked 8 s after AbortConnections")
	}
	var resp raft.AppendEntriesResponse
	if err := tr.AppendEntries("peer", raft.ServerAddress(ln.Addr().String()), &raft.AppendEntriesRequest{Term: 1}, &resp); err == nil {
		t.Fatal("the transport dialed again after AbortConnections")
	}
}
