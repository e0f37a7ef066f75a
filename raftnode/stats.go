package raftnode

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/metrics"
	"github.com/raftlock/raftlock/node"
)

type counters struct {
	proposals       atomic.Uint64
	failedProposals atomic.Uint64
	abortedEntries  atomic.Uint64
	staleInstalls   atomic.Uint64 // snapshots Restore refused as older than the committed table
	reads           atomic.Uint64
	verifyRounds    atomic.Uint64
	// commit times a proposal from raft.Apply to its applied result; batch counts the entries
	// of each batch applied; group the requests of each group commit sent (init makes them).
	commit, batch, group *metrics.Histogram
	leaders              leaderLog
}

func (c *counters) init() {
	c.commit = metrics.NewHistogram(metrics.Latency)
	c.batch = metrics.NewHistogram(metrics.Sizes)
	c.group = metrics.NewHistogram(metrics.Sizes)
}

// leaderLogSize is how many leader changes leaderLog keeps.
const leaderLogSize = 16

// leaderLog counts the leader changes this node observes and keeps the last leaderLogSize.
type leaderLog struct {
	mu      sync.Mutex
	changes uint64 // a new leader, or a new term of the same one
	ring    [leaderLogSize]node.LeaderChange
	n       int // observations recorded in ring (total; the ring keeps the last)
	last    node.LeaderChange
}

// note records that raft reported leader id (empty: none) while this node was in term.
func (l *leaderLog) note(id string, term uint64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n > 0 && l.last.LeaderID == id && l.last.Term == term {
		return
	}
	if id != "" {
		l.changes++
	}
	l.last = node.LeaderChange{At: at, LeaderID: id, Term: term}
	l.ring[l.n%leaderLogSize] = l.last
	l.n++
}

// recent returns the count of changes and the kept observations, oldest first.
func (l *leaderLog) recent() (uint64, []node.LeaderChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]node.LeaderChange, 0, min(l.n, leaderLogSize))
	for i := max(0, l.n-leaderLogSize); i < l.n; i++ {
		out = append(out, l.ring[i%leaderLogSize])
	}
	return l.changes, out
}

// Stats returns the node's current figures.
func (n *Replica) Stats() node.Stats {
	addr, id := n.raft.LeaderWithID()
	expired, ghosts, handoffs := n.locks.Stats()
	s := node.Stats{
		ID:            n.cfg.ID,
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
		StaleInstalls: n.stats.staleInstalls.Load(),
		Reads:         n.stats.reads.Load(),
		VerifyRounds:  n.stats.verifyRounds.Load(),
		Expired:       expired,
		GhostReleases: ghosts,
		Handoffs:      handoffs,
		CommitLatency: n.stats.commit.Snapshot(),
		BatchSize:     n.stats.batch.Snapshot(),
		GroupSize:     n.stats.group.Snapshot(),
	}
	s.LeaderChanges, s.RecentLeaders = n.stats.leaders.recent()
	if n.raftStopped() {
		s.State = raft.Shutdown.String() // raft's own may read Follower (raftStopped)
	}
	switch last := n.raft.LastContact(); {
	case s.State == "Leader":
	case last.IsZero():
		s.LastContact = -1
	default:
		s.LastContact = time.Since(last)
	}
	if v, err := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64); err == nil {
		s.LastSnapshot = v
	}
	n.mu.Lock()
	s.Locks = n.mu.machine.Len()
	s.Leases = n.mu.machine.Leases()
	for db := range s.DBKeys {
		s.DBKeys[db] = n.mu.machine.LenDB(db)
		s.DBLeases[db] = n.mu.machine.LeasesDB(db)
	}
	s.PendingKeys = len(n.mu.pending)
	s.ClusterID = n.mu.machine.ClusterID()
	n.mu.Unlock()
	n.cluster.Stats(&s)
	return s
}

// Keys is the number of keys in the applied table, without taking the view lock: every write
// command of the server asks it (its key bound).
func (n *Replica) Keys() int { return int(n.keys.Load()) }
