package raftnode

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// checkLogContinuity refuses stores whose log does not continue from the newest snapshot: the
// entries between them are gone (a disk that dropped a sync, or a log and a snapshot store
// restored from different moments). raft.NewRaft would panic reading them; a node must instead
// refuse to start with an error that names the gap, and be recovered from its peers.
func checkLogContinuity(st Stores) error {
	last, err := st.Log.LastIndex()
	if err != nil {
		return fmt.Errorf("read the log's last index: %w", err)
	}
	if last == 0 {
		return nil
	}
	first, err := st.Log.FirstIndex()
	if err != nil {
		return fmt.Errorf("read the log's first index: %w", err)
	}
	metas, err := st.Snapshots.List()
	if err != nil {
		return fmt.Errorf("list the snapshots: %w", err)
	}
	var snap uint64
	if len(metas) > 0 {
		snap = metas[0].Index // raft's SnapshotStore lists the newest first
	}
	if first > snap+1 {
		return fmt.Errorf("the log holds entries %d-%d but the newest snapshot ends at %d: entries %d-%d are missing from this node's disk; start it empty and let it catch up (docs/disk-faults.md, \"A failed disk\")",
			first, last, snap, snap+1, first-1)
	}
	return nil
}

// startRaft is raft.NewRaft with its panics at start turned into errors. NewRaft panics when an
// entry after the snapshot it restored cannot be read (a hole checkLogContinuity cannot see
// without reading every entry, or a newest snapshot that failed to open so that an older one was
// restored); it does so before it starts any goroutine, so the half-made raft holds nothing to
// stop and the node can refuse to start as for any other store fault.
func startRaft(conf *raft.Config, fsm raft.FSM, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("raft could not read its stores at start: %v", p)
		}
	}()
	return raft.NewRaft(conf, fsm, logs, stable, snaps, trans)
}
