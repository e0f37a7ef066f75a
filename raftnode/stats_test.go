package raftnode

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// TestStatsFigures checks the figures behind the metrics: commit latency per committed
// proposal, entries per applied batch, and the leader changes observed, on every node of a
// cluster whose leader hands over.
func TestStatsFigures(t *testing.T) {
	nodes := newCluster(t, 3)
	l := testutil.Leader(t, nodes)
	before := l.Stats().CommitLatency.Count()
	for i := range 5 {
		mustLock(t, l, fmt.Sprintf("k%d", i), "o", 30000)
	}
	s := l.Stats()
	if got := s.CommitLatency.Count() - before; got != 5 {
		t.Errorf("CommitLatency counted %d proposals, want 5", got)
	}
	if s.BatchSize.Count() == 0 || s.BatchSize.Sum < 5 {
		t.Errorf("BatchSize: %d batches of %d entries, want at least the 5 locks", s.BatchSize.Count(), s.BatchSize.Sum)
	}
	if err := l.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	var next *testNode
	testutil.WaitFor(t, 5*time.Second, func() error { // the old leader may look ready for a moment
		if next = testutil.Leader(t, nodes); next == l {
			return fmt.Errorf("%s still leads", l.id)
		}
		return nil
	})
	for _, n := range nodes {
		testutil.WaitFor(t, 5*time.Second, func() error {
			s := n.Stats()
			if s.LeaderChanges < 2 || len(s.RecentLeaders) == 0 || s.RecentLeaders[len(s.RecentLeaders)-1].LeaderID != next.id {
				return fmt.Errorf("%s: %d leader changes, recent %+v; want 2 and %s last", n.id, s.LeaderChanges, s.RecentLeaders, next.id)
			}
			return nil
		})
	}
}

func TestLeaderLog(t *testing.T) {
	var l leaderLog
	t0 := time.Unix(0, 0)
	l.note("a", 1, t0)
	l.note("a", 1, t0) // the same observation again: not a change
	l.note("", 1, t0)  // no leader: recorded, not counted
	l.note("a", 2, t0) // re-elected in a new term: a change
	for i := range 2 * leaderLogSize {
		l.note(fmt.Sprintf("n%d", i), uint64(3+i), t0)
	}
	changes, recent := l.recent()
	if changes != 2+2*leaderLogSize {
		t.Errorf("changes = %d, want %d", changes, 2+2*leaderLogSize)
	}
	if len(recent) != leaderLogSize || recent[0].LeaderID != fmt.Sprintf("n%d", leaderLogSize) ||
		recent[leaderLogSize-1] != (node.LeaderChange{At: t0, LeaderID: fmt.Sprintf("n%d", 2*leaderLogSize-1), Term: 2 + 2*leaderLogSize}) {
		t.Errorf("recent = %+v, want the last %d, oldest first", recent, leaderLogSize)
	}
}
