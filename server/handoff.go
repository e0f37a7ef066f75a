package server

// LOCK ... WAIT on a node that queues waiters fairly (issue #15 item 3): the leader keeps one
// FIFO per key and the entry that frees the key grants it to the queue's head (raftnode's
// handoff.go). A follower forwards the whole LOCK ... WAIT to the leader (it is not a blocking
// command to dispatch), so the queue lives on the leader only.

import (
	"context"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
)

// queueNode is the part of a Node that queues LOCK ... WAIT (raftnode.Node has it). A node
// without it is served the old way: every change of the key wakes its waiters to try again.
type queueNode interface {
	// LockWait tries eval (one LOCK attempt) and, on a refusal, queues the request on key with
	// grant as its hand-off command, for up to wait. It returns the results of eval's commands
	// or of the grant, or none (and no error) when wait passed.
	LockWait(ctx context.Context, key []byte, eval node.Eval, grant fsm.Command, wait time.Duration) ([]fsm.Result, error)
	// LockWaiters is how many requests are queued on the node now.
	LockWaiters() int
}

// lockWaiters is INFO's lock_waiters: the LOCK ... WAITs queued on this node (a leader's
// include those forwarded by followers); 0 on a node without queues.
func (s *Server) lockWaiters() int {
	if q, ok := s.node.(queueNode); ok {
		return q.LockWaiters()
	}
	return 0
}

// lockQueued runs LOCK key ttl [OWNER id] WAIT ms on a queueing node. The waiters' bounds
// (Config.MaxWaitersPerKey, MaxWaiters) count it while it waits: past one, it tries once and
// is refused with the bound's error.
func (r *request) lockQueued(q queueNode, key, owner []byte, ttl uint64, explicit bool, wait time.Duration) {
	done, full := r.s.waiters.reserve(key)
	if full != nil {
		token, granted, err := r.tryLock(key, owner, ttl, explicit)
		switch {
		case err != nil:
			r.replyError(err)
		case granted:
			r.w.Int(int64(token))
		default:
			r.replyError(full)
		}
		return
	}
	res, err := q.LockWait(r.c.ctx, key, locks.LockEval(key, owner, ttl, explicit), locks.Acquire(key, owner, ttl), wait)
	done()
	if err != nil {
		if r.c.ctx.Err() == nil {
			r.replyError(err)
		}
		return
	}
	if token, granted := r.lockResult(key, res); granted {
		r.w.Int(int64(token))
		return
	}
	r.w.Null()
}
