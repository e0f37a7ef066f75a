package raftnode

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// waitConverged waits until every node's table equals want's.
func waitConverged(t *testing.T, want *testNode, nodes []*testNode) {
	t.Helper()
	testutil.WaitFor(t, 3*time.Second, func() error {
		wt := table(t, want)
		for _, n := range nodes {
			if d := diffTables(table(t, n), wt); d != "" {
				return fmt.Errorf("%s's table differs from %s's (-%s +%s):\n%s", n.id, want.id, want.id, n.id, d)
			}
		}
		return nil
	})
}

func TestClusterFollowerRedirects(t *testing.T) {
	nodes := newCluster(t, 3)
	l := testutil.Leader(t, nodes)
	for _, f := range testutil.Others(l, nodes) {
		testutil.WaitFor(t, 2*time.Second, func() error {
			if id, _ := f.Leader(); id != l.id {
				return fmt.Errorf("%s knows leader %q, want %q", f.id, id, l.id)
			}
			return nil
		})
		before := f.Stats()
		for name, eval := range map[string]node.Eval{
			"read":  func(node.View) []fsm.Command { return nil },
			"write": lockEval("k", "o", 0, new(fsm.Lock)),
		} {
			_, err := f.Exec(t.Context(), [][]byte{[]byte("k")}, eval, nil)
			nl := notLeaderErr(err)
			if nl == nil || nl.LeaderID != l.id || nl.LeaderAddr != string(l.addr) {
				t.Fatalf("%s on follower %s = %v; want NotLeaderError naming %s at %s", name, f.id, err, l.id, l.addr)
			}
		}
		if s := f.Stats(); s.Ready || s.State != "Follower" || s.Proposals != before.Proposals || s.Reads != before.Reads {
			t.Fatalf("follower %s: %+v; want not ready, nothing proposed or read", f.id, s)
		}
	}
}

func TestClusterReplicates(t *testing.T) {
	clock := testutil.NewClock()
	nodes := newCluster(t, 3, func(c *Config) { c.Now = clock.Now })
	l := testutil.Leader(t, nodes)
	var toks []fsm.Token
	for i := range 30 {
		var ms uint64
		if i%2 == 0 {
			ms = 10_000
		}
		toks = append(toks, mustLock(t, l, fmt.Sprintf("k%02d", i), "o", ms).Token)
	}
	for i := 0; i < 30; i += 5 {
		if r, err := propose(t.Context(), l, releaseCmd(fmt.Sprintf("k%02d", i), toks[i])); err != nil || r.Status != fsm.StatusReleased {
			t.Fatalf("release: %+v, %v", r, err)
		}
	}
	waitConverged(t, l, nodes)
	// Every node armed a timer for each leased lock, and only the leader acts on them.
	for _, n := range nodes {
		if s := n.Stats(); s.Locks != 24 || s.Leases != 12 {
			t.Fatalf("%s: %d locks, %d leases; want 24, 12", n.id, s.Locks, s.Leases)
		}
	}
	clock.Advance(10 * time.Second)
	for _, n := range nodes {
		n.locks.Wake()
	}
	testutil.WaitFor(t, 2*time.Second, func() error {
		for _, n := range nodes {
			if s := n.Stats(); s.Locks != 12 || s.Leases != 0 {
				return fmt.Errorf("%s", n.statsLine())
			}
		}
		return nil
	})
	waitConverged(t, l, nodes)
	waitExpired(t, l, 12)
	for _, n := range testutil.Others(l, nodes) {
		if s := n.Stats(); s.Expired != 0 || s.Proposals != 0 {
			t.Fatalf("follower %s proposed (expired %d, proposals %d); only the leader acts on timers", n.id, s.Expired, s.Proposals)
		}
	}
}

