package raftnode

import (
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
)

// LogEnd is where this node's log ends: its newest entry, applied or not, and how far it is known
// committed: raft's commit index, or after a restart, before raft learns it, the index this node
// had applied when it stopped (keepAppliedFloor). Only that when it cannot tell the newest entry
// (an empty log, or one that kept changing while it read it).
func (n *Replica) LogEnd() node.LogEnd {
	end := node.LogEnd{Committed: max(n.raft.CommitIndex(), n.appliedFloor)}
	for range 3 {
		index := n.raft.LastIndex()
		if index == 0 {
			break
		}
		var l raft.Log
		// The entry read is the log's last at the moment of the read, or one at that index that
		// replaced it since (then the log ended there at that later moment): either is a moment
		// during the caller's request.
		if err := n.logs.GetLog(index, &l); err == nil && l.Index == index {
			end.Last = node.LogPosition{Index: index, Term: l.Term}
			break
		}
	}
	return end
}

// appliedFloorKey is where keepAppliedFloor records, in the stable store, an index this node has
// applied: every entry up to it was committed before the node last stopped, which a restarted
// node's raft does not know until a leader tells it, and which a subscriber needs to hear
// nothing of the entries the node then applies again (node.LogEnd.Holds).
var appliedFloorKey = []byte("raftlock/applied-floor")

// appliedFloorEvery is how often keepAppliedFloor records the applied index while it moves: a
// node killed between two records replays up to that much of its log's messages to its new
// subscribers.
const appliedFloorEvery = time.Second

// keepAppliedFloor records the applied index every appliedFloorEvery while it moves, and once
// more when the core stops (raft stopped first: the last index it applied).
func (n *Replica) keepAppliedFloor() {
	recorded := n.appliedFloor
	t := time.NewTicker(appliedFloorEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			recorded = n.recordAppliedFloor(recorded)
		case <-n.stop:
			n.recordAppliedFloor(recorded)
			return
		}
	}
}

// recordAppliedFloor writes the applied index as the floor if it is past recorded, and returns
// the floor recorded now. Never while the raft log's disk has a fault (failed or full): pebble
// ends the process on a write it cannot make, and a node with a disk fault stays up to say so
// (docs/disk-faults.md); the store probe of /readyz keeps the same rule. A write that fails
// otherwise is logged and tried again at the next tick. The floor only ever lags, which costs
// replayed messages, never lost ones.
func (n *Replica) recordAppliedFloor(recorded uint64) uint64 {
	applied := n.raft.AppliedIndex()
	if applied <= recorded || n.DiskFault() != nil {
		return recorded
	}
	if err := n.stable.SetUint64(appliedFloorKey, applied); err != nil {
		n.log.Debug("recording the applied floor failed", "err", err)
		return recorded
	}
	return applied
}
