package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
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
	// In-memory nodes have no client port to ask for the log format they read: they all run
	// this binary, except the IDs a test lists in olderMembers.
	askPeerFormat = func(_ context.Context, _ *Node, id, _ string) (byte, error) {
		if v, old := olderMembers.Load(id); old {
			if f, ok := v.(byte); ok {
				return f, nil
			}
			return fsm.FormatKeyed, nil
		}
		return fsm.FormatCurrent, nil
	}
	// awaitFuture and runFinisher leave a goroutine behind when raft never answers a future
	// (see there).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/raftlock/raftlock/raftnode.awaitFuture.func1"),
		goleak.IgnoreAnyFunction("github.com/raftlock/raftlock/raftnode.(*Node).runFinisher"))
}

// olderMembers holds the IDs of in-memory members that claim to run an older release: the
// previous one (true), or one that reads up to the format stored (a byte).
var olderMembers sync.Map

// Timings for in-memory clusters: elections in a few hundred milliseconds, replies in about one.
const (
	testHeartbeat = 100 * time.Millisecond
	testElection  = 200 * time.Millisecond
	testLease     = 100 * time.Millisecond
	testCommit    = time.Millisecond
)

// testLogger discards logs unless RAFTNODE_TEST_LOG is set: raft is chatty, and a goroutine
// logging through t.Log after its test ended would panic.
func testLogger() *slog.Logger {
	if os.Getenv("RAFTNODE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testConfig is a Config for an in-memory node with fast timings.
func testConfig(id string) Config {
	return Config{
		ID:                 id,
		RaftAddr:           addrOf(id),
		HeartbeatTimeout:   testHeartbeat,
		ElectionTimeout:    testElection,
		LeaderLeaseTimeout: testLease,
		CommitTimeout:      testCommit,
		ApplyTimeout:       2 * time.Second,
		Logger:             testLogger(),
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

// testNode is a Node with what a test needs to partition, restart and inspect it.
type testNode struct {
	*Node
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
	addr, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.RaftAddr))
	cfg = withLocks(cfg)
	policy := cfg.Locks.(*locks.Policy)
	n, err := New(cfg, st, trans)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.ID, err)
	}
	tn := &testNode{Node: n, locks: policy, id: cfg.ID, addr: addr, cfg: cfg, stores: st, trans: trans}
	t.Cleanup(func() { closeNode(t, tn) })
	return tn
}

func closeNode(t *testing.T, n *testNode) {
	t.Helper()
	if err := n.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
		t.Errorf("Close(%s): %v", n.id, err)
	}
}

// newNode starts a single node that bootstraps a cluster of itself, and waits until it serves.
func newNode(t *testing.T, mod ...func(*Config)) *testNode {
	t.Helper()
	cfg := testConfig("n1")
	cfg.Bootstrap = true
	for _, f := range mod {
		f(&cfg)
	}
	n := startNode(t, cfg, newStores())
	leader(t, []*testNode{n})
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

// newCluster starts n nodes that bootstrap one cluster, all connected, and waits for a ready
// leader.
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
	connectAll(nodes)
	// Registered after the nodes' own cleanups, so it runs first: cut every link, then close.
	// A leader's Close hands leadership over; raft sends the TimeoutNow from a goroutine it
	// does not wait for, which over a live InmemTransport to an already closed peer blocks for
	// the transport's 500 ms timeout and outlives the test. Disconnected, it fails at once.
	t.Cleanup(func() {
		for _, n := range nodes {
			n.trans.DisconnectAll()
		}
		for _, n := range nodes {
			closeNode(t, n)
		}
	})
	leader(t, nodes)
	settle(t, nodes)
	return nodes
}

// settle waits for what a new cluster's first leader writes on its own once ready (the switch
// to the current log format, the cluster ID) to apply on every node, so that a test's own
// entries are the only ones it sees. The cluster ID is the table's: Stats and ClusterID give a
// bootstrapping node's candidate before its entry commits (TestLeaseExpires once counted that
// entry among its own, under -race with two busy loops beside it).
func settle(t *testing.T, nodes []*testNode) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, func() error {
		var applied uint64
		for i, n := range nodes {
			s := n.Stats()
			n.mu.Lock()
			committedID := n.mu.machine.ClusterID()
			n.mu.Unlock()
			if s.LogFormat != int(fsm.FormatCurrent) || committedID == "" {
				return fmt.Errorf("%s: log format %d, committed cluster ID %q", n.id, s.LogFormat, committedID)
			}
			if i > 0 && s.AppliedIndex != applied {
				return fmt.Errorf("%s applied %d, %s %d", n.id, s.AppliedIndex, nodes[0].id, applied)
			}
			applied = s.AppliedIndex
		}
		return nil
	})
}

// connectAll connects every transport to every other one (heals every partition).
func connectAll(nodes []*testNode) {
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
}

// isolate cuts n off from every other node, in both directions.
func isolate(n *testNode, nodes []*testNode) {
	n.trans.DisconnectAll()
	for _, o := range nodes {
		if o != n {
			o.trans.Disconnect(n.addr)
		}
	}
}

// others returns nodes without n.
func others(n *testNode, nodes []*testNode) []*testNode {
	var out []*testNode
	for _, o := range nodes {
		if o != n {
			out = append(out, o)
		}
	}
	return out
}

// waitFor polls cond until it returns nil, and fails the test with cond's last error when
// timeout passes first (nats-server's checkFor).
// leader waits until exactly one of nodes is a ready leader and returns it.
func leader(t *testing.T, nodes []*testNode) *testNode {
	t.Helper()
	var l *testNode
	testutil.WaitFor(t, 5*time.Second, func() error {
		l = nil
		var ready []string
		for _, n := range nodes {
			if n.IsLeader() {
				l = n
				ready = append(ready, n.id)
			}
		}
		if len(ready) != 1 {
			return fmt.Errorf("ready leaders %v, want exactly one", ready)
		}
		return nil
	})
	return l
}

// fakeClock is an injectable Config.Now that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
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

// onLeader runs op, named what, on whichever of nodes leads and returns that node. A refusal
// as not leader (ours, or raft's own for a configuration change) changed nothing, so op runs
// again on the new leader: under -race on a busy machine an in-memory cluster can elect another
// leader right after a test found one. Any other error fails the test.
func onLeader(t *testing.T, nodes []*testNode, what string, op func(l *testNode) error) *testNode {
	t.Helper()
	var ran *testNode
	testutil.WaitFor(t, 10*time.Second, func() error {
		l := leader(t, nodes)
		switch err := op(l); {
		case notLeaderErr(err) != nil, errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
			return err
		case err != nil:
			t.Fatalf("%s on %s: %v", what, l.id, err)
		}
		ran = l
		return nil
	})
	return ran
}

// mustLockOnLeader grants key to owner through whichever of nodes leads (onLeader), or fails
// the test.
func mustLockOnLeader(t *testing.T, nodes []*testNode, key, owner string, leaseMs uint64) fsm.Result {
	t.Helper()
	var out lockOutcome
	onLeader(t, nodes, "LOCK "+key, func(l *testNode) error {
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
