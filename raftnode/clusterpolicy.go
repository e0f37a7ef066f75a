package raftnode

import (
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
)

// ClusterPolicy is cluster management's seam with the core (package cluster implements it).
// The core calls Configured, Changed and Restored on raft's FSM goroutine, after the view lock
// is released, for what membership watches in the replicated state: committed configurations,
// the member table, the cluster ID and the log format; Ready once this node became the ready
// leader; Stats from Replica.Stats. No method holds a lock of the core's, calls into the core or
// waits on the network: they note (the cluster ID is written to the stable store), signal, and
// leave the rest to cluster's own goroutine. Raft may call the FSM's hooks inside raft.NewRaft,
// before New returns.
type ClusterPolicy interface {
	// Configured is told each committed configuration raft hands the FSM, in log order.
	Configured(index uint64, c raft.Configuration)
	// Changed is told that an applied batch changed the member table or the table's log
	// format; clusterID is the table's cluster ID when the member table changed ("" otherwise,
	// or while it has none).
	Changed(clusterID string)
	// Restored is told that a snapshot replaced the table; clusterID is its cluster ID. raft
	// restores the snapshot's configuration itself and never hands it to Configured.
	Restored(clusterID string)
	// Ready is told that this node became the ready leader.
	Ready()
	// Stats fills in the figures that are cluster facts: ClusterID when the table has none
	// yet (the identity's), MemberHints, ReachableVoters, RaftInsecure.
	Stats(s *node.Stats)
	// ShutdownStalled is told that raft's shutdown has waited after for its replication
	// goroutines, which may be blocked writing to peers that read nothing: the transport's owner
	// may cut its connections.
	ShutdownStalled(after time.Duration)
}

// noCluster is the ClusterPolicy of a core that nothing manages (Config.Cluster nil).
type noCluster struct{}

func (noCluster) Configured(uint64, raft.Configuration) {}
func (noCluster) Changed(string)                        {}
func (noCluster) Restored(string)                       {}
func (noCluster) Ready()                                {}
func (noCluster) Stats(*node.Stats)                     {}
func (noCluster) ShutdownStalled(time.Duration)         {}
