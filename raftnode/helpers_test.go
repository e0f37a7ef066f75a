package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
	"go.uber.org/goleak"
)

// Every node a test starts is closed by its t.Cleanup, and Close waits for raft's goroutines and
// the node's own, so nothing may be left running when the package's tests end. No goroutine needs
// ignoring: hashicorp/raft's InmemTransport pipelines stop when the transport is closed.
func TestMain(m *testing.M) {
	// awaitFuture and runFinisher leave a goroutine behind when raft never answers a future
	// (see there).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/raftlock/raftlock/raftnode.awaitFuture.func1"),
		goleak.IgnoreAnyFunction("github.com/raftlock/raftlock/raftnode.(*Replica).runFinisher"))
}

// Timings for in-memory clusters: elections in a few hundred milliseconds, replies in about one.
const (
	testHeartbeat = 100 * time.Millisecond
	testElection  = 200 * time.Millisecond
	testLease     = 100 * time.Millisecond
	testCommit    = time.Millisecond
)

// testConfig is a Config for an in-memory node with fast timings.
func testConfig(id string) Config {
	return Config{
		ID:                 id,
		HeartbeatTimeout:   testHeartbeat,
		ElectionTimeout:    testElection,
		LeaderLeaseTimeout: testLease,
		CommitTimeout:      testCommit,
		ApplyTimeout:       2 * time.Second,
		Logger:             testutil.RaftLogger(),
	}
}

// withLocks gives cfg a lock policy of its own: a node started again gets a new one, as a
// restarted process does.
func withLocks(cfg Config) Config {
	cfg.Locks = locks.New(locks.Config{ApplyTimeout: cfg.ApplyTimeout, Logger: cfg.Logger})
	return cfg
}

func addrOf(id string) string { return "inmem-" + id }

func newStores() Stores {
	s := raft.NewInmemStore()
	return Stores{Log: s, Stable: s, Snapshots: raft.NewInmemSnapshotStore()}
}

// testNode is a Replica with what a test needs to partition, restart and inspect it.
type testNode struct {
	*Replica
	locks  *locks.Policy
	id     string
	addr   raft.ServerAddress
	cfg    Config
	stores Stores
	trans  *raft.InmemTransport
}

// startNode starts a node on stores with a fresh in-memory transport and closes it when the test
// ends. The transport is connected to no one: see connectAll.
func startNode(t *testing.T, cfg Config, st Stores) *testNode {
	t.Helper()
	addr, trans := raft.NewInmemTransport(raft.ServerAddress(addrOf(cfg.ID)))
	cfg = withLocks(cfg)
	policy := cfg.Locks.(*locks.Policy)
	n, err := New(cfg, st, trans)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.ID, err)
	}
	tn := &testNode{Replica: n, locks: policy, id: cfg.ID, addr: addr, cfg: cfg, stores: st, trans: trans}
	t.Cleanup(func() { closeNode(t, tn) })
	return tn
}

// bootstrap forms a cluster of the voters ids on n's empty stores, as package cluster does for
// a new node.
func bootstrap(t *testing.T, n *testNode, ids ...string) {
	t.Helper()
	var servers []raft.Server
	for _, id := range ids {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addrOf(id))})
	}
	if err := n.Raft().BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatalf("bootstrap %s: %v", n.id, err)
	}
}

func closeNode(t *testing.T, n *testNode) {
	t.Helper()
	if err := n.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
		t.Errorf("Close(%s): %v", n.id, err)
	}
	n.trans.Close() // the transport is its owner's, not the core's
}

// newNode starts a single node that bootstraps a cluster of itself, and waits until it serves.
func newNode(t *testing.T, mod ...func(*Config)) *testNode {
	t.Helper()
	cfg := testConfig("n1")
	for _, f := range mod {
		f(&cfg)
	}
	n := startNode(t, cfg, newStores())
	bootstrap(t, n, n.id)
	testutil.Leader(t, []*testNode{n})
	settle(t, []*testNode{n})
	return n
}

// restart closes n and starts it again on the same stores with a new transport, as after a
// crash or a process restart. mod may change the config (e.g. the clock).
func restart(t *testing.T, n *testNode, mod ...func(*Config)) *testNode {
	t.Helper()
	closeNode(t, n)
	cfg := n.cfg
	for _, f := range mod {
		f(&cfg)
	}
	return startNode(t, cfg, n.stores)
}

