package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/tests/testutil"
)

// While a member runs v0.1.0, the cluster stays in the format that version reads (the core's
// gate then holds back what only a newer one carries: raftnode's TestFormatGate). Once the
// members say they run this version, the leader switches the cluster with one entry, every
// node follows, and a write only the current format carries goes through.
func TestLogFormatWaitsForEveryMember(t *testing.T) {
	// Two of three claim v0.1.0, so whichever leads asks at least one of them (a leader does
	// not ask itself).
	for _, id := range []string{"n2", "n3"} {
		olderMembers.Store(id, true)
		defer olderMembers.Delete(id)
	}
	nodes := newUpgradedCluster(t, 3)
	l := testutil.Leader(t, nodes)
	mustLock(t, l, "job", "alice", 0)
	waitFormat(t, nodes, fsm.FormatKeyed)

	olderMembers.Delete("n2") // both now run this version
	olderMembers.Delete("n3")
	l.wakeMembership()
	waitFormat(t, nodes, fsm.FormatCurrent)
	// To whichever leads now: the cluster can elect another leader while it switches.
	hash := fsm.Command{Kind: fsm.KindWrite, Key: []byte("\x00h"), Match: fsm.Match{Kind: fsm.MatchAbsent},
		Value: &fsm.Collection{Type: fsm.TypeHash, Elems: [][]byte{[]byte("f"), []byte("v")}}}
	testutil.OnLeader(t, nodes, "the hash write after the switch", func(l *testNode) error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := propose(ctx, l, hash)
		return err
	})
}

// A cluster whose members read entries of typed values but not batches (v0.2.0) switches to
// FormatTyped only (whose entries carry one request each: raftnode's
// TestGroupCommitFollowsFormat); once they run v0.3.0 it switches to batches, and once they
// run this version to FormatFunctions.
func TestLogFormatBatchWaitsForEveryMember(t *testing.T) {
	for _, id := range []string{"n2", "n3"} {
		olderMembers.Store(id, fsm.FormatTyped)
		defer olderMembers.Delete(id)
	}
	nodes := newUpgradedCluster(t, 3)
	l := testutil.Leader(t, nodes)
	waitFormat(t, nodes, fsm.FormatTyped)
	mustLock(t, l, "typed", "o", 0)
	olderMembers.Store("n2", fsm.FormatBatch)
	olderMembers.Store("n3", fsm.FormatBatch)
	l.wakeMembership()
	waitFormat(t, nodes, fsm.FormatBatch)
	olderMembers.Delete("n2")
	olderMembers.Delete("n3")
	testutil.Leader(t, nodes).wakeMembership()
	waitFormat(t, nodes, fsm.FormatFunctions)
}

// A cluster this version bootstraps writes the current format at once, even while a member is
// unreachable: all its members run this version (an older one is never promoted into it).
func TestLogFormatOfANewCluster(t *testing.T) {
	for _, id := range []string{"n2", "n3"} { // ignored: the cluster is new
		olderMembers.Store(id, true)
		defer olderMembers.Delete(id)
	}
	waitFormat(t, newCluster(t, 3), fsm.FormatCurrent)
}

// A node alone switches to the current format at once: nobody else has to read its log.
func TestLogFormatAloneIsCurrent(t *testing.T) {
	waitFormat(t, []*testNode{newNode(t)}, fsm.FormatCurrent)
}

// waitFormat waits until every one of nodes is in log format want.
func waitFormat(t *testing.T, nodes []*testNode, want byte) {
	t.Helper()
	for _, n := range nodes {
		testutil.WaitFor(t, 5*time.Second, func() error {
			if f := n.Stats().LogFormat; f != int(want) {
				return fmt.Errorf("%s is in log format %d, want %d", n.id, f, want)
			}
			return nil
		})
	}
}

// newUpgradedCluster starts size nodes on stores bootstrapped as v0.1.0 did (no identity in
// the stable store): the data dirs of a cluster being upgraded in place.
func newUpgradedCluster(t *testing.T, size int) []*testNode {
	t.Helper()
	var servers []raft.Server
	for i := 1; i <= size; i++ {
		id := fmt.Sprintf("n%d", i)
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addrOf(id))})
	}
	var nodes []*testNode
	for _, s := range servers {
		st := newStores()
		conf := raft.DefaultConfig()
		conf.LocalID = s.ID
		_, trans := raft.NewInmemTransport(s.Address)
		if err := raft.BootstrapCluster(conf, st.Log, st.Stable, st.Snapshots, trans, raft.Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, startNode(t, testConfig(string(s.ID)), st))
	}
	testutil.ConnectAll(nodes)
	t.Cleanup(func() {
		for _, n := range nodes {
			n.trans.DisconnectAll()
		}
	})
	return nodes
}
