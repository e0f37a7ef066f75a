package raftnode

import (
	"context"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// lockQueue is the LOCK ... WAIT queue of a lock policy that has one (locks.Policy).
type lockQueue interface {
	LockWait(ctx context.Context, key []byte, eval node.Eval, grant fsm.Command, wait time.Duration) ([]fsm.Result, error)
	LockWaiters() int
}

// LockWait is the lock policy's LOCK ... WAIT, for the server until it holds the policy itself.
func (n *Node) LockWait(ctx context.Context, key []byte, eval node.Eval, grant fsm.Command, wait time.Duration) ([]fsm.Result, error) {
	return n.locks.(lockQueue).LockWait(ctx, key, eval, grant, wait)
}

// LockWaiters is the lock policy's count of queued LOCK ... WAITs.
func (n *Node) LockWaiters() int { return n.locks.(lockQueue).LockWaiters() }
