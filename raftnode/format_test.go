package raftnode

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// While a member runs the previous release, the cluster writes only what that release reads:
// locks go on in entries of its layout, and a write only the current format carries is refused
// after formatWait with ErrOlderMembers, nothing proposed. Once the members say they run this
// release, the leader switches the cluster with one entry, every node follows, and the write
// goes through.
func TestLogFormatWaitsForEveryMember(t *testing.T) {
	// Two of three claim the previous release, so whichever leads asks at least one of them (a
	// leader does not ask itself).
	for _, id := range []string{"n2", "n3"} {
		olderMembers.Store(id, true)
		defer olderMembers.Delete(id)
	}
	old := formatWait
	formatWait = 300 * time.Millisecond
	defer func() { formatWait = old }()

	nodes := newUpgradedCluster(t, 3)
	l := leader(t, nodes)
	mustLock(t, l, "job", "alice", 0)
	if got := lastCommandFormat(t, l); got != fsm.FormatKeyed {
		t.Fatalf("a LOCK with an older member went into an entry of format %d, want %d", got, fsm.FormatKeyed)
	}
	hash := fsm.Command{Kind: fsm.KindWrite, Key: []byte("\x00h"), Match: fsm.Match{Kind: fsm.MatchAbsent},
		Value: &fsm.Collection{Type: fsm.TypeHash, Elems: [][]byte{[]byte("f"), []byte("v")}}}
	before := l.Stats().Proposals
	if _, err := propose(t.Context(), l, hash); !errors.Is(err, node.ErrOlderMembers) {
		t.Fatalf("a hash write with an older member = %v, want ErrOlderMembers", err)
	}
	if after := l.Stats().Proposals; after != before {
		t.Fatalf("the refused write proposed %d entries", after-before)
	}

	olderMembers.Delete("n2") // both now run this release
	olderMembers.Delete("n3")
	l.wakeMembership()
	for _, n := range nodes {
		testutil.WaitFor(t, 5*time.Second, func() error {
			if f := n.Stats().LogFormat; f != int(fsm.FormatCurrent) {
				return fmt.Errorf("%s is in log format %d", n.id, f)
			}
			return nil
		})
	}
	// To whichever leads now: the cluster can elect another leader while it switches.
	wrote := onLeader(t, nodes, "the hash write after the switch", func(l *testNode) error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := propose(ctx, l, hash)
		return err
	})
	// Even a request alone goes in a batch: every entry says the cluster writes batches.
	if got := lastCommandFormat(t, wrote); got != fsm.FormatBatch {
		t.Fatalf("after the switch an entry of format %d, want %d", got, fsm.FormatBatch)
	}
}

// A cluster this release bootstraps writes the current format at once, even while a member is
// unreachable: all its members run this release (an older one is never promoted into it).
func TestLogFormatOfANewCluster(t *testing.T) {
	for _, id := range []string{"n2", "n3"} { // ignored: the cluster is new
		olderMembers.Store(id, true)
		defer olderMembers.Delete(id)
	}
	nodes := newCluster(t, 3)
	for _, n := range nodes {
		testutil.WaitFor(t, 5*time.Second, func() error {
			if f := n.Stats().LogFormat; f != int(fsm.FormatCurrent) {
				return fmt.Errorf("%s is in log format %d", n.id, f)
			}
			return nil
		})
	}
}

// newUpgradedCluster starts size nodes on stores bootstrapped as the previous release did (no
// identity in the stable store): the data dirs of a cluster being upgraded in place.
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
	connectAll(nodes)
	t.Cleanup(func() {
		for _, n := range nodes {
			n.trans.DisconnectAll()
		}
	})
	return nodes
}

// A node alone switches to the current format at once: nobody else has to read its log.
func TestLogFormatAloneIsCurrent(t *testing.T) {
	n := newNode(t)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if f := n.Stats().LogFormat; f != int(fsm.FormatCurrent) {
			return fmt.Errorf("log format %d", f)
		}
		return nil
	})
}

// lastCommandFormat returns the format of the newest command entry in n's log.
func lastCommandFormat(t *testing.T, n *testNode) byte {
	t.Helper()
	last, err := n.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := last; i > 0; i-- {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == raft.LogCommand {
			return fsm.FormatOf(l.Data)
		}
	}
	t.Fatal("no command entry in the log")
	return 0
}
