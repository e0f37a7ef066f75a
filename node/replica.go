package node

import (
	"context"

	"github.com/raftlock/raftlock/fsm"
)

// Replica is what a policy plugged into the replication core (the lock rules, package locks)
// proposes and asks through. raftnode.Replica implements it; the policy holds it as this interface
// so that it needs nothing of raftnode, and raftnode's own tests can run it.
type Replica interface {
	// Exec evaluates a request on the leader and replicates what eval yields, as the server's
	// requests do (raftnode.Replica.Exec).
	Exec(ctx context.Context, keys [][]byte, eval Eval, around func(wait func())) ([]fsm.Result, error)
	// Propose is Exec's first half: it evaluates the request and queues what it yields. A
	// request that yielded commands must be waited for (Pending.Wait); one that yielded none
	// holds no entry.
	Propose(ctx context.Context, keys [][]byte, eval Eval) (Pending, error)
	// VerifyLeader confirms, through a quorum, that this node still leads.
	VerifyLeader(ctx context.Context) error
	// NotLeader is the error a request gets while this node is not a ready leader: it names the
	// leader it knows of.
	NotLeader() error
	// LeaseNow is now on the clock of the applied table's lease deadlines (fsm.Lock.Deadline),
	// as this node's clock reads it.
	LeaseNow() int64
}
