package raftnode

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/store"
	"github.com/raftlock/raftlock/tests/testutil"
)

// diskSegment is the log segment size of the disk fault tests: a few dozen group commits, so a
// test reaches the next segment (and a full disk's refusal) in a few hundred writes.
const diskSegment = 8 << 10

// faultStores opens a real store for id on an in-memory filesystem whose raft log can be made
// full or broken, closed when the test ends (after the node: cleanups run last first).
func faultStores(t *testing.T, id string) (Stores, *testutil.FaultFS) {
	t.Helper()
	fs := testutil.NewFaultFS(vfs.NewMem(), "raftlog")
	st, err := store.Open(store.Config{Dir: id, FS: fs, SegmentSize: diskSegment, Logger: testutil.RaftLogger()})
	if err != nil {
		t.Fatalf("open store %s: %v", id, err)
	}
	t.Cleanup(func() { st.Close() })
	return Stores{Log: st, Stable: st, Snapshots: st.Snapshots(2), Health: st.Health}, fs
}

// faultCluster forms a cluster of size nodes on faultStores and waits for a ready leader.
func faultCluster(t *testing.T, size int) ([]*testNode, map[*testNode]*testutil.FaultFS) {
	t.Helper()
	var ids []string
	for i := 1; i <= size; i++ {
		ids = append(ids, fmt.Sprintf("n%d", i))
	}
	fss := map[*testNode]*testutil.FaultFS{}
	var nodes []*testNode
	for _, id := range ids {
		st, fs := faultStores(t, id)
		n := startNode(t, testConfig(id), st)
		bootstrap(t, n, ids...)
		nodes = append(nodes, n)
		fss[n] = fs
	}
	testutil.ConnectAll(nodes)
	testutil.CloseAllAtEnd(t, nodes, func(n *testNode) { closeNode(t, n) })
	settle(t, nodes)
	return nodes, fss
}

// asDiskFault returns the disk fault in err's chain and whether the disk is full.
func asDiskFault(err error) (df node.DiskFault, ok bool) {
	ok = errors.As(err, &df)
	return df, ok
}

// lockAll grants count keys named prefix-i through whichever of nodes leads, and returns their
// tokens: the writes the cluster acknowledged.
func lockAll(t *testing.T, nodes []*testNode, prefix string, count int) map[string]fsm.Token {
	t.Helper()
	acked := map[string]fsm.Token{}
	for i := range count {
		key := fmt.Sprintf("%s-%d", prefix, i)
		acked[key] = mustLockOnLeader(t, nodes, key, "o", 60_000).Token
	}
	return acked
}

// checkAcked fails unless l's applied table holds every acknowledged key with its token.
func checkAcked(t *testing.T, l *testNode, acked map[string]fsm.Token) {
	t.Helper()
	tab := table(t, l)
	for key, tok := range acked {
		if got, ok := tab[key]; !ok || got.Token != tok {
			t.Errorf("acknowledged %s (token %d) lost on %s: got %+v, present %v", key, tok, l.id, got, ok)
		}
	}
}

// failStopped waits until n has stopped its raft for a failed disk.
func failStopped(t *testing.T, n *testNode) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if err := n.DiskFault(); err == nil {
			return errors.New(n.id + " reports no disk fault")
		}
		if !n.raftStopped() {
			return errors.New(n.id + " has not stopped its raft")
		}
		if s := n.Stats().State; s != raft.Shutdown.String() {
			return fmt.Errorf("%s reports state %s, want Shutdown", n.id, s)
		}
		return nil
	})
}

// neverAcks checks that n refuses a write with its failed disk's error, certain, as often as
// asked: it never acknowledges again, even with the disk working again (no retried fsync).
func neverAcks(t *testing.T, n *testNode) {
	t.Helper()
	for i := range 5 {
		key := fmt.Sprintf("after-%d", i)
		out, err := tryLock(t.Context(), n, key, "o", 60_000)
		df, ok := asDiskFault(err)
		if !ok || df.DiskFull() || out.granted {
			t.Fatalf("LOCK %s on %s after its disk failed = %+v, %v; want the failed disk's error", key, n.id, out, err)
		}
		if errors.Is(err, node.ErrUncertain) {
			t.Fatalf("LOCK %s on %s refused before proposing, yet uncertain: %v", key, n.id, err)
		}
	}
}

