package server

// LOCK ... WAIT on a node that queues waiters fairly (issue #15 item 3): the leader keeps one
// FIFO per key and the entry that frees the key grants it to the queue's head (raftnode's
// handoff.go). A follower forwards the whole LOCK ... WAIT to the leader (it is not a blocking
// command to dispatch), so the queue lives on the leader only.

import "time"

// lockWaiters is INFO's lock_waiters: the LOCK ... WAITs queued on this node (a leader's
// include those forwarded by followers); 0 on a node without queues.
func (s *Server) lockWaiters() int {
	if s.queue == nil {
		return 0
	}
	return s.queue.LockWaiters()
}

// lockQueued runs LOCK key ttl [OWNER id] WAIT ms on a queueing node. The waiters' bounds
// (Config.MaxWaitersPerKey, MaxWaiters) count it while it waits: past one, it tries once and
// is refused with the bound's error.
func (r *request) lockQueued(q LockQueue, key, owner []byte, ttl uint64, explicit bool, wait time.Duration) {
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
	res, err := q.LockWait(r.c.ctx, key, lockEval(key, owner, ttl, explicit), acquire(key, owner, ttl), wait)
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
