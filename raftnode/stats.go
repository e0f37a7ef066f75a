package raftnode

import (
	"strconv"
	"sync/atomic"
)

type counters struct {
	proposals       atomic.Uint64
	failedProposals atomic.Uint64
	reads           atomic.Uint64
	verifyRounds    atomic.Uint64
	expired         atomic.Uint64
	ghostReleases   atomic.Uint64
}

// Stats is a point-in-time summary of a node, for INFO and metrics.
type Stats struct {
	ID            string
	State         string // Leader, Follower, Candidate, Shutdown
	Ready         bool   // leader and caught up: serving
	LeaderID      string
	LeaderAddr    string
	Term          uint64
	LastIndex     uint64
	CommitIndex   uint64
	AppliedIndex  uint64
	LastSnapshot  uint64
	Voters        int
	Locks         int
	Leases        int
	PendingKeys   int
	Proposals     uint64
	FailedProps   uint64
	Reads         uint64
	VerifyRounds  uint64
	Expired       uint64
	GhostReleases uint64
}

// Stats returns the node's current figures.
func (n *Node) Stats() Stats {
	addr, id := n.raft.LeaderWithID()
	s := Stats{
		ID:            n.cfg.ID,
		State:         n.raft.State().String(),
		Ready:         n.ready.Load(),
		LeaderID:      string(id),
		LeaderAddr:    string(addr),
		Term:          n.raft.CurrentTerm(),
		LastIndex:     n.raft.LastIndex(),
		CommitIndex:   n.raft.CommitIndex(),
		AppliedIndex:  n.raft.AppliedIndex(),
		Voters:        n.voters(),
		Proposals:     n.stats.proposals.Load(),
		FailedProps:   n.stats.failedProposals.Load(),
		Reads:         n.stats.reads.Load(),
		VerifyRounds:  n.stats.verifyRounds.Load(),
		Expired:       n.stats.expired.Load(),
		GhostReleases: n.stats.ghostReleases.Load(),
	}
	if v, err := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64); err == nil {
		s.LastSnapshot = v
	}
	n.mu.Lock()
	s.Locks = n.machine.Len()
	s.Leases = len(n.leases.deadline)
	s.PendingKeys = len(n.pending)
	n.mu.Unlock()
	return s
}
