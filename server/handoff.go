package server

// LOCK ... WAIT: the leader keeps one FIFO per key and the entry that frees the key grants it to
// the queue's head (locks/handoff.go). A follower forwards the whole LOCK ... WAIT to the leader
// (it is not a blocking command to dispatch), so the queue lives on the leader only.

import (
	"time"

	"github.com/raftlock/raftlock/locks"
)

// lockWaiters is INFO's lock_waiters: the LOCK ... WAITs queued on this node (a leader's
// include those forwarded by followers); 0 on a server without a lock queue.
func (s *Server) lockWaiters() int {
	if s.queue == nil {
		return 0
	}
	return s.queue.LockWaiters()
}

// lockQueued runs LOCK key ttl [OWNER id] WAIT ms through the lock queue. The waiters' bounds
// (Config.MaxWaitersPerKey, MaxWaiters) count it while it waits: past one, it tries once and
// is refused with the bound's error. A server without a queue (Deps.Queue) refuses WAIT.
func (r *request) lockQueued(key, owner []byte, ttl uint64, explicit bool, wait time.Duration) {
	q := r.s.queue
	if q == nil {
		r.w.Error("ERR LOCK ... WAIT needs a lock queue, and this server has none")
		return
	}
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
