package server

import (
	"context"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Replica is what requests need from the replicated lock table and its cluster. The server owns
// this interface; raftnode.Replica satisfies it without knowing.
type Replica interface {
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
	// possibly stale, for READONLY connections on followers and the server's own reads of the
	// replicated state (scripts, ACL users).
	ExecLocal(eval func(node.View))
	// IsLeader reports whether this node is the leader, ready to serve.
	IsLeader() bool
	// Leadership is the leader this node knows of and where it serves clients, with a channel
	// closed at its next change: a request that finds no leader waits on it.
	Leadership() node.Leadership
	// Watch registers the hooks told of what each applied batch did (node.Watchers),
	// replacing those registered before: invalidations, LOCK ... WAIT wake-ups, subscribers'
	// messages, keyspace events and ACL reloads come from them.
	Watch(w node.Watchers)
	// Stats is the node's current figures, for INFO.
	Stats() node.Stats
	// Keys is the number of keys in this node's table, cheaply (every write command asks).
	Keys() int
	// LogEnd is where this node's log ends now, applied or not: a SUBSCRIBE that reads it does
	// not hear the messages of the entries the log held (node.LogEnd.Holds), which were
	// published before it.
	LogEnd() node.LogEnd
}

// SlotOwnership is what a group's Replica says of the hash slots it owns, when slots can move
// between groups (fsm/slotmoves.go): its ownership as this node applied it, cheaply (routing
// asks for every request of a several-group cluster). raftnode.Replica has it; a Replica
// without it owns its default ranges.
type SlotOwnership interface {
	Slots() fsm.Slots
}

// Admin is cluster administration (RAFT ...): the cluster's configuration, read (also for the
// topology CLUSTER shows) and changed, its snapshots, digests and backups. A server without
// one refuses those commands and shows no topology.
type Admin interface {
	// Members lists the cluster with client addresses.
	Members() ([]node.Member, error)
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
	// PlanGroups commits, on group 0's leader, a plan to run want.Groups raft groups created
	// with want.Layout, its voters the current ones (RAFT GROUPS); running is how many groups
	// this node runs. It returns the plan committed.
	PlanGroups(ctx context.Context, want fsm.GroupsPlan, running int) (fsm.GroupsPlan, error)
}

// GroupsPlanner is group 0's replica's view of the cluster's groups plan (fsm.GroupsPlan), for
// INFO: a replica that is not one shows none.
type GroupsPlanner interface {
	GroupsPlan() (fsm.GroupsPlan, bool)
}

// Deps are what a server serves through. Replica is required; Admin and Disk may be nil.
// Groups, for a cluster of several raft groups (groups.go), is this node's replica of each
// group, index = group, Groups[0] being Replica; nil (or one) for a cluster of one group. Disk
// is the node's disk: with several groups, the fault any group's log met (their logs share it;
// cmd/raftlock gives every group's replica that node-wide health).
//
// GroupAdmins, with Groups, is this node's administration of each raft group (index = group;
// group 0's is Admin, whatever GroupAdmins[0] is): RAFT READINDEX g answers for group g from it.
//
// Mover, with Groups, moves hash slots between them (RAFT MOVESLOTS); nil refuses moves.
type Deps struct {
	Replica     Replica
	Admin       Admin
	Disk        Disk
	Groups      []Replica
	GroupAdmins []Admin
	Mover       SlotMover
	// Layout is the number of raft groups the cluster was created with, when it runs more
	// (docs/groups.md, "From one group to several"): the groups from Layout on own no slot
	// until one moves to them. 0 means len(Groups).
	Layout int
}

// MaxGroups bounds the raft groups a cluster runs (raftlock --groups, RAFT GROUPS): each costs
// every node a raft instance, its log files and its share of the status; DESIGN.md §13 keeps G
// to tens.
const MaxGroups = 256

// SlotMover moves hash slots from one raft group to another while clients run (docs/groups.md,
// "Moving slots"): on the node that leads the source group, it freezes the range there, imports
// it into the target group, and releases it in the source, or undoes the move. It returns how
// many keys moved (hidden keys of the lock kinds and queues included).
type SlotMover interface {
	MoveSlots(ctx context.Context, source, first, last, target int) (keys int, err error)
}
