package server

import (
	"context"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Node is what requests need from the replicated lock table and its cluster. The server owns
// this interface; raftnode.Node satisfies it without knowing.
type Node interface {
	// Exec evaluates a request against the leader's view of keys and replicates the commands
	// eval returns, giving back their applied results in order. eval runs under the view lock,
	// may run more than once, and must not block. With no commands, Exec confirms leadership.
	// around, when not nil, is called with the wait for the outcome once the request's commands
	// are queued in raft: a pipelining connection proposes its next command meanwhile.
	Exec(ctx context.Context, keys [][]byte, eval node.Eval, around func(wait func())) ([]fsm.Result, error)
	// ProposeAll is Exec's first half for each of reqs, in order: it evaluates each request
	// and queues what it yields, filling in its Pending (whose Wait, which must be called,
	// gives what Exec would have) or its error, and returns without waiting for any commit. A
	// pipelining connection proposes its lock commands with it, several at a time, on its own
	// goroutine, and collects their outcomes in order (stage.go).
	ProposeAll(ctx context.Context, reqs []node.Proposal)
	// ExecLocal evaluates a read against this node's applied table, with no leadership check:
	// possibly stale, for READONLY connections on followers.
	ExecLocal(eval func(node.View))
	// IsLeader reports whether this node is the leader, ready to serve.
	IsLeader() bool
	// LeaderClient returns the leader's ID and client address, empty when unknown.
	LeaderClient() (id, clientAddr string)
	// LeaderChanged returns a channel closed at the next change of the leader, of this node's
	// readiness, or of the member table: a request that finds no leader waits on it.
	LeaderChanged() <-chan struct{}
	// Members lists the cluster with client addresses.
	Members() ([]node.Member, error)
	// OnChange registers the hook told of the keys each applied batch changed (nil keys: any
	// may have). It runs after the apply released the view lock and before the batch's
	// requests hear back, and must not block. Invalidations and LOCK ... WAIT wake-ups come
	// from it.
	OnChange(fn func(keys [][]byte))
	// OnPublish registers the hook that delivers each applied message (PUBLISH, SPUBLISH:
	// shard) to this node's subscribers and says how many got it. It runs where OnChange's
	// hook does, after it, in log order, and must not block.
	OnPublish(fn func(channel, message []byte, shard bool) int)
	// OnKeyEvent registers the hook told of each key an applied entry deleted or expired
	// (keyspace notifications); nil unregisters it (the node then records no events). It runs
	// where OnPublish's does, in log order with the messages, and must not block.
	OnKeyEvent(fn func(key []byte, ev node.KeyEvent))
	// OnRestore registers the hook told that a snapshot replaced the node's table: the
	// messages of the entries it covers are never delivered on this node.
	OnRestore(fn func())
	// OnUsers registers the hook told that the replicated ACL users changed (an ACL SETUSER or
	// DELUSER applied, a snapshot restored). It runs where OnChange's does, before the batch's
	// requests hear back, and must not block; the server reads them again with Users.
	OnUsers(fn func())
	// Users returns a copy of the replicated ACL users: name -> canonical rules, "" for a
	// deleted user.
	Users() map[string]string
	// Stats is the node's current figures, for INFO.
	Stats() node.Stats
	// Keys is the number of keys in this node's table, cheaply (every write command asks).
	Keys() int
}

// Admin is what cluster administration (RAFT ...) needs beyond requests. A server without one
// refuses those commands.
type Admin interface {
	// AddServer, Promote, RemoveServer and Transfer change the raft configuration and its
	// leadership (RemoveServer of a voter the leader reaches only with force); SetMemberAddr
	// records a member's client address through the log.
	AddServer(ctx context.Context, id, raftAddr, clientAddr string, voter bool) (uint64, error)
	Promote(ctx context.Context, id string) error
	RemoveServer(ctx context.Context, id string, force bool) error
	Transfer(id string) error
	SetMemberAddr(ctx context.Context, id, addr string) error
	// Announce records a member's client address for that member (RAFT ANNOUNCE): only for a
	// member of the committed configuration under its own raft address.
	Announce(ctx context.Context, id, clientAddr, raftAddr string) error
	// Snapshot takes a raft snapshot now; Digest summarizes this node's applied table.
	Snapshot() error
	Digest() (applied uint64, sum string)
	// Membership says whether id is in the newest configuration this node knows to be
	// committed (RAFT MEMBER).
	Membership(id string) node.Membership
	// Backup returns a backup file of the whole replicated state, holding every write
	// acknowledged before the call (RAFT BACKUP); ReadIndex, on the leader, the index a node
	// must have applied to hold them (RAFT READINDEX, a follower's first step of a backup).
	Backup(ctx context.Context) ([]byte, error)
	ReadIndex(ctx context.Context) (uint64, error)
}
