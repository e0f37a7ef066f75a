package node

import (
	"time"

	"github.com/raftlock/raftlock/metrics"
)

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
	PendingKeys     int    // keys with a proposal in flight (two whose marks collide, 1 in 2^64, count once)
	Proposals       uint64 // log entries proposed: one per request that wrote, whatever its commands
	FailedProps     uint64 // proposals that did not commit, or may not have
	Aborted         uint64 // entries of several commands that applied as nothing: a guard failed
	StaleInstalls   uint64 // snapshot installs refused as older than the committed table
	Reads           uint64
	VerifyRounds    uint64
	Expired         uint64
	GhostReleases   uint64
	Handoffs        uint64 // LOCK, SEMACQUIRE and MLOCK waiters granted by a hand-off (leader)
	MemberHints     int    // members' client addresses kept for asking them after a restart
	// DBKeys and DBLeases are Locks and Leases per database (fsm.Databases of them).
	DBKeys   [16]int
	DBLeases [16]int
	Store    StoreStats
	// CommitLatency is, on the leader, from a request's entry handed to raft to its result
	// applied here; BatchSize is the entries of each batch this node applied; GroupSize, on
	// the leader, the requests of each group commit (one log entry) it sent.
	CommitLatency metrics.Snapshot
	BatchSize     metrics.Snapshot
	GroupSize     metrics.Snapshot
	// LeaderChanges counts the new leaders (or new terms of one) this node observed;
	// RecentLeaders is the last few observations, oldest first.
	LeaderChanges uint64
	RecentLeaders []LeaderChange
	// RaftInsecure: raft runs without mutual TLS on an address that is not loopback, as the
	// operator allowed (--insecure-raft).
	RaftInsecure bool
}

// StoreStats is the raft log and snapshot store's part of Stats.
type StoreStats struct {
	FirstIndex uint64
	LastIndex  uint64
	Snapshots  int
	// SyncLatency is the time of each synced write of raft's log (pebble commit and fsync).
	SyncLatency metrics.Snapshot
}

// LeaderChange is a change of leader this node observed: the leader from At on (empty: none
// known) and the term this node was in when it saw it.
type LeaderChange struct {
	At       time.Time
	LeaderID string
	Term     uint64
}

// MemberStatus is one member as the status page shows it: its configuration entry and the
// figures it reported when asked (its RAFT STATS; this node's own Stats for itself). Err says
// why it could not be asked; its figures are then zero.
type MemberStatus struct {
	Member
	State        string
	Term         uint64
	LastIndex    uint64
	CommitIndex  uint64
	AppliedIndex uint64
	Err          string
}

// ServerStats is the client face's figures (server.Server.ServerStats): INFO's counters, and
// the latency of each command family, refusals by reason and the most contended keys, for
// /metrics and the status page.
type ServerStats struct {
	Clients      int
	Blocked      int64 // blocking pops waiting now
	Connections  uint64
	Rejected     uint64 // connections turned away (maxclients, protected mode)
	Commands     uint64 // commands processed
	Errors       uint64 // error replies
	Grants       uint64 // LOCK / SET NX grants
	Refusals     uint64 // LOCK / SET NX that found the key held
	Releases     uint64
	AuthFailures uint64 // AUTH or HELLO ... AUTH with a wrong user or password
	// SlotReroutes counts requests run again because their hash slot moved to another raft
	// group while they ran (docs/groups.md).
	SlotReroutes uint64
	// Families is the latency of the commands of each family, in a fixed order; a command's
	// count is in its family's Latency.Count.
	Families []FamilyStats
	// Refused counts commands refused before they ran, by reason, in a fixed order.
	Refused []ReasonCount
	// DBWaiters is, per database, the requests waiting on its keys now (LOCK ... WAIT, BLPOP).
	DBWaiters [16]int
	// Contended is the keys most often refused (a LOCK or SET NX that found them held) over
	// ContendedWindow, most first, on this node (only the leader evaluates requests).
	Contended       []KeyCount
	ContendedWindow time.Duration
}

// FamilyStats is one command family's latency, from its arrival at dispatch to its reply.
type FamilyStats struct {
	Name    string
	Latency metrics.Snapshot
}

// ReasonCount is a count by reason.
type ReasonCount struct {
	Reason string
	Count  uint64
}

// KeyCount is a key and how often it was refused; Count may be over by up to Err (the sketch
// that finds the keys is approximate).
type KeyCount struct {
	DB    int
	Key   string
	Count uint64
	Err   uint64
}