// TestClusterFailover partitions the leader away. The old leader's write cannot commit; the new
// leader serves every acknowledged grant with its token and hands out larger tokens; once the new
// leader changed a key, the old leader must not answer a read or a refusal from its stale table,
// even while it still takes itself for the ready leader; after healing, all tables converge and
// the old leader's unacknowledged write is gone.
func TestClusterFailover(t *testing.T) {
	nodes := newCluster(t, 3)
	old := testutil.Leader(t, nodes)
	acked := mustLock(t, old, "held", "alice", 0)

	testutil.Isolate(old, nodes)
	partitioned := time.Now()

	// A write on the partitioned leader cannot commit: uncertain (it was proposed) or not
	// leader (it was not). Never a success.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	out, err := tryLock(ctx, old, "lost", "bob", 0)
	if err == nil || (!errors.Is(err, node.ErrUncertain) && notLeaderErr(err) == nil) {
		t.Fatalf("write on the partitioned leader = %+v, %v; want node.ErrUncertain or NotLeaderError", out, err)
	}

	rest := testutil.Others(old, nodes)
	nl := testutil.Leader(t, rest)
	took := time.Since(partitioned)
	t.Logf("new leader %s ready %v after the partition", nl.id, took)
	if took > 20*testElection {
		t.Fatalf("new leader took %v, want a few election timeouts", took)
	}

	l, isHeld, err := read(t.Context(), nl, "held")
	if err != nil || !isHeld || l.Token != acked.Token || string(l.Owner) != "alice" {
		t.Fatalf("read of held on new leader = %+v, %v, %v; want alice's lock %d", l, isHeld, err, acked.Token)
	}
	if out, err := tryLock(t.Context(), nl, "held", "bob", 0); err != nil || out.granted || out.token != acked.Token {
		t.Fatalf("LOCK held on new leader = %+v, %v; want refused naming %d", out, err, acked.Token)
	}
	if r := mustLock(t, nl, "new", "carol", 0); r.Token <= acked.Token {
		t.Fatalf("new leader's token %d, want > %d", r.Token, acked.Token)
	}
	// Alice unlocks, Bob locks: the old leader's table is now stale on "held".
	if r, err := propose(t.Context(), nl, releaseCmd("held", acked.Token)); err != nil || r.Status != fsm.StatusReleased {
		t.Fatalf("release on new leader = %+v, %v", r, err)
	}
	bob := mustLock(t, nl, "held", "bob", 0)

	testutil.WaitFor(t, 2*time.Second, func() error {
		if old.IsLeader() {
			return errors.New("partitioned old leader still ready")
		}
		return nil
	})
	checkStale := func(when string) {
		t.Helper()
		out, err := tryLock(ctx, old, "held", "carol", 0)
		if notLeaderErr(err) == nil {
			t.Fatalf("%s: refusal on the old leader = %+v, %v; want NotLeaderError (bob holds %d now)", when, out, err, bob.Token)
		}
		l, isHeld, err := read(ctx, old, "held")
		if notLeaderErr(err) == nil {
			t.Fatalf("%s: read on the old leader = %+v, %v, %v; want NotLeaderError", when, l, isHeld, err)
		}
	}
	checkStale("after stepping down")
	// The window before the old leader hears it lost leadership (raft's LeaderCh not yet read):
	// it still takes itself for ready, and only the leadership check stands between its stale
	// table and the client.
	old.ready.Store(true)
	checkStale("while still marked ready")
	out, err = tryLock(ctx, old, "lost2", "carol", 0)
	old.ready.Store(false)
	if err == nil || (!errors.Is(err, node.ErrUncertain) && notLeaderErr(err) == nil) {
		t.Fatalf("write on the old leader while marked ready = %+v, %v; want NotLeaderError or node.ErrUncertain", out, err)
	}

	testutil.ConnectAll(nodes)
	waitConverged(t, nl, nodes)
	for _, n := range nodes {
		if held(n, "lost") || held(n, "lost2") {
			t.Fatalf("%s holds a write the old leader never committed", n.id)
		}
	}
	now := testutil.Leader(t, nodes)
	testutil.WaitFor(t, 2*time.Second, func() error {
		if id, _ := old.Leader(); id != now.id {
			return fmt.Errorf("old leader knows leader %q, want %q", id, now.id)
		}
		return nil
	})
}

