package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/tests/testutil"
	"go.uber.org/goleak"
)

// Every member a test starts is closed by its t.Cleanup, and Close waits for the core's
// goroutines and its own, so nothing may be left running when the package's tests end.
func TestMain(m *testing.M) {
	// In-memory members have no client port to ask for the log format they read: they all run
	// this binary, except the IDs a test lists in olderMembers.
	askPeerFormat = func(_ context.Context, _ *Member, id, _ string) (byte, error) {
		if v, old := olderMembers.Load(id); old {
			if f, ok := v.(byte); ok {
				return f, nil
			}
			return fsm.FormatKeyed, nil
		}
		return fsm.FormatCurrent, nil
	}
	// The core's awaitFuture and runFinisher leave a goroutine behind when raft never answers a
	// future (see there).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/raftlock/raftlock/raftnode.awaitFuture.func1"),
		goleak.IgnoreAnyFunction("github.com/raftlock/raftlock/raftnode.(*Replica).runFinisher"))
}

// olderMembers holds the IDs of in-memory members that claim to run an older version: v0.1.0
// (true), or one that reads up to the format stored (a byte).
var olderMembers sync.Map

// testConfig is a Config for an in-memory member with fast timings (elections in a few hundred
// milliseconds, replies in about one).
func testConfig(id string) Config {
	return Config{
		RaftAddr: addrOf(id),
		Core: raftnode.Config{
			ID:                 id,
			HeartbeatTimeout:   100 * time.Millisecond,
			ElectionTimeout:    200 * time.Millisecond,
			LeaderLeaseTimeout: 100 * time.Millisecond,
			CommitTimeout:      time.Millisecond,
			ApplyTimeout:       2 * time.Second,
			Logger:             testutil.RaftLogger(),
		},
	}
}

func addrOf(id string) string { return "inmem-" + id }

func newStores() raftnode.Stores {
	s := raft.NewInmemStore()
	return raftnode.Stores{Log: s, Stable: s, Snapshots: raft.NewInmemSnapshotStore()}
}

// testNode is a Member with what a test needs to partition, restart and inspect it.
type testNode struct {
	*Member
	id     string
	addr   raft.ServerAddress
	cfg    Config
	stores raftnode.Stores
	trans  *raft.InmemTransport
}

// startNode starts a member on stores with a fresh in-memory transport, and a lock policy of
// its own (a restarted process has a new one), and closes it when the test ends. The transport
// is connected to no one: see connectAll.
func startNode(t *testing.T, cfg Config, st raftnode.Stores) *testNode {
	t.Helper()
	addr, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.RaftAddr))
	tn := &testNode{Member: startMember(t, cfg, st, trans), id: cfg.Core.ID, addr: addr, cfg: cfg, stores: st, trans: trans}
	t.Cleanup(func() { closeNode(t, tn) })
	return tn
}

// startMember starts a member on stores and trans, with a lock policy of its own, or fails
// the test.
func startMember(t *testing.T, cfg Config, st raftnode.Stores, trans raft.Transport) *Member {
	t.Helper()
	cfg.Core.Locks = locks.New(locks.Config{ApplyTimeout: cfg.Core.ApplyTimeout, Logger: cfg.Core.Logger})
	m, err := Start(cfg, st, trans)
	if err != nil {
		t.Fatalf("Start(%s): %v", cfg.Core.ID, err)
	}
	return m
}

func closeNode(t *testing.T, n *testNode) {
	t.Helper()
	if err := n.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
		t.Errorf("Close(%s): %v", n.id, err)
	}
}

// newNode starts a single member that bootstraps a cluster of itself, and waits until it
// serves.
func newNode(t *testing.T, mod ...func(*Config)) *testNode {
	t.Helper()
	cfg := testConfig("n1")
	cfg.Bootstrap = true
	for _, f := range mod {
		f(&cfg)
	}
	n := startNode(t, cfg, newStores())
	settle(t, []*testNode{n})
	return n
}

// restart closes n and starts it again on the same stores with a new transport, as after a
// crash or a process restart.
func restart(t *testing.T, n *testNode) *testNode {
	t.Helper()
	closeNode(t, n)
	return startNode(t, n.cfg, n.stores)
}

