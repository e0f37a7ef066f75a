package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/tests/testutil"
)

// newTestGroups starts a transport of groups raft groups on 127.0.0.1:0, whose group g answers
// every RPC with term 7+g, each group admitting the members gates[g] admits (a gate with no
// configuration admits anyone), and closes it when the test ends.
func newTestGroups(t *testing.T, id string, groups int, cfg TransportConfig) []*Transport {
	t.Helper()
	if cfg.Bind == "" {
		cfg.Bind = "127.0.0.1:0"
	}
	cfg.Logger = quietLogger()
	ts, err := NewGroupTransports(cfg, groups)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{}, groups)
	for g, tr := range ts {
		tr.group.gate.Store(&gateRef{&testGate{id: id}})
		if g == 0 {
			tr.layer.gate.Store(&gateRef{&testGate{id: id}})
		}
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case rpc := <-tr.Consumer():
					rpc.Respond(&raft.RequestVoteResponse{Term: 7 + uint64(g)}, nil)
				case <-stop:
					return
				}
			}
		}()
	}
	t.Cleanup(func() {
		close(stop)
		for range groups {
			<-done
		}
		for _, tr := range ts {
			tr.Close()
		}
	})
	return ts
}

func voteTerm(from *Transport, to raft.ServerAddress) (uint64, error) {
	var out raft.RequestVoteResponse
	err := from.RequestVote("n2", to, &raft.RequestVoteRequest{Term: 1}, &out)
	return out.Term, err
}