// TestClusterLeaseSurvivesFailover: a new leader keeps the timers it armed as a follower. The
// lease is neither ended early nor reset to its full length by the election.
func TestClusterLeaseSurvivesFailover(t *testing.T) {
	const lease = 1500 * time.Millisecond
	nodes := newCluster(t, 3)
	old := testutil.Leader(t, nodes)
	sent := time.Now()
	mustLock(t, old, "k", "o", uint64(lease/time.Millisecond))
	acked := time.Now()
	// applied[id] bounds from above when each follower armed its timer.
	applied := map[string]time.Time{}
	testutil.WaitFor(t, time.Second, func() error {
		for _, f := range testutil.Others(old, nodes) {
			if _, ok := applied[f.id]; !ok && held(f, "k") {
				applied[f.id] = time.Now()
			}
		}
		if len(applied) != 2 {
			return fmt.Errorf("grant applied on %d followers, want 2", len(applied))
		}
		return nil
	})

	// Fail over well into the lease: a reset timer would then end at least 700 ms late.
	time.Sleep(time.Until(acked.Add(700 * time.Millisecond)))
	testutil.Isolate(old, nodes)
	nl := testutil.Leader(t, testutil.Others(old, nodes))
	readyAt := time.Now()
	if readyAt.After(sent.Add(lease)) {
		t.Skipf("election took until %v after the grant, past the lease: nothing to check", readyAt.Sub(sent))
	}
	_, rem, ok := nl.LocalLookup([]byte("k"))
	if !ok {
		t.Fatalf("lease ended early: gone on the new leader %v after the grant", readyAt.Sub(sent))
	}
	if maxRem := applied[nl.id].Add(lease).Sub(readyAt); rem > maxRem {
		t.Fatalf("new leader's timer has %v left, want <= %v: it was reset by the election", rem, maxRem)
	}

	gone := goneAt(t, nl, "k", 3*time.Second)
	if gone.Before(sent.Add(lease)) {
		t.Fatalf("lease ended %v after the grant was sent, before its %v", gone.Sub(sent), lease)
	}
	// Bounded delay: the timer armed at the follower's apply plus the expiry's commit.
	if late := gone.Sub(applied[nl.id].Add(lease)); late > 500*time.Millisecond {
		t.Fatalf("lease ended %v after the new leader's timer (armed at apply): want the kept timer, not a reset one", late)
	}
	t.Logf("lease ended %v after the grant (%v after failover)", gone.Sub(sent), gone.Sub(readyAt))
	// Nothing but a committed Expire removes a lock here. (Stats().Expired is not checked: if
	// leadership moves again in the two-node half, the Expire may be counted nowhere.)

	testutil.ConnectAll(nodes)
	waitConverged(t, nl, nodes)
	if held(old, "k") {
		t.Fatal("old leader still holds the expired lock after healing")
	}
}

// TestSnapshotInstallOnLaggingFollower: a follower that missed entries the leader compacted away
// gets a snapshot, restores the same table, and arms a full lease for every leased lock.
func TestSnapshotInstallOnLaggingFollower(t *testing.T) {
	clock := testutil.NewClock()
	nodes := newCluster(t, 3, func(c *Config) {
		c.Now = clock.Now
		c.TrailingLogs = 1
	})
	l := testutil.Leader(t, nodes)
	lag := testutil.Others(l, nodes)[0]
	testutil.Isolate(lag, nodes)

	for i := range 30 {
		var ms uint64
		if i%2 == 0 {
			ms = 60_000
		}
		mustLock(t, l, fmt.Sprintf("k%02d", i), "o", ms)
	}
	if err := l.Snapshot(); err != nil {
		t.Fatal(err)
	}
	mustLock(t, l, "after-snapshot", "o", 0)
	// The leader's clock moves on; the follower's (same injected clock) too: the follower has no
	// timer for these locks and must arm a full lease from the install.
	clock.Advance(30 * time.Second)

	testutil.ConnectAll(nodes)
	waitConverged(t, l, nodes)
	if s := lag.Stats(); s.LastSnapshot == 0 {
		t.Fatalf("lagging follower converged without a snapshot install: %+v", s)
	}
	for i := 0; i < 30; i += 2 {
		key := fmt.Sprintf("k%02d", i)
		if _, rem, ok := lag.LocalLookup([]byte(key)); !ok || rem != 60*time.Second {
			t.Fatalf("%s on the restored follower: held %v, %v left; want the full 60s from the install", key, ok, rem)
		}
	}
}

