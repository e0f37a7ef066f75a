package raftnode

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/store"
)

type counters struct {
	proposals       atomic.Uint64
	failedProposals atomic.Uint64
	abortedEntries  atomic.Uint64
	reads           atomic.Uint64
	verifyRounds    atomic.Uint64
	expired         atomic.Uint64
	ghostReleases   atomic.Uint64
}

// storeReporter is the figures a production store (store.Store) reports; raft's in-memory
// stores in tests report none.
type storeReporter interface{ Stats() store.Stats }

// Stats returns the node's current figures.
func (n *Node) Stats() node.Stats {
	addr, id := n.raft.LeaderWithID()
	s := node.Stats{
		ID:            n.cfg.ID,
		ClusterID:     n.ClusterID(),
		LogFormat:     int(n.format.Load()),
		LogFormatMax:  int(LogFormatMax),
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
		Aborted:       n.stats.abortedEntries.Load(),
		Reads:         n.stats.reads.Load(),
		VerifyRounds:  n.stats.verifyRounds.Load(),
		Expired:       n.stats.expired.Load(),
		GhostReleases: n.stats.ghostReleases.Load(),
		MemberHints:   int(n.hints.Load()),
	}
	switch last := n.raft.LastContact(); {
	case s.State == "Leader":
	case last.IsZero():
		s.LastContact = -1
	default:
		s.LastContact = time.Since(last)
	}
	if s.State == "Leader" {
		if c, err := n.configuration(); err == nil {
			_, s.ReachableVoters = n.voterCount(c, "")
		}
	}
	if v, err := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64); err == nil {
		s.LastSnapshot = v
	}
	if r, ok := n.logs.(storeReporter); ok {
		ss := r.Stats()
		s.Store = node.StoreStats{FirstIndex: ss.FirstIndex, LastIndex: ss.LastIndex, Snapshots: ss.Snapshots}
	}
	n.mu.Lock()
	s.Locks = n.mu.machine.Len()
	s.Leases = len(n.mu.leases.deadline)
	for db := range s.DBKeys {
		s.DBKeys[db] = n.mu.machine.LenDB(db)
		s.DBLeases[db] = n.mu.leases.perDB[db]
	}
	s.PendingKeys = len(n.mu.pending)
	n.mu.Unlock()
	return s
}

// Keys is the number of keys in the applied table, without taking the view lock: every write
// command of the server asks it (its key bound).
func (n *Node) Keys() int { return int(n.keys.Load()) }

// healthKey is the stable-store key ProbeStore writes.
const healthKey = "raftlock/health-probe"

// ProbeStore checks that this node's store takes a durable write: it writes the time to a key of
// its own in the stable store (one synced batch) and reads it back. /readyz asks it.
func (n *Node) ProbeStore() error {
	want := uint64(time.Now().UnixNano())
	if err := n.stable.SetUint64([]byte(healthKey), want); err != nil {
		return err
	}
	got, err := n.stable.GetUint64([]byte(healthKey))
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("store probe read back %d, wrote %d", got, want)
	}
	return nil
}
