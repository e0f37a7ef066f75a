package node

import "time"

// Stats is a point-in-time summary of a node, for INFO, RAFT STATS and metrics.
type Stats struct {
	ID        string
	ClusterID string // empty until the first leader named the cluster
	// LogFormat is the cluster's log format as this node has applied it; LogFormatMax the
	// newest this binary reads (fsm/format.go: they differ during a rolling upgrade).
	LogFormat, LogFormatMax int
	State                   string // Leader, Follower, Candidate, Shutdown
	Ready                   bool   // leader and caught up: serving
	LeaderID                string
	LeaderAddr              string // raft address
	Term                    uint64
	LastIndex               uint64
	CommitIndex             uint64
	AppliedIndex            uint64
	// LastContact is how long ago this node last heard from a leader: 0 on the leader, -1 when
	// it never has (since its start).
	LastContact  time.Duration
	LastSnapshot uint64
	Voters       int
	// ReachableVoters is, on the leader, how many voters (itself included) its heartbeats
	// reach: what membership changes are checked against. 0 on other nodes.
	ReachableVoters int
	Locks           int
	Leases          int
	PendingKeys     int
	Proposals       uint64 // log entries proposed: one per request that wrote, whatever its commands
	FailedProps     uint64 // proposals that did not commit, or may not have
	Aborted         uint64 // entries of several commands that applied as nothing: a guard failed
	Reads           uint64
	VerifyRounds    uint64
	Expired         uint64
	GhostReleases   uint64
	MemberHints     int // members' client addresses kept for asking them after a restart
	// DBKeys and DBLeases are Locks and Leases per database (fsm.Databases of them).
	DBKeys   [16]int
	DBLeases [16]int
	Store    StoreStats
}

// StoreStats is the raft log and snapshot store's part of Stats.
type StoreStats struct {
	FirstIndex uint64
	LastIndex  uint64
	Snapshots  int
}