// TestFailedDiskOnLeader: a leader whose log's write or sync fails stops acknowledging at
// once, says why, never acknowledges again (even once the disk works: no retried fsync), stops
// its raft, and the other two elect a leader and serve with no acknowledged write lost.
func TestFailedDiskOnLeader(t *testing.T) {
	nodes, fss := faultCluster(t, 3)
	acked := lockAll(t, nodes, "before", 20)
	l := testutil.Leader(t, nodes)
	fss[l].Break()

	out, err := tryLock(t.Context(), l, "at-failure", "o", 60_000)
	if out.granted || err == nil {
		t.Fatalf("LOCK on the leader whose disk failed = %+v, %v; want an error", out, err)
	}
	if df, ok := asDiskFault(err); !ok || df.DiskFull() || !errors.Is(err, node.ErrUncertain) {
		t.Fatalf("LOCK on the leader whose disk failed: %v; want the failed disk's error, uncertain", err)
	}
	failStopped(t, l)
	fss[l].Repair()
	neverAcks(t, l)

	rest := testutil.Others(l, nodes)
	nl := testutil.Leader(t, rest)
	if nl == l {
		t.Fatalf("the node whose disk failed leads again")
	}
	for key, tok := range lockAll(t, rest, "after-failover", 20) {
		acked[key] = tok
	}
	checkAcked(t, nl, acked)
	if !l.raftStopped() {
		t.Fatalf("%s's raft runs again after the failover", l.id)
	}
}

// TestFailedDiskOnFollower: a follower whose log fails stops its raft; the leader and the
// other follower go on committing.
func TestFailedDiskOnFollower(t *testing.T) {
	nodes, fss := faultCluster(t, 3)
	acked := lockAll(t, nodes, "before", 10)
	l := testutil.Leader(t, nodes)
	f := testutil.Others(l, nodes)[0]
	fss[f].Break()
	for key, tok := range lockAll(t, nodes, "during", 20) {
		acked[key] = tok
	}
	failStopped(t, f)
	fss[f].Repair()
	neverAcks(t, f)
	for key, tok := range lockAll(t, nodes, "after", 20) {
		acked[key] = tok
	}
	checkAcked(t, testutil.Leader(t, nodes), acked)
	if got := testutil.Leader(t, nodes); got != l {
		t.Errorf("leader changed from %s to %s when a follower's disk failed", l.id, got.id)
	}
}

// fillUntilFull writes through n until the first refusal and returns it: with fs full, a
// segment's rollover takes the spare, and its replacement finds no space.
func fillUntilFull(t *testing.T, n *testNode, prefix string) error {
	t.Helper()
	var refused error
	testutil.WaitFor(t, 10*time.Second, func() error {
		for i := range 50 {
			key := fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), i)
			if _, err := tryLock(t.Context(), n, key, "o", 60_000); err != nil {
				refused = err
				return nil
			}
		}
		return errors.New("no write refused yet")
	})
	return refused
}

// TestFullDiskSingleNode: the case, one node whose disk fills. Writes get the full
// disk's error, certain (nothing written), with no leadership change: the refusal comes before
// raft appends, so raft never steps down for it. Reads go on. Once space is freed the node
// takes writes again by itself.
func TestFullDiskSingleNode(t *testing.T) {
	nodes, fss := faultCluster(t, 1)
	n := nodes[0]
	acked := lockAll(t, nodes, "before", 5)
	fss[n].SetFull(true)
	term, changes := n.Stats().Term, n.Stats().LeaderChanges

	err := fillUntilFull(t, n, "fill")
	if df, ok := asDiskFault(err); !ok || !df.DiskFull() || errors.Is(err, node.ErrUncertain) {
		t.Fatalf("first refused write = %v; want the full disk's error, certain", err)
	}
	for i := range 20 {
		out, err := tryLock(t.Context(), n, fmt.Sprintf("while-full-%d", i), "o", 60_000)
		if df, ok := asDiskFault(err); !ok || !df.DiskFull() || errors.Is(err, node.ErrUncertain) || out.granted {
			t.Fatalf("write %d while full = %+v, %v; want the full disk's error, certain", i, out, err)
		}
	}
	if _, held, err := read(t.Context(), n, "before-1"); err != nil || !held {
		t.Fatalf("read while full = held %v, %v; want held, nil", held, err)
	}
	if s := n.Stats(); s.Term != term || s.LeaderChanges != changes || !n.IsLeader() {
		t.Fatalf("leadership moved while the disk was full: term %d -> %d, leader changes %d -> %d, leader %v",
			term, s.Term, changes, s.LeaderChanges, n.IsLeader())
	}
	if err := n.DiskFault(); err == nil {
		t.Fatal("DiskFault = nil while the disk is full")
	}

	fss[n].SetFull(false)
	testutil.WaitFor(t, 5*time.Second, func() error {
		_, err := tryLock(t.Context(), n, fmt.Sprintf("after-%d", time.Now().UnixNano()), "o", 60_000)
		return err
	})
	if err := n.DiskFault(); err != nil {
		t.Fatalf("DiskFault = %v after space was freed", err)
	}
	checkAcked(t, n, acked)
}