// newCluster starts n nodes that bootstrap one cluster, all connected, waits for a ready
// leader and switches the cluster to the current log format (settle).
func newCluster(t *testing.T, size int, mod ...func(*Config)) []*testNode {
	t.Helper()
	nodes := formCluster(t, size, mod...)
	settle(t, nodes)
	return nodes
}

// formCluster starts n nodes that bootstrap one cluster, all connected, and waits for a ready
// leader. The cluster stays in the oldest log format: nothing switches it.
func formCluster(t *testing.T, size int, mod ...func(*Config)) []*testNode {
	t.Helper()
	var ids []string
	for i := 1; i <= size; i++ {
		ids = append(ids, fmt.Sprintf("n%d", i))
	}
	nodes := make([]*testNode, 0, size)
	for _, id := range ids {
		cfg := testConfig(id)
		for _, f := range mod {
			f(&cfg)
		}
		n := startNode(t, cfg, newStores())
		bootstrap(t, n, ids...)
		nodes = append(nodes, n)
	}
	testutil.ConnectAll(nodes)
	testutil.CloseAllAtEnd(t, nodes, func(n *testNode) { closeNode(t, n) })
	testutil.Leader(t, nodes)
	return nodes
}

// settle switches a new cluster to the current log format, as cluster management does once
// every member reads it, and waits for that to apply on every node, so that a test's own
// entries are the only ones it sees.
func settle(t *testing.T, nodes []*testNode) {
	t.Helper()
	if l := testutil.Leader(t, nodes); l.Format() < fsm.FormatCurrent {
		if err := l.SwitchFormat(fsm.FormatCurrent); err != nil {
			t.Fatalf("switch to the current log format: %v", err)
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		var applied uint64
		for i, n := range nodes {
			s := n.Stats()
			if s.LogFormat != int(fsm.FormatCurrent) {
				return fmt.Errorf("%s: log format %d", n.id, s.LogFormat)
			}
			if i > 0 && s.AppliedIndex != applied {
				return fmt.Errorf("%s applied %d, %s %d", n.id, s.AppliedIndex, nodes[0].id, applied)
			}
			applied = s.AppliedIndex
		}
		return nil
	})
}

// Requests, as the server will build them.

// lockEval is LOCK key owner lease: grant a free key, refuse a held one. It records what it saw
// in *saw, reset on every run (eval may run more than once).
func lockEval(key, owner string, leaseMs uint64, saw *fsm.Lock) node.Eval {
	return func(v node.View) []fsm.Command {
		*saw = fsm.Lock{}
		if l, _, held := v.Lookup([]byte(key)); held {
			*saw = l
			return nil
		}
		return []fsm.Command{{Kind: fsm.KindGrant, Key: []byte(key), Owner: []byte(owner), LeaseMs: leaseMs, Match: fsm.Match{Kind: fsm.MatchAbsent}, Acquire: true}}
	}
}

// lockOutcome is what one LOCK request got.
type lockOutcome struct {
	granted bool
	token   fsm.Token // ours when granted, the holder's when refused
	res     []fsm.Result
}

// tryLock runs LOCK through Exec.
func tryLock(ctx context.Context, n *testNode, key, owner string, leaseMs uint64) (lockOutcome, error) {
	var saw fsm.Lock
	res, err := n.Exec(ctx, [][]byte{[]byte(key)}, lockEval(key, owner, leaseMs, &saw), nil)
	if err != nil {
		return lockOutcome{}, err
	}
	if len(res) == 0 {
		return lockOutcome{token: saw.Token}, nil
	}
	if len(res) != 1 {
		return lockOutcome{}, fmt.Errorf("LOCK %s: %d results, want 1", key, len(res))
	}
	return lockOutcome{granted: res[0].Status == fsm.StatusGranted, token: res[0].Token, res: res}, nil
}

// mustLock grants key to owner or fails the test.
func mustLock(t *testing.T, n *testNode, key, owner string, leaseMs uint64) fsm.Result {
	t.Helper()
	out, err := tryLock(t.Context(), n, key, owner, leaseMs)
	if err != nil {
		t.Fatalf("LOCK %s on %s: %v", key, n.id, err)
	}
	if !out.granted {
		t.Fatalf("LOCK %s on %s: not granted (holder token %d, results %+v)", key, n.id, out.token, out.res)
	}
	return out.res[0]
}

