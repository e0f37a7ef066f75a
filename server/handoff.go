package server

// LOCK ... WAIT: the leader keeps one FIFO per key and the entry that frees the key grants it to
// the queue's head (locks/handoff.go). A follower forwards the whole LOCK ... WAIT to the leader
// (it is not a blocking command to dispatch), so the queue lives on the leader only.

import (
	"errors"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
)

// lockWaiters is INFO's lock_waiters: the LOCK ... WAITs queued on this node (a leader's
// include those forwarded by followers); 0 on a server without a lock queue.
func (s *Server) lockWaiters() int {
	if s.queue == nil {
		return 0
	}
	return s.queue.LockWaiters()
}

// lockQueued runs a LOCK, SEMACQUIRE or MLOCK with WAIT through the lock queue: a (one request
// per key in keys, grants their hand-off commands). The waiters' bounds
// (Config.MaxWaitersPerKey, MaxWaiters) count it on its first key while it waits: past one, it
// tries once and is refused with the bound's error. A server without a queue (Deps.Queue)
// refuses WAIT.
func (r *request) lockQueued(a lockRequest, wait time.Duration) {
	res, err := r.waitForLocks([]lockRequest{a}, wait)
	switch {
	case err != nil:
		r.replyError(err)
	case res == nil:
		r.w.Null()
	default:
		if token, granted := r.lockResult(a.Key, res); granted {
			r.w.Int(int64(token))
			return
		}
		r.w.Null()
	}
}

// waitForLocks takes every one of reqs (one key each) at once, waiting up to wait in the lock
// queue: the results of the grants, nil when refused (or the client left), or an error.
func (r *request) waitForLocks(reqs []lockRequest, wait time.Duration) ([]fsm.Result, error) {
	q := r.s.queue
	if q == nil {
		return nil, errors.New("LOCK ... WAIT needs a lock queue, and this server has none")
	}
	keys := make([][]byte, len(reqs))
	grants := make([]fsm.Command, len(reqs))
	for i, a := range reqs {
		keys[i], grants[i] = a.Key, a.Grant()
	}
	var refused error
	eval := locksEval(reqs, r.s.waiting(), &refused)
	done, full := r.s.waiters.reserve(keys[0])
	if full != nil {
		res, err := r.exec(keys, eval)
		switch {
		case err != nil:
			return nil, err
		case refused != nil:
			return nil, refused
		case len(res) == 0:
			return nil, full
		}
		return res, nil
	}
	if err := r.kindsMismatch(reqs); err != nil {
		done()
		return nil, err
	}
	res, err := q.LockWait(r.c.ctx, keys, eval, grants, wait)
	done()
	switch {
	case err != nil && r.c.ctx.Err() != nil:
		return nil, nil // the client is gone: nobody to answer
	case err != nil:
		return nil, err
	case len(res) == 0 && refused != nil:
		return nil, refused // (a hand-off may grant it after a refusal: its results then stand)
	}
	return res, nil
}

// kindsMismatch is the error for a semaphore asked for with another permit count than its key
// is held with now: it would wait in vain. (One that appears while it waits is answered by the
// hand-off.)
func (r *request) kindsMismatch(reqs []lockRequest) error {
	var err error
	r.s.node.ExecLocal(func(v node.View) {
		for _, a := range reqs {
			if !a.Shared && a.Permits == 0 {
				continue
			}
			if k, _ := v.Kinds(a.Key); k.Holders > 0 && k.Permits != a.Permits {
				err = &locks.PermitsError{Permits: k.Permits}
				return
			}
		}
	})
	return err
}
