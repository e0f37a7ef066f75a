package raftnode

import (
	"context"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// LockPolicy is the lock rules' seam with the core (package locks implements it). The core calls
// it where locks need it: at apply to arm lease timers and note keys left free, at proposal to
// add hand-off grants to an entry, on leadership gained and lost, and for a request whose client
// hung up. The methods called under the view lock (Applied, Changed, Restored, Handoffs, Demote)
// must be quick, must not block, and must not call the core.
type LockPolicy interface {
	// Start hands the policy the replica it proposes through, before raft applies anything;
	// Close stops it, once raft has stopped.
	Start(r node.Replica)
	Close()
	// Applied is told, under the view lock, each applied command's result on key, in the entry
	// at index, with m the table it applied to.
	Applied(m *fsm.Machine, key []byte, index uint64, res fsm.Result)
	// Changed is told, under the view lock, the keys whose lock an applied batch changed (nil
	// and flushed set after a FLUSHDB or FLUSHALL: any key).
	Changed(m *fsm.Machine, keys [][]byte, flushed bool)
	// Restored is told, under the view lock, that a snapshot replaced the table with m.
	Restored(m *fsm.Machine)
	// Handoffs is asked, under the view lock, as a request's cmds are proposed in log format
	// format, for the commands to propose instead: cmds with hand-off grants after them. answer,
	// when not nil, is called once with the entry's results or error. inFlight says whether a
	// key has proposals in flight.
	Handoffs(m *fsm.Machine, inFlight func(key []byte) bool, cmds []fsm.Command, format byte) (out []fsm.Command, answer func([]fsm.Result, error))
	// Promote is told, under the view lock, that this node became a ready leader; Demote that it
	// is not one any more, with the error its waiting requests get.
	Promote()
	Demote(err error)
	// ReleaseAbandoned is told the applied results of a request, run with ctx: it releases
	// what they granted a client that is gone by then (ghost-lock cleanup).
	ReleaseAbandoned(ctx context.Context, cmds []fsm.Command, results []fsm.Result)
	// Stats is how many leases ended through committed Expires, how many ghost locks were
	// released, and how many waiters were granted a lock by a hand-off, in this process.
	Stats() (expired, ghostReleases, handoffs uint64)
}