// Inmem is n's transport, for testutil's in-memory cluster helpers.
func (n *testNode) Inmem() *raft.InmemTransport { return n.trans }

// mustLockOnLeader grants key to owner through whichever of nodes leads (onLeader), or fails
// the test.
func mustLockOnLeader(t *testing.T, nodes []*testNode, key, owner string, leaseMs uint64) fsm.Result {
	t.Helper()
	var out lockOutcome
	testutil.OnLeader(t, nodes, "LOCK "+key, func(l *testNode) error {
		var err error
		if out, err = tryLock(t.Context(), l, key, owner, leaseMs); err == nil && !out.granted {
			t.Fatalf("LOCK %s on %s: not granted (holder token %d, results %+v)", key, l.id, out.token, out.res)
		}
		return err
	})
	return out.res[0]
}

// propose runs one command through Exec unconditionally (the FSM checks its guard).
func propose(ctx context.Context, n *testNode, c fsm.Command) (fsm.Result, error) {
	res, err := n.Exec(ctx, [][]byte{c.Key}, func(node.View) []fsm.Command { return []fsm.Command{c} }, nil)
	if err != nil {
		return fsm.Result{}, err
	}
	if len(res) != 1 {
		return fsm.Result{}, fmt.Errorf("%s %s: %d results, want 1", c.Kind, c.Key, len(res))
	}
	return res[0], nil
}

func releaseCmd(key string, tok fsm.Token) fsm.Command {
	return fsm.Command{Kind: fsm.KindRelease, Key: []byte(key), Match: fsm.Match{Kind: fsm.MatchToken, Token: tok}}
}

func renewCmd(key string, tok fsm.Token, leaseMs uint64) fsm.Command {
	return fsm.Command{Kind: fsm.KindRenew, Key: []byte(key), Match: fsm.Match{Kind: fsm.MatchToken, Token: tok}, LeaseMs: leaseMs}
}

// read runs a request that only looks at key: it must answer only after leadership is confirmed.
func read(ctx context.Context, n *testNode, key string) (fsm.Lock, bool, error) {
	var l fsm.Lock
	var held bool
	_, err := n.Exec(ctx, [][]byte{[]byte(key)}, func(v node.View) []fsm.Command {
		l, _, held = v.Lookup([]byte(key))
		return nil
	}, nil)
	return l, held, err
}

// table decodes n's applied table (TableDump) into a map, leaving out the applied index so
// tables of nodes at different indexes compare equal when their locks do.
func table(t *testing.T, n *testNode) map[string]fsm.Lock {
	t.Helper()
	var buf bytes.Buffer
	if err := n.TableDump(&buf); err != nil {
		t.Fatalf("TableDump(%s): %v", n.id, err)
	}
	m, err := fsm.Restore(&buf)
	if err != nil {
		t.Fatalf("decode TableDump(%s): %v", n.id, err)
	}
	out := map[string]fsm.Lock{}
	m.Scan(func(key string, l fsm.Lock) bool {
		out[key] = l
		return true
	})
	return out
}

func diffTables(got, want map[string]fsm.Lock) string {
	return cmp.Diff(want, got, cmpopts.EquateEmpty())
}

// held reports whether key is in n's applied table.
func held(n *testNode, key string) bool {
	_, _, ok := n.LocalLookup([]byte(key))
	return ok
}

// waitExpired waits until n counted want committed Expires that removed a lock. The count is
// taken after the proposal returns, a moment after the table changed.
func waitExpired(t *testing.T, n *testNode, want uint64) {
	t.Helper()
	testutil.WaitFor(t, time.Second, func() error {
		if got := n.Stats().Expired; got != want {
			return fmt.Errorf("%s expired %d locks, want %d", n.id, got, want)
		}
		return nil
	})
}

// notLeaderErr returns the *node.NotLeaderError in err, or nil.
func notLeaderErr(err error) *node.NotLeaderError {
	var nl *node.NotLeaderError
	if errors.As(err, &nl) {
		return nl
	}
	return nil
}
