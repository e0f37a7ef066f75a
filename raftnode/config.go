// Package raftnode is the replication core of one raft group. It owns one *raft.Raft and does:
//   - proposals: requests evaluated against the leader's view of the table (applied state plus
//     pending proposals, DESIGN.md §4), their pending marks, and the group commit (exec.go,
//     groupcommit.go);
//   - linearizable reads (batched VerifyLeader, the barrier after each election);
//   - the log cache and the log-format gate (logcache.go, format.go);
//   - apply: the FSM, with the hooks of the lock policy (LockPolicy, package locks) and of
//     cluster management (ClusterPolicy, package cluster).
//
// It holds nothing that belongs to the whole process: no listener, no transport it closes, no
// peer client, no membership policy; package cluster starts it, bootstraps it, changes its
// configuration and closes it. Members and LeaderClient stay here because they are reads of
// replicated state (raft's configuration and the applied member table) that the server asks on
// every request it forwards, not decisions.
//
// Every change reaches the log through propose (exec.go): client requests, the lock policy's
// ghost-lock releases, lease expiries and hand-offs, and member addresses alike.
//
// Locks: Replica.mu guards the view (the applied table and the pending keys). Only evaluation runs
// under it: a request's node.Eval (the server's scripts included, which may take the server's
// tracker lock: Replica.mu comes first), raft's apply of a batch, and the lock policy's hooks
// (whose own mutex nests inside it). Nothing under it calls into raft
// (Apply, VerifyLeader, Barrier, GetConfiguration take raft's own locks and wait on raft's
// goroutines, which take Replica.mu to apply: a deadlock), logs on the hot path, or blocks. goMu
// only orders goroutine starts against Close and nests inside nothing.
package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// Config configures a Replica. A zero field means the documented default.
type Config struct {
	// ID is this node's raft server ID. Required.
	ID string
	// Group and Groups say which raft group of how many this replica serves (docs/groups.md),
	// and Layout how many groups the cluster was created with (0: Groups): what hash slots its
	// table owns before any move (fsm.Machine.SetGroup). Zero values: the one group of a
	// cluster that has one.
	Group, Groups, Layout int
	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout tune failure detection. The
	// defaults suit a LAN: a dead leader is replaced in about a second.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is how often the leader sends each follower an append even when there is
	// nothing new, so an idle follower learns the commit index and applies. Under load new
	// entries carry it sooner. Raft's default is 50 ms; 25 ms keeps followers' tables (READONLY
	// reads, lease timers armed at apply) close behind, and no shorter: every tick costs an
	// idle leader an append to each follower (docs/performance.md has the CPU it takes).
	CommitTimeout time.Duration
	// MaxAppendEntries caps how many entries go in one append and one fsync.
	MaxAppendEntries int
	// NoGroupCommit turns group commit off (groupcommit.go): one log entry per request, as a
	// cluster still in an older log format writes. For comparisons.
	NoGroupCommit bool
	// SnapshotThreshold is how many new log entries trigger a snapshot; SnapshotInterval is how
	// often raft checks; TrailingLogs is how many entries stay behind a snapshot for slow
	// followers.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// ApplyTimeout bounds how long a proposal may wait to be enqueued into raft.
	ApplyTimeout time.Duration
	// Locks is the lock policy the core applies and proposes with (package locks). Required.
	Locks LockPolicy
	// Cluster is told what cluster management watches (package cluster sets it). nil: no one
	// is, as for a core that tests run on its own.
	Cluster ClusterPolicy
	// DiskFailed, when not nil, is told once that this core's raft stops for a failed disk
	// (disk.go), on raft's goroutine: it must not block. The other raft groups of the node,
	// whose logs share the disk, stop with it (StopForDiskFault).
	DiskFailed func(err error)
	// Now is the clock for lease timers. Tests inject skew and jumps through it. Default
	// time.Now.
	Now func() time.Time
	// Logger receives structured logs, raft's included. Default slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults for a node on a LAN.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		CommitTimeout:      25 * time.Millisecond,
		MaxAppendEntries:   512,
		SnapshotThreshold:  16384,
		SnapshotInterval:   10 * time.Second,
		TrailingLogs:       10240,
		ApplyTimeout:       5 * time.Second,
		Now:                time.Now,
		Logger:             slog.Default(),
	}
}

// withDefaults fills the zero fields of c from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = d.HeartbeatTimeout
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = d.ElectionTimeout
	}
	if c.LeaderLeaseTimeout == 0 {
		c.LeaderLeaseTimeout = d.LeaderLeaseTimeout
	}
	if c.CommitTimeout == 0 {
		c.CommitTimeout = d.CommitTimeout
	}
	if c.MaxAppendEntries == 0 {
		c.MaxAppendEntries = d.MaxAppendEntries
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = d.SnapshotInterval
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = d.TrailingLogs
	}
	if c.ApplyTimeout == 0 {
		c.ApplyTimeout = d.ApplyTimeout
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	return c
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	if c.ID == "" {
		return errors.New("raftnode: Config.ID is required")
	}
	if !fsm.ValidNodeID(c.ID) {
		return fmt.Errorf("raftnode: Config.ID %q: want 1 to 128 printable characters without spaces", c.ID)
	}
	if c.MaxAppendEntries < 0 || c.MaxAppendEntries > 1024 {
		return fmt.Errorf("raftnode: Config.MaxAppendEntries %d out of range 1..1024", c.MaxAppendEntries)
	}
	if c.Locks == nil {
		return errors.New("raftnode: Config.Locks is required (locks.New)")
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout && c.HeartbeatTimeout != 0 {
		return errors.New("raftnode: Config.LeaderLeaseTimeout must not exceed HeartbeatTimeout")
	}
	return nil
}

// RaftConfig maps c onto hashicorp/raft's config. Offline recovery (package cluster) runs
// raft's RecoverCluster with it, so that it rewrites the stores as this core would read them.
func (c Config) RaftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.MaxAppendEntries = c.MaxAppendEntries
	// BatchApplyCh: raft's apply channel holds MaxAppendEntries proposals, and the leader loop
	// takes every one waiting into one append and one fsync. The group commit's next batch is
	// put there from the leader loop itself, as soon as the batch before it is written
	// (groupcommit.go): the channel must not be unbuffered.
	rc.BatchApplyCh = true
	// A leader that removes itself must not stop raft on its own: raft never answers the
	// proposals and leadership checks still queued when it shuts down, so requests (and Close)
	// would wait for ever. It steps down and keeps running as a follower, which answers them
	// "not leader"; StoreConfiguration then sees the committed configuration without this
	// node, and the node shuts down in order.
	rc.ShutdownOnRemove = false
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	rc.Logger = newHCLogger(c.Logger.With("component", "raft"))
	return rc
}