// TestGroupStreamsReachTheirGroup: each group's RPCs reach that group's raft on the peer, over
// one session per direction; a stream naming a group the node does not run, or sent to a group
// whose configuration does not hold the sender, is closed before raft reads it.
func TestGroupStreamsReachTheirGroup(t *testing.T) {
	a := newTestGroups(t, "n1", 4, TransportConfig{})
	b := newTestGroups(t, "n2", 4, TransportConfig{})
	// Group 3's configuration lacks n2.
	a[3].group.gate.Store(&gateRef{&testGate{id: "n1", members: map[string]string{"n1": "x", "n3": "y"}}})
	for round := range 3 {
		for g := range 3 {
			term, err := voteTerm(b[g], a[0].LocalAddr())
			if err != nil || term != 7+uint64(g) {
				t.Fatalf("round %d, group %d's vote: term %d, %v; want term %d (group %d's raft)", round, g, term, err, 7+g, g)
			}
		}
	}
	if out, _ := b[0].group.mux.sessions(); out != 1 {
		t.Errorf("n2 dialed %d sessions to n1 for 4 groups; want 1", out)
	}
	if _, in := a[0].group.mux.sessions(); in != 1 {
		t.Errorf("n1 accepted %d sessions; want 1", in)
	}

	// A group this node does not run.
	sess, err := b[0].group.mux.session(string(a[0].LocalAddr()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	var h [groupHeaderLen]byte
	binary.BigEndian.PutUint16(h[:], 5)
	st.Write(h[:])
	st.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := st.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("a stream for group 5 of 4: read %d bytes, %v; want it closed (EOF)", n, err)
	}
	st.Close()

	if _, err := voteTerm(b[3], a[0].LocalAddr()); err == nil {
		t.Error("n2's vote to group 3, whose configuration lacks n2: answered; want refused")
	}
	if term, err := voteTerm(b[0], a[0].LocalAddr()); err != nil || term != 7 {
		t.Errorf("n2's vote to group 0 after group 3 refused it: term %d, %v; want 7", term, err)
	}
}

// TestGroupsAndOneGroupDoNotMix: a node of a several-group cluster and a node of a one-group
// cluster refuse each other's handshakes, both ways, instead of reading each other's frames;
// so do nodes of different numbers of groups, which would serve a slot from different groups.
func TestGroupsAndOneGroupDoNotMix(t *testing.T) {
	multi := newTestGroups(t, "n1", 2, TransportConfig{})
	single := newTestTransport(t, TransportConfig{})
	single.layer.gate.Store(&gateRef{&testGate{id: "n2", hello: true}})
	if err := vote(single, multi[0].LocalAddr()); err == nil {
		t.Error("a one-group node's vote to a two-group node: answered; want refused")
	}
	if _, err := voteTerm(multi[0], single.LocalAddr()); err == nil {
		t.Error("a two-group node's vote to a one-group node: answered; want refused")
	}
	three := newTestGroups(t, "n3", 3, TransportConfig{})
	if _, err := voteTerm(three[0], multi[0].LocalAddr()); err == nil {
		t.Error("a three-group node's vote to a two-group node: answered; want refused")
	}
	if _, err := voteTerm(multi[1], three[0].LocalAddr()); err == nil {
		t.Error("a two-group node's vote to a three-group node: answered; want refused")
	}
}

// TestConvertingNodesTalk: while a cluster created with one group converts to more (RAFT
// GROUPS), a node that runs four groups and one that still runs one carry group 0 between them
// both ways (over a connection of one group's frames), and the other groups wait; nodes of one
// layout that run different numbers of groups carry the groups both run.
func TestConvertingNodesTalk(t *testing.T) {
	four := newTestGroups(t, "n1", 4, TransportConfig{Layout: 1})
	four[0].layer.gate.Store(&gateRef{&testGate{id: "n1", hello: true}}) // a cluster in today's format
	single := newTestTransport(t, TransportConfig{})
	single.layer.gate.Store(&gateRef{&testGate{id: "n2", hello: true}})
	if err := vote(single, four[0].LocalAddr()); err != nil {
		t.Errorf("a one-group node's vote to group 0 of a converted node: %v", err)
	}
	for round := range 2 { // the second round dials without asking for a session first
		if _, err := voteTerm(four[0], single.LocalAddr()); err != nil {
			t.Errorf("round %d: group 0 of a converted node to a one-group node: %v", round, err)
		}
	}
	if _, err := voteTerm(four[1], single.LocalAddr()); err == nil {
		t.Error("group 1 of a converted node to a one-group node: answered; want refused")
	}

	two := newTestGroups(t, "n3", 2, TransportConfig{Layout: 1})
	for g := range 2 {
		if term, err := voteTerm(four[g], two[0].LocalAddr()); err != nil || term != 7+uint64(g) {
			t.Errorf("group %d, four groups to two: term %d, %v", g, term, err)
		}
		if term, err := voteTerm(two[g], four[0].LocalAddr()); err != nil || term != 7+uint64(g) {
			t.Errorf("group %d, two groups to four: term %d, %v", g, term, err)
		}
	}
	if _, err := voteTerm(four[3], two[0].LocalAddr()); err == nil {
		t.Error("group 3 to a node that runs two groups: answered; want refused")
	}
	created4 := newTestGroups(t, "n4", 4, TransportConfig{})
	if _, err := voteTerm(created4[0], four[0].LocalAddr()); err == nil {
		t.Error("nodes of clusters created with 4 and with 1 group: answered; want refused")
	}
}

// TestGroupTransportsBounds: the group count is checked, and a session's streams are capped.
func TestGroupTransportsBounds(t *testing.T) {
	for _, g := range []int{-1, 0, 1, MaxGroups + 1} {
		if ts, err := NewGroupTransports(TransportConfig{Bind: "127.0.0.1:0", Logger: quietLogger()}, g); err == nil {
			for _, tr := range ts {
				tr.Close()
			}
			t.Errorf("NewGroupTransports(%d groups): accepted; want an error", g)
		}
	}
	a := newTestGroups(t, "n1", 2, TransportConfig{})
	b := newTestGroups(t, "n2", 2, TransportConfig{})
	sess, err := b[0].group.mux.session(string(a[0].LocalAddr()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	limit := streamsPerGroup * 2
	var h [groupHeaderLen]byte
	closed := 0
	for range limit + 4 {
		st, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		st.Write(h[:]) // group 0: routed, and held by raft's transport until it closes
		st.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := st.Read(make([]byte, 1)); errors.Is(err, io.EOF) {
			closed++
		}
	}
	if closed != 4 {
		t.Errorf("%d streams opened past a cap of %d were closed; want 4", closed, limit)
	}
}

// TestGroupsElectAndReplicateOverOneListener: three nodes of three raft groups each, every
// group a real member over the node's one listener: each group elects, replicates a lock to
// every node, and elects again when a node stops; each node keeps one session to each peer.
func TestGroupsElectAndReplicateOverOneListener(t *testing.T) {
	const nodes, groups = 3, 3
	gc := startGroupCluster(t, nodes, groups)
	for g := range groups {
		settle(t, gc.members[g])
		key := fmt.Sprintf("g%d-key", g)
		mustLockOnLeader(t, gc.members[g], key, "o", 60_000)
		testutil.WaitFor(t, 5*time.Second, func() error {
			for _, n := range gc.members[g] {
				if !held(n, key) {
					return fmt.Errorf("group %d: %s does not hold %s yet", g, n.id, key)
				}
			}
			return nil
		})
		for _, ms := range gc.members[:g] {
			for _, n := range ms {
				if held(n, key) {
					t.Errorf("%s's group other than %d holds %s; want it in group %d only", n.id, g, key, g)
				}
			}
		}
	}
	for i := range nodes {
		out, in := gc.members[0][i].trans0().group.mux.sessions()
		if out > nodes-1 || in > nodes-1 {
			t.Errorf("n%d: %d dialed and %d accepted sessions for %d groups; want at most %d each (one per peer)", i+1, out, in, groups, nodes-1)
		}
	}
	leaders := gc.leaders()
	gc.stopNode(0)
	for g := range groups {
		res := mustLockOnLeader(t, gc.running(g), fmt.Sprintf("g%d-after", g), "o", 60_000)
		if res.Status != fsm.StatusGranted {
			t.Errorf("group %d after n1 stopped (it led %v): %+v", g, leaders, res)
		}
	}
}

// TestGroupSessionsMutualTLS: a session is a TLS connection like any raft connection: peers with
// node certificates of the cluster CA carry their groups' streams; a plain peer, another CA's
// node and a client certificate of the cluster CA are refused before any stream is read.
func TestGroupSessionsMutualTLS(t *testing.T) {
	ca := newAuthority(t)
	a := newTestGroups(t, "a", 2, TransportConfig{TLS: ca.node(t, "a")})
	b := newTestGroups(t, "b", 2, TransportConfig{TLS: ca.node(t, "b")})
	for g := range 2 {
		if term, err := voteTerm(a[g], b[0].LocalAddr()); err != nil || term != 7+uint64(g) {
			t.Fatalf("a to b, group %d, over mTLS: term %d, %v", g, term, err)
		}
	}
	for name, cfg := range map[string]TransportConfig{
		"a plain peer":                   {},
		"another CA's node":              {TLS: newAuthority(t).node(t, "s")},
		"a client certificate of the CA": {TLS: ca.client(t, "app")},
	} {
		s := newTestGroups(t, "s", 2, cfg)
		if _, err := voteTerm(s[1], b[0].LocalAddr()); err == nil {
			t.Errorf("%s to b, group 1: answered; want refused", name)
		}
	}
}

// TestGroupSessionRedialsAfterPeerRestart: when a peer's process ends, its session ends with its
// connection, and the next RPC of any group dials a new session to the restarted peer.
func TestGroupSessionRedialsAfterPeerRestart(t *testing.T) {
	a := newTestGroups(t, "a", 2, TransportConfig{})
	bind := func() string {
		b := newTestGroups(t, "b", 2, TransportConfig{})
		if term, err := voteTerm(a[1], b[0].LocalAddr()); err != nil || term != 8 {
			t.Fatalf("a to b, group 1: term %d, %v", term, err)
		}
		for _, tr := range b {
			tr.Close()
		}
		return string(b[0].LocalAddr())
	}()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if out, _ := a[0].group.mux.sessions(); out != 0 {
			return fmt.Errorf("a still has %d open sessions to the stopped peer", out)
		}
		return nil
	})
	newTestGroups(t, "b", 2, TransportConfig{Bind: bind})
	testutil.WaitFor(t, 5*time.Second, func() error {
		for g := range 2 {
			if term, err := voteTerm(a[g], raft.ServerAddress(bind)); err != nil || term != 7+uint64(g) {
				return fmt.Errorf("a to the restarted b, group %d: term %d, %v", g, term, err)
			}
		}
		return nil
	})
}

// TestOneSessionPerPair: once n2 has dialed n1, n1's raft reaches n2 over that same session
// (no connection of its own, no second handshake), its streams admitted by n2 as n1's; once
// that session ends, n1 dials a session of its own.
func TestOneSessionPerPair(t *testing.T) {
	a := newTestGroups(t, "n1", 3, TransportConfig{})
	b := newTestGroups(t, "n2", 3, TransportConfig{})
	members := map[string]string{"n1": string(a[0].LocalAddr()), "n2": string(b[0].LocalAddr())}
	for _, side := range []struct {
		id string
		ts []*Transport
	}{{"n1", a}, {"n2", b}} {
		for _, tr := range side.ts {
			tr.group.gate.Store(&gateRef{&testGate{id: side.id, members: members}})
		}
	}
	for g := range 3 {
		if term, err := voteTerm(b[g], a[0].LocalAddr()); err != nil || term != 7+uint64(g) {
			t.Fatalf("n2 -> n1, group %d: term %d, %v", g, term, err)
		}
	}
	for g := range 3 {
		if term, err := voteTerm(a[g], b[0].LocalAddr()); err != nil || term != 7+uint64(g) {
			t.Fatalf("n1 -> n2 over n2's session, group %d: term %d, %v", g, term, err)
		}
	}
	if out, in := a[0].group.mux.sessions(); out != 0 || in != 1 {
		t.Errorf("n1: %d dialed, %d accepted sessions; want 0 and 1 (n2's, used both ways)", out, in)
	}
	if out, in := b[0].group.mux.sessions(); out != 1 || in != 0 {
		t.Errorf("n2: %d dialed, %d accepted sessions; want 1 and 0", out, in)
	}

	// n2's session ends (its process restarted, say): n1 dials its own.
	b[0].group.mux.closeSessionsForTest()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if _, in := a[0].group.mux.sessions(); in != 0 {
			return fmt.Errorf("n1 still has %d accepted sessions", in)
		}
		return nil
	})
	// Streams raft pooled on the ended session fail once each, as after any peer restart.
	for g := range 3 {
		testutil.WaitFor(t, 5*time.Second, func() error {
			if term, err := voteTerm(a[g], b[0].LocalAddr()); err != nil || term != 7+uint64(g) {
				return fmt.Errorf("n1 -> n2 after n2's session ended, group %d: term %d, %v", g, term, err)
			}
			return nil
		})
	}
	if out, _ := a[0].group.mux.sessions(); out != 1 {
		t.Errorf("n1 dialed %d sessions after n2's ended; want 1", out)
	}
}

// closeSessionsForTest closes every session of the node without shutting its transport down, as
// a restart of its peers would end them.
func (m *muxLayer) closeSessionsForTest() {
	m.mu.Lock()
	var all []*yamux.Session
	for _, s := range m.out {
		all = append(all, s)
	}
	for s := range m.in {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		s.Close()
	}
}
