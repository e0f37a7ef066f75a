package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/tests/testutil"
)

// groupCluster is nodes processes of a several-group cluster on 127.0.0.1, each a member of
// every group over its one raft listener (NewGroupTransports).
type groupCluster struct {
	t       *testing.T
	groups  int
	peers   []Peer
	stores  [][]raftnode.Stores // by node, then group
	members [][]*testNode       // by group, then node; nil while a node is stopped
}

func startGroupCluster(t *testing.T, nodes, groups int) *groupCluster {
	t.Helper()
	gc := &groupCluster{t: t, groups: groups, members: make([][]*testNode, groups)}
	trans := make([][]*Transport, nodes)
	for i := range nodes {
		ts, err := NewGroupTransports(TransportConfig{Bind: "127.0.0.1:0", Logger: testutil.RaftLogger()}, groups)
		if err != nil {
			t.Fatal(err)
		}
		trans[i] = ts
		gc.peers = append(gc.peers, Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: string(ts[0].LocalAddr())})
		st := make([]raftnode.Stores, groups)
		for g := range st {
			st[g] = newStores()
		}
		gc.stores = append(gc.stores, st)
		for g := range groups {
			gc.members[g] = append(gc.members[g], nil)
		}
	}
	for i := range nodes {
		gc.startNode(i, trans[i])
	}
	t.Cleanup(func() {
		for i := range nodes {
			gc.stopNode(i)
		}
	})
	return gc
}

// startNode starts node i's member of every group over trans.
func (gc *groupCluster) startNode(i int, trans []*Transport) {
	gc.t.Helper()
	p := gc.peers[i]
	for g := range gc.groups {
		cfg := testConfig(p.ID)
		cfg.RaftAddr, cfg.Bootstrap, cfg.Peers = p.RaftAddr, true, gc.peers
		m := startMember(gc.t, cfg, gc.stores[i][g], trans[g])
		// An unconnected in-memory transport only names the node in testutil's messages.
		_, name := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("%s/group%d", p.ID, g)))
		gc.members[g][i] = &testNode{Member: m, id: p.ID, addr: raft.ServerAddress(p.RaftAddr), cfg: cfg,
			stores: gc.stores[i][g], trans: name}
	}
}

// stopNode stops node i in every group: its listener closes with its last group.
func (gc *groupCluster) stopNode(i int) {
	gc.t.Helper()
	for g := range gc.groups {
		n := gc.members[g][i]
		if n == nil {
			continue
		}
		gc.members[g][i] = nil
		if err := n.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
			gc.t.Errorf("closing %s's group %d: %v", n.id, g, err)
		}
	}
}

// restartNode starts node i again on its stores and raft address.
func (gc *groupCluster) restartNode(i int) {
	gc.t.Helper()
	ts, err := NewGroupTransports(TransportConfig{Bind: gc.peers[i].RaftAddr, Logger: testutil.RaftLogger()}, gc.groups)
	if err != nil {
		gc.t.Fatal(err)
	}
	gc.startNode(i, ts)
}

// running is group g's members that run.
func (gc *groupCluster) running(g int) []*testNode {
	var out []*testNode
	for _, n := range gc.members[g] {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// leaders is the ID of each group's ready leader ("" where none is).
func (gc *groupCluster) leaders() []string {
	out := make([]string, gc.groups)
	for g := range gc.groups {
		for _, n := range gc.running(g) {
			if n.isLeader() {
				out[g] = n.id
			}
		}
	}
	return out
}

// trans0 is the group transport n runs on (a several-group cluster's member).
func (n *testNode) trans0() *Transport { return n.Member.trans.(*Transport) }
