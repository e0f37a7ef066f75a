package main

import (
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/server"
	"github.com/raftlock/raftlock/store"
)

// The server declares what it needs of the node (server/replica.go) and raftnode satisfies it
// without knowing: these checks, where both are known, make a renamed or changed method a
// build error instead of a server quietly without it.
var (
	_ server.Replica = (*raftnode.Replica)(nil)
	_ server.Admin   = (*cluster.Member)(nil)
	_ server.Disk    = (*raftnode.Replica)(nil)
	// Slots move between groups only if the server sees each group's ownership.
	_ server.SlotOwnership = (*raftnode.Replica)(nil)
	_ server.SlotOwnership = (*addressedReplica)(nil)
	_ server.SlotMover     = (*cluster.SlotMover)(nil)
	// The store's disk errors reach the server's reply table through raftnode, which passes
	// them on unchanged: a MISCONF reply needs them to keep this method.
	_ node.DiskFault = (*store.DiskError)(nil)
	// The core's seam with the lock rules (raftnode/policy.go); cluster checks its own.
	_ raftnode.LockPolicy = (*locks.Policy)(nil)
)