// TestFullDiskOnLeader: a leader whose disk fills refuses writes with the full disk's error and
// hands leadership to another voter; the cluster goes on taking writes, and once space is freed
// the node catches up with no acknowledged write lost.
func TestFullDiskOnLeader(t *testing.T) {
	nodes, fss := faultCluster(t, 3)
	acked := lockAll(t, nodes, "before", 5)
	l := testutil.Leader(t, nodes)
	fss[l].SetFull(true)
	err := fillUntilFull(t, l, "fill")
	if df, ok := asDiskFault(err); !ok || !df.DiskFull() || errors.Is(err, node.ErrUncertain) {
		t.Fatalf("first refused write = %v; want the full disk's error, certain", err)
	}
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("another node leads", func() bool {
		return !l.IsLeader() && testutil.Leader(t, nodes) != l
	}))
	for key, tok := range lockAll(t, testutil.Others(l, nodes), "while-full", 20) {
		acked[key] = tok
	}
	fss[l].SetFull(false)
	nl := testutil.Leader(t, nodes)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if a, b := l.Stats().AppliedIndex, nl.Stats().AppliedIndex; a < b {
			return fmt.Errorf("%s applied %d, the leader %d", l.id, a, b)
		}
		return l.DiskFault()
	})
	checkAcked(t, l, acked)
	checkAcked(t, nl, acked)
}

// The applied floor is not written while the raft log's disk has a fault: pebble, which holds it,
// ends the process on a write it cannot make, and a node whose disk failed stays up to say so.
func TestAppliedFloorNotWrittenOnAFailedDisk(t *testing.T) {
	nodes, fss := faultCluster(t, 1)
	n := nodes[0]
	lockAll(t, nodes, "before", 5)
	fss[n].Break()
	if out, err := tryLock(t.Context(), n, "breaks", "o", 60_000); err == nil || out.granted {
		t.Fatalf("a write on the broken disk = %+v, %v; want refused", out, err)
	}
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("the disk failed", func() bool { return n.diskFailed() != nil }))
	if err := n.stores.Stable.SetUint64(appliedFloorKey, 0); err != nil { // pebble's disk is fine
		t.Fatal(err)
	}
	if got := n.recordAppliedFloor(0); got != 0 {
		t.Errorf("recordAppliedFloor on a failed disk recorded %d", got)
	}
	if v, err := n.stores.Stable.GetUint64(appliedFloorKey); err != nil || v != 0 {
		t.Errorf("the applied floor in the stable store = %d, %v after the disk failed; want 0 (not written)", v, err)
	}
}

// TestDiskFailureStopsSiblingCores: a core told (Config.DiskFailed) that its disk failed stops
// its sibling, as the raft groups of one node do for the disk their logs share
// (StopForDiskFault): the sibling, whose own log never failed, stops its raft and reports the
// fault, once.
func TestDiskFailureStopsSiblingCores(t *testing.T) {
	var sibling *testNode
	told := 0
	stA, fsA := faultStores(t, "a")
	cfgA := testConfig("a")
	cfgA.DiskFailed = func(err error) {
		told++
		sibling.StopForDiskFault(err)
	}
	a := startNode(t, cfgA, stA)
	bootstrap(t, a, "a")
	stB, _ := faultStores(t, "b")
	sibling = startNode(t, testConfig("b"), stB)
	bootstrap(t, sibling, "b")
	for _, n := range []*testNode{a, sibling} {
		testutil.CloseAllAtEnd(t, []*testNode{n}, func(n *testNode) { closeNode(t, n) })
		settle(t, []*testNode{n})
	}
	fsA.Break()
	if out, err := tryLock(t.Context(), a, "k", "o", 60_000); out.granted || err == nil {
		t.Fatalf("LOCK on a broken disk = %+v, %v; want an error", out, err)
	}
	failStopped(t, a)
	failStopped(t, sibling)
	if df, ok := asDiskFault(sibling.DiskFault()); !ok || df.DiskFull() {
		t.Errorf("the sibling reports %v; want the failed disk", sibling.DiskFault())
	}
	sibling.StopForDiskFault(a.DiskFault()) // again: nothing more
	if told != 1 {
		t.Errorf("DiskFailed told %d times; want once", told)
	}
}
