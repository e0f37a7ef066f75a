package cluster

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/tests/testutil"
)

// setGate gives tr the peer policy g.
func setGate(tr *Transport, g *testGate) { tr.layer.gate.Store(&gateRef{g}) }

// TestTransportPeersAreMembers: over mutual TLS a raft connection is accepted only from a
// certificate that names a member (any node's while the acceptor has no configuration); a
// client certificate of the same CA and a node certificate of a non-member are refused, and a
// dialer refuses an acceptor whose certificate names another node than the member it dialed.
func TestTransportPeersAreMembers(t *testing.T) {
	ca := newAuthority(t)
	a := newTestTransport(t, TransportConfig{TLS: ca.node(t, "a")})
	b := newTestTransport(t, TransportConfig{TLS: ca.node(t, "b")})
	c := newTestTransport(t, TransportConfig{TLS: ca.node(t, "c")})
	alice := newTestTransport(t, TransportConfig{TLS: ca.client(t, "alice")})
	members := map[string]string{"a": string(a.LocalAddr()), "b": string(b.LocalAddr())}
	for id, tr := range map[string]*Transport{"a": a, "b": b} {
		setGate(tr, &testGate{id: id, members: members})
	}
	if err := vote(a, b.LocalAddr()); err != nil {
		t.Fatalf("member a to member b: %v", err)
	}
	if err := vote(c, b.LocalAddr()); err == nil {
		t.Error("node c, not a member, to b: answered; want refused")
	}
	if err := vote(alice, b.LocalAddr()); err == nil {
		t.Error("a client certificate of the cluster CA to b: answered; want refused")
	}
	// b has no configuration yet (it is being added): any node certificate, no client's.
	setGate(b, &testGate{id: "b"})
	if err := vote(c, b.LocalAddr()); err != nil {
		t.Errorf("node c to b without a configuration: %v; want answered", err)
	}
	if err := vote(alice, b.LocalAddr()); err == nil {
		t.Error("a client certificate to b without a configuration: answered; want refused")
	}
	// a believes member b is at c's address: c's certificate names c, so a refuses it.
	setGate(a, &testGate{id: "a", members: map[string]string{"a": string(a.LocalAddr()), "b": string(c.LocalAddr())}})
	setGate(c, &testGate{id: "c"})
	if err := vote(a, c.LocalAddr()); err == nil {
		t.Error("a dialing member b's address, answered by node c: answered; want refused")
	}
}

// TestTransportHello: once the cluster requires the hello (every member knows it), a peer
// that sends raft frames from the first byte, or a hello of another cluster, is refused even
// over plain TCP; before, a legacy peer is accepted. A node without a cluster ID takes the
// first member's and refuses any other after it.
func TestTransportHello(t *testing.T) {
	b := newTestTransport(t, TransportConfig{})
	member := newTestTransport(t, TransportConfig{})
	foreign := newTestTransport(t, TransportConfig{})
	members := map[string]string{"a": string(member.LocalAddr()), "b": string(b.LocalAddr())}
	bGate := &testGate{id: "b", cluster: "c1", members: members, hello: true}
	setGate(b, bGate)
	setGate(member, &testGate{id: "a", cluster: "c1", members: members, hello: true})
	setGate(foreign, &testGate{id: "a", cluster: "c2", members: members, hello: true})
	legacy, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer legacy.Close()
	legacyVote := func(to raft.ServerAddress) error {
		var out raft.RequestVoteResponse
		return legacy.RequestVote("b", to, &raft.RequestVoteRequest{Term: 1}, &out)
	}

	if err := vote(member, b.LocalAddr()); err != nil {
		t.Fatalf("a member of the cluster to b: %v", err)
	}
	if err := vote(foreign, b.LocalAddr()); err == nil {
		t.Error("a node of another cluster to b: answered; want refused")
	}
	if err := legacyVote(b.LocalAddr()); err == nil {
		t.Error("raft frames without the hello to b, whose cluster requires it: answered; want refused")
	}
	bGate.mu.Lock()
	bGate.hello = false // a cluster still in an older version's format
	bGate.mu.Unlock()
	if err := legacyVote(b.LocalAddr()); err != nil {
		t.Errorf("raft frames without the hello to b, whose cluster does not require it yet: %v", err)
	}
	if err := vote(foreign, b.LocalAddr()); err == nil {
		t.Error("a hello of another cluster to b, whose cluster does not require it yet: answered; want refused")
	}

	// A new joiner: no cluster ID, no configuration. The first member's cluster sticks.
	joiner := newTestTransport(t, TransportConfig{})
	jGate := &testGate{id: "b"}
	setGate(joiner, jGate)
	if err := vote(member, joiner.LocalAddr()); err != nil {
		t.Fatalf("a member to a new joiner: %v", err)
	}
	if got := jGate.handshakeCluster(); got != "c1" {
		t.Errorf("the joiner's cluster after a member's hello: %q; want c1", got)
	}
	if err := vote(foreign, joiner.LocalAddr()); err == nil {
		t.Error("a node of another cluster to the joiner that took c1: answered; want refused")
	}
}