// newCluster starts size members that bootstrap one cluster, all connected, and waits until it
// has settled (settle).
func newCluster(t *testing.T, size int, mod ...func(*Config)) []*testNode {
	t.Helper()
	var peers []Peer
	for i := 1; i <= size; i++ {
		id := fmt.Sprintf("n%d", i)
		peers = append(peers, Peer{ID: id, RaftAddr: addrOf(id)})
	}
	nodes := make([]*testNode, 0, size)
	for _, p := range peers {
		cfg := testConfig(p.ID)
		cfg.Bootstrap = true
		cfg.Peers = peers
		for _, f := range mod {
			f(&cfg)
		}
		nodes = append(nodes, startNode(t, cfg, newStores()))
	}
	testutil.ConnectAll(nodes)
	testutil.CloseAllAtEnd(t, nodes, func(n *testNode) { closeNode(t, n) })
	settle(t, nodes)
	return nodes
}

// settle waits for what a new cluster's first leader writes on its own once ready (the switch
// to the current log format, the cluster ID) to apply on every member.
func settle(t *testing.T, nodes []*testNode) {
	t.Helper()
	testutil.Leader(t, nodes)
	testutil.WaitFor(t, 5*time.Second, func() error {
		var applied uint64
		for i, n := range nodes {
			s := n.Stats()
			if s.LogFormat != int(fsm.FormatCurrent) || n.tableClusterID() == "" {
				return fmt.Errorf("%s: log format %d, committed cluster ID %q", n.id, s.LogFormat, n.tableClusterID())
			}
			if i > 0 && s.AppliedIndex != applied {
				return fmt.Errorf("%s applied %d, %s %d", n.id, s.AppliedIndex, nodes[0].id, applied)
			}
			applied = s.AppliedIndex
		}
		return nil
	})
}

// Inmem is n's transport, for testutil's in-memory cluster helpers.
func (n *testNode) Inmem() *raft.InmemTransport { return n.trans }

// IsLeader reports whether n is the ready leader.
func (n *testNode) IsLeader() bool { return n.isLeader() }

// propose runs one command through the core's Exec unconditionally (the FSM checks its guard).
func propose(ctx context.Context, n *testNode, c fsm.Command) (fsm.Result, error) {
	res, err := n.Core().Exec(ctx, [][]byte{c.Key}, func(node.View) []fsm.Command { return []fsm.Command{c} }, nil)
	if err != nil {
		return fsm.Result{}, err
	}
	if len(res) != 1 {
		return fsm.Result{}, fmt.Errorf("%s %s: %d results, want 1", c.Kind, c.Key, len(res))
	}
	return res[0], nil
}

// grantCmd is LOCK key owner lease on a free key.
func grantCmd(key, owner string, leaseMs uint64) fsm.Command {
	return fsm.Command{Kind: fsm.KindGrant, Key: []byte(key), Owner: []byte(owner), LeaseMs: leaseMs, Match: fsm.Match{Kind: fsm.MatchAbsent}, Acquire: true}
}

// mustLock grants the free key to owner on n, or fails the test.
func mustLock(t *testing.T, n *testNode, key, owner string, leaseMs uint64) fsm.Result {
	t.Helper()
	res, err := propose(t.Context(), n, grantCmd(key, owner, leaseMs))
	if err != nil || res.Status != fsm.StatusGranted {
		t.Fatalf("LOCK %s on %s: %+v, %v", key, n.id, res, err)
	}
	return res
}

// mustLockOnLeader grants the free key to owner through whichever of nodes leads (onLeader),
// or fails the test.
func mustLockOnLeader(t *testing.T, nodes []*testNode, key, owner string, leaseMs uint64) fsm.Result {
	t.Helper()
	var res fsm.Result
	testutil.OnLeader(t, nodes, "LOCK "+key, func(l *testNode) (err error) {
		res, err = propose(t.Context(), l, grantCmd(key, owner, leaseMs))
		if err == nil && res.Status != fsm.StatusGranted {
			t.Fatalf("LOCK %s on %s: %+v", key, l.id, res)
		}
		return err
	})
	return res
}

// held reports whether n's applied table holds key.
func held(n *testNode, key string) bool {
	_, _, ok := n.Core().LocalLookup([]byte(key))
	return ok
}
