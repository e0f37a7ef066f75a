package raftnode

import "testing"

// A restarted core knows how far its log was committed before its raft hears it from a leader:
// as far as it had applied when it stopped, which it recorded as it stopped (keepAppliedFloor).
func TestLogEndAfterARestartCountsWhatWasApplied(t *testing.T) {
	n := newNode(t)
	for _, k := range []string{"a", "b", "c"} {
		mustLock(t, n, k, "o", 0)
	}
	applied := n.raft.AppliedIndex()
	n = restart(t, n)
	if n.appliedFloor < applied {
		t.Fatalf("after a restart the applied floor is %d; the core had applied %d when it stopped", n.appliedFloor, applied)
	}
	if end := n.LogEnd(); end.Committed < applied {
		t.Fatalf("after a restart LogEnd says committed up to %d; the core had applied %d", end.Committed, applied)
	}
}