// TestHelloRememberedAcrossRestarts: once a node has seen its cluster in the format that
// requires the raft handshake, it remembers it in its stable store, so that after a restart,
// before it has applied its log again (its table's format is older until then), it still sends
// the hello its peers require, and requires it.
func TestHelloRememberedAcrossRestarts(t *testing.T) {
	st := newStores()
	start := func(bootstrap bool) (*Member, *Transport) {
		t.Helper()
		trans, err := NewTransport(TransportConfig{Bind: "127.0.0.1:0", Logger: testutil.RaftLogger()})
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig("n1")
		cfg.RaftAddr, cfg.Bootstrap = string(trans.LocalAddr()), bootstrap
		return startMember(t, cfg, st, trans), trans
	}
	n, _ := start(true)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if !n.helloRequired() || !n.helloKnown.Load() {
			return errors.New("the new cluster is not in the format that requires the hello yet")
		}
		return nil
	})
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	id, ok, err := loadIdentity(st.Stable)
	if err != nil || !ok || !id.Handshake {
		t.Fatalf("stored identity %+v, %v, %v; want Handshake recorded", id, ok, err)
	}
	again, _ := start(false)
	defer again.Close()
	if !again.helloKnown.Load() {
		t.Error("a restarted node does not know its cluster requires the hello; want it known before it applies its log")
	}
}

// TestNewClusterRequiresHelloAtOnce: a node that forms a cluster, or joins one through a
// member's hello, requires the hello from its first connection on, not only from the cluster's
// first format switch: until then a forger that skips the hello would move its term.
func TestNewClusterRequiresHelloAtOnce(t *testing.T) {
	start := func(id string, bootstrap bool) *Member {
		t.Helper()
		trans, err := NewTransport(TransportConfig{Bind: "127.0.0.1:0", Logger: testutil.RaftLogger()})
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(id)
		cfg.RaftAddr, cfg.Bootstrap = string(trans.LocalAddr()), bootstrap
		n := startMember(t, cfg, newStores(), trans)
		t.Cleanup(func() { n.Close() })
		return n
	}
	founder := start("n1", true)
	if f := founder.format(); f < helloFormat && !founder.helloRequired() {
		t.Errorf("a node that formed its cluster (format %d) takes raft frames without the hello; want the hello required", f)
	}
	joiner := start("n2", false)
	if joiner.helloRequired() {
		t.Fatal("a node with no cluster yet requires the hello; want it to take an older member's frames")
	}
	if err := joiner.adoptCluster("c1"); err != nil {
		t.Fatal(err)
	}
	if !joiner.helloRequired() {
		t.Error("a joiner that adopted its cluster from a member's hello takes raft frames without one; want the hello required")
	}
}

// TestHelloBeforeTheCoreRuns: the transport asks its gate about a peer from the moment the gate
// is attached, before the core exists (a restarting node's peers connect at once): the answer
// comes from what the node knows without its table, not from a missing core.
func TestHelloBeforeTheCoreRuns(t *testing.T) {
	for _, c := range []struct {
		name string
		n    *Member
		want bool
	}{
		{"a node of an older cluster", &Member{}, false},
		{"a node that formed its cluster", &Member{bootstrapFormat: helloFormat}, true},
	} {
		if got := c.n.helloRequired(); got != c.want {
			t.Errorf("%s: helloRequired() = %v before the core runs; want %v", c.name, got, c.want)
		}
	}
}

// TestTransportSlowHello: a peer that sends its hello a byte at a time, each within the idle
// timeout, is closed once the handshake timeout has passed since it connected.
func TestTransportSlowHello(t *testing.T) {
	srv := newTestTransport(t, TransportConfig{HandshakeTimeout: 300 * time.Millisecond})
	nc, err := net.Dial("tcp", string(srv.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	b := hello{cluster: "c1", from: "a", to: "n1"}.append(nil)
	for i := range b {
		if _, err := nc.Write(b[i : i+1]); err != nil {
			break // closed
		}
		if readsEOF(nc, 100*time.Millisecond) {
			break
		}
	}
	if el := time.Since(start); el > 2*time.Second || !readsEOF(nc, time.Second) {
		t.Errorf("a hello sent a byte per 100ms: connection still open after %v; want closed after about 300ms", el)
	}
}