// TestLeaseQueueBounded: the timer queue must stay proportional to the locks with a lease, on
// followers too. Followers never pop their queue (only the leader expires), so without
// compaction every Grant or Renew they apply adds an entry that stays until they become leader.
func TestLeaseQueueBounded(t *testing.T) {
	nodes := newCluster(t, 3)
	l := testutil.Leader(t, nodes)
	r := mustLock(t, l, "k", "o", 60_000)
	var last fsm.Result
	for range 300 {
		var err error
		if last, err = propose(t.Context(), l, renewCmd("k", r.Token, 60_000)); err != nil || last.Status != fsm.StatusRenewed {
			t.Fatalf("renew: %+v, %v", last, err)
		}
	}
	testutil.WaitFor(t, 2*time.Second, func() error {
		for _, n := range nodes {
			if l, _, _ := n.LocalLookup([]byte("k")); l.LeaseRev != last.LeaseRev {
				return fmt.Errorf("%s has lease rev %d, want %d", n.id, l.LeaseRev, last.LeaseRev)
			}
		}
		return nil
	})
	for _, n := range nodes {
		n.mu.Lock()
		armed := n.mu.machine.Leases()
		n.mu.Unlock()
		queued := n.locks.Timers()
		role := "follower"
		if n == l {
			role = "leader"
		}
		if queued > 2*armed+64 {
			t.Errorf("%s %s: %d queued timers for %d armed leases after 300 renews; want O(armed)", role, n.id, queued, armed)
		}
	}
}

// TestClusterLeaderCloseHandsOver: a leader's Close hands leadership to a follower, so service
// resumes without waiting for an election timeout, and nothing acknowledged is lost.
func TestClusterLeaderCloseHandsOver(t *testing.T) {
	nodes := newCluster(t, 3)
	old := testutil.Leader(t, nodes)
	acked := mustLock(t, old, "k", "o", 0)
	start := time.Now()
	closeNode(t, old)
	testutil.Isolate(old, nodes) // a closed process: RPCs to it fail at once
	nl := testutil.Leader(t, testutil.Others(old, nodes))
	t.Logf("Close plus handover took %v", time.Since(start))
	if l, isHeld, err := read(t.Context(), nl, "k"); err != nil || !isHeld || l.Token != acked.Token {
		t.Fatalf("read after handover = %+v, %v, %v; want token %d", l, isHeld, err, acked.Token)
	}
	if r := mustLock(t, nl, "k2", "o", 0); r.Token <= acked.Token {
		t.Fatalf("token %d after handover, want > %d", r.Token, acked.Token)
	}
	if _, err := tryLock(t.Context(), old, "k3", "o", 0); !errors.Is(err, node.ErrShutdown) {
		t.Fatalf("Exec on the closed node = %v, want node.ErrShutdown", err)
	}
}

// TestClusterFollowerRestart: a follower that restarts on its stores catches up with the grants it
// missed and converges; its lease timers start from its own apply, never earlier.
func TestClusterFollowerRestart(t *testing.T) {
	clock := testutil.NewClock()
	nodes := newCluster(t, 3, func(c *Config) { c.Now = clock.Now })
	l := testutil.Leader(t, nodes)
	idx := 0
	for i, n := range nodes {
		if n != l {
			idx = i
			break
		}
	}
	mustLock(t, l, "before", "o", 5000)
	waitConverged(t, l, nodes)
	closeNode(t, nodes[idx])
	testutil.Isolate(nodes[idx], nodes)
	mustLock(t, l, "during", "o", 5000)
	clock.Advance(4 * time.Second)
	// Replace it in place: the cluster's cleanup closes what nodes holds when the test ends.
	nodes[idx] = restart(t, nodes[idx])
	testutil.ConnectAll(nodes)
	waitConverged(t, l, nodes)
	f := nodes[idx]
	for _, key := range []string{"before", "during"} {
		if _, rem, ok := f.LocalLookup([]byte(key)); !ok || rem != 5*time.Second {
			t.Fatalf("%s on the restarted follower: held %v, %v left; want a full 5s from its replay", key, ok, rem)
		}
	}
	// The leader's own timers were not reset: "before" and "during" have 1s left there.
	if _, rem, _ := l.LocalLookup([]byte("before")); rem != time.Second {
		t.Fatalf("leader's timer: %v left, want 1s", rem)
	}
}
