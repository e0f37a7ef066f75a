package server

// LOCK ... WAIT (SEMACQUIRE, MLOCK): a request that cannot be granted at once joins its key's
// queue in the replicated table (fsm/queues.go; the leader serves the queues in order:
// locks/handoff.go), and its client waits on the node it is connected to, which answers it from
// the entries it applies: the Serve that grants it (its tokens), or its waiter's end without a
// grant (its wait expired: nil). A follower forwards the request to the leader, which waits for
// it; if the link to the leader breaks while it waits (the leader died), the follower finds its
// client's waiter in its own copy of the queue and goes on waiting for it there, at its place.

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
)

// waitGrace is how long past its WAIT a client waits for the committed end of its wait (its
// withdrawal, or the leader's expiry of its waiter) before it is told the outcome is unknown:
// only a cluster that cannot commit for that long keeps it waiting so.
const waitGrace = 10 * time.Second

// queueWaits are this node's clients waiting in a replicated queue, by their waiters' places,
// and the waiters' ends heard before their client noted its place (the Serve can apply before
// the requesting goroutine reads its Enqueue's result).
type queueWaits struct {
	// bySlot: the cluster runs several groups, whose waiters are placed by their keys' slot
	// (one slot per request there); with one group every waiter's slot is 0 (an MLOCK's keys
	// may be in different slots).
	bySlot bool
	mu     sync.Mutex
	bySeq  map[waitPlace]*queueWait
	early  map[waitPlace][]waitEnd
	order  []waitPlace // early's places, oldest first
}

// waitPlace is a waiter's place: its sequence number in the queues of its raft group, which
// numbers them with its own token counter (groups.go), and, with several groups, the hash slot
// of its keys (queueWaits.slotOf). The slot,
// not the group: a waiter keeps its place when its slot moves to another group (whose counter
// the move lifts above every place the source gave), and is served there.
type waitPlace struct {
	slot int
	seq  fsm.Token
}

// slotOf is the slot a waiter of key is placed by.
func (q *queueWaits) slotOf(key []byte) int {
	if !q.bySlot {
		return 0
	}
	return fsm.SlotOf(key)
}

// maxEarlyEnds bounds the ends kept for a client that has not noted its place yet.
const maxEarlyEnds = 4096

// queueWait is one client's wait: done once every key it waits for ended.
type queueWait struct {
	keys int
	ends []waitEnd
	done chan struct{}
	// reqs are what it asked for (its keys, its owner): what a snapshot install looks for.
	reqs []lockRequest
}

// waitEnd is a waiter's end on one key: its lock's token, 0 without a grant.
type waitEnd struct {
	key   []byte
	token fsm.Token
}

func newQueueWaits() *queueWaits {
	return &queueWaits{bySeq: map[waitPlace]*queueWait{}, early: map[waitPlace][]waitEnd{}}
}

// waited is a group's Waited hook: the apply path, so it must not block.
func (q *queueWaits) waited(seq fsm.Token, key []byte, token fsm.Token) {
	end := waitEnd{key: bytes.Clone(key), token: token}
	at := waitPlace{q.slotOf(key), seq}
	q.mu.Lock()
	defer q.mu.Unlock()
	if w := q.bySeq[at]; w != nil {
		w.add(end)
		return
	}
	if _, ok := q.early[at]; !ok {
		q.order = append(q.order, at)
		if len(q.order) > maxEarlyEnds {
			delete(q.early, q.order[0])
			q.order = q.order[1:]
		}
	}
	q.early[at] = append(q.early[at], end)
}

func (w *queueWait) add(e waitEnd) {
	if len(w.ends) == w.keys {
		return // ended already (a snapshot install's look came first)
	}
	w.ends = append(w.ends, e)
	if len(w.ends) == w.keys {
		close(w.done)
	}
}

// register notes a client waiting at place at for reqs' grants (one per key), with the ends
// heard already.
func (q *queueWaits) register(at waitPlace, reqs []lockRequest) *queueWait {
	w := &queueWait{keys: len(reqs), done: make(chan struct{}), reqs: reqs}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range q.early[at] {
		w.add(e)
	}
	delete(q.early, at)
	q.bySeq[at] = w
	return w
}

// restored looks again at every wait of a group (n, its replica) after a snapshot replaced its
// table: the entries it covers, which may have served a waiter or ended its wait, were never
// applied here. A wait (of a slot the group serves) whose waiter is gone ends: with the locks
// its owner holds (a Serve came), or with none.
func (q *queueWaits) restored(n Replica) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n.ExecLocal(func(v node.View) {
		slots := v.Slots()
		for at, w := range q.bySeq {
			if st := slots.Of(at.slot).State; q.bySlot && st != fsm.SlotOwned && st != fsm.SlotFrozen {
				continue
			}
			if _, _, queued := v.Lookup(fsm.WaiterKey(w.reqs[0].Key, at.seq)); queued {
				continue
			}
			_, served := findWaiter(v, w.reqs)
			for i, a := range w.reqs {
				end := waitEnd{key: a.Key}
				if served != nil {
					end.token = served[i].Token
				}
				w.add(end)
			}
		}
	})
}

// forget drops the client at place at.
func (q *queueWaits) forget(at waitPlace) {
	q.mu.Lock()
	delete(q.bySeq, at)
	q.mu.Unlock()
}

// waiting is how many of this node's clients wait in a queue (INFO's lock_waiters).
func (q *queueWaits) waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.bySeq)
}

// granted returns the tokens of a wait that ended with a grant, in the order of keys; ok is false
// when it ended without one.
func (w *queueWait) granted(keys [][]byte) ([]fsm.Token, bool) {
	out := make([]fsm.Token, len(keys))
	for i, k := range keys {
		for _, e := range w.ends {
			if bytes.Equal(e.key, k) && e.token != 0 {
				out[i] = e.token
			}
		}
		if out[i] == 0 {
			return nil, false
		}
	}
	return out, true
}

// lockWaiters is INFO's lock_waiters: this node's clients waiting in a lock queue.
func (s *Server) lockWaiters() int { return s.queueWaits.waiting() }

// lockQueued runs a LOCK or SEMACQUIRE with WAIT: one attempt, or a wait in the key's queue.
func (r *request) lockQueued(a lockRequest, wait time.Duration) {
	res, err := r.waitForLocks([]lockRequest{a}, wait)
	switch {
	case err != nil:
		r.replyError(err)
	case res == nil:
		r.s.stats.refusals.Add(1)
		r.w.Null()
	default:
		if token, granted := r.lockResult(a.Key, res); granted {
			r.w.Int(int64(token))
			return
		}
		r.w.Null()
	}
}

// errNeedsQueues says a wait cannot queue: some member is older than the queues' log format.
var errNeedsQueues = errors.New("the lock queues need every member on v0.4.0 or newer (log format 6)")

// maxPollGap bounds the gap between two attempts of a wait that cannot queue (pollForLocks).
const maxPollGap = 100 * time.Millisecond

// waitForLocks takes every one of reqs (one key each; several: an MLOCK's) at once, waiting up to
// wait in their keys' queues: the grants' results (granted, or a same-owner renewal), nil when
// refused (its wait ended, or the client left), or an error. The waiters' bounds
// (Config.MaxWaitersPerKey, MaxWaiters) count it on its first key while it waits: past one, it
// tries once and is refused with the bound's error.
func (r *request) waitForLocks(reqs []lockRequest, wait time.Duration) ([]fsm.Result, error) {
	keys := keysOf(reqs)
	plain := make([]locks.Request, len(reqs))
	for i, a := range reqs {
		plain[i] = a.Request
	}
	done, full := r.s.waiters.reserve(keys[0])
	if full != nil {
		res, err := r.tryLocks(keys, reqs)
		switch {
		case err != nil:
			return nil, err
		case len(res) == 0:
			return nil, full
		}
		return res, nil
	}
	defer done()
	var refused error
	res, err := r.exec(keys, func(v node.View) []fsm.Command {
		if v.Format() < fsm.FormatFunctions {
			refused = errNeedsQueues
			return nil
		}
		return locks.WaitEval(plain, uint64(wait.Milliseconds()), &refused)(v)
	})
	switch {
	case err != nil:
		return nil, err
	case errors.Is(refused, errNeedsQueues):
		return r.pollForLocks(reqs, wait)
	case refused != nil:
		return nil, refused
	case len(res) == 0 || res[0].Status != fsm.StatusQueued:
		if fsm.Aborted(res) || len(res) > 0 && res[0].GuardFailed() {
			return nil, nil
		}
		return res, nil // granted at once (or renewed)
	}
	return r.awaitTurn(reqs, res[0].Token, wait)
}

// keysOf is reqs' keys, in order.
func keysOf(reqs []lockRequest) [][]byte {
	keys := make([][]byte, len(reqs))
	for i, a := range reqs {
		keys[i] = a.Key
	}
	return keys
}

// tryLocks makes one attempt at every one of reqs (on keys) together: their results, none when
// refused, or an error (a refusal with one: *locks.PermitsError).
func (r *request) tryLocks(keys [][]byte, reqs []lockRequest) ([]fsm.Result, error) {
	var refused error
	res, err := r.exec(keys, locksEval(reqs, &refused))
	if err == nil {
		err = refused
	}
	return res, err
}

// pollForLocks is a wait in a cluster that cannot queue yet (a rolling upgrade from a version
// before the queues): it tries again, every few milliseconds up to maxPollGap, until it is granted
// or its wait passes. It keeps no place: whoever tries first after a release gets the lock.
func (r *request) pollForLocks(reqs []lockRequest, wait time.Duration) ([]fsm.Result, error) {
	keys := keysOf(reqs)
	until := time.Now().Add(wait)
	for gap := time.Millisecond; ; gap = min(2*gap, maxPollGap) {
		res, err := r.tryLocks(keys, reqs)
		switch {
		case err != nil:
			return nil, err
		case len(res) > 0 && !fsm.Aborted(res) && !res[0].GuardFailed():
			return res, nil
		case time.Now().After(until):
			return nil, nil
		}
		select {
		case <-time.After(min(gap, time.Until(until))):
		case <-r.c.ctx.Done():
			return nil, r.c.ctx.Err()
		}
	}
}

// awaitTurn waits for the end of the waiter at place seq of reqs (one per key): the grants'
// results, or nil when it ended without one. A client that leaves takes its waiter out of the
// queue (ghost-waiter cleanup), and gives back what a Serve granted it meanwhile, unless it is
// a follower's link: the follower may have told its client of that grant (resumeWait), so the
// lock is left to its lease.
func (r *request) awaitTurn(reqs []lockRequest, seq fsm.Token, wait time.Duration) ([]fsm.Result, error) {
	keys := keysOf(reqs)
	at := waitPlace{r.s.queueWaits.slotOf(reqs[0].Key), seq}
	w := r.s.queueWaits.register(at, reqs)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for withdrawn := false; ; {
		select {
		case <-w.done:
			r.s.queueWaits.forget(at)
		case <-r.c.ctx.Done():
			r.s.leaveQueue(keys, at, w, !r.c.hop.forwarded) // it forgets the wait once done with it
			return nil, r.c.ctx.Err()
		case <-timer.C:
			if !withdrawn {
				// Its wait is over: it leaves the queue, by a committed release of its waiter
				// (a follower cannot propose one: there the leader's expiry of the waiter's
				// lease ends it). A Serve that came first still grants it.
				withdrawn = true
				r.s.withdraw(r.c.ctx, keys, seq)
				timer.Reset(waitGrace)
				continue
			}
			r.s.queueWaits.forget(at)
			return nil, node.ErrUncertain
		case <-r.s.ctx.Done():
			r.s.queueWaits.forget(at)
			return nil, node.ErrShutdown
		}
		break
	}
	tokens, ok := w.granted(keys)
	if !ok {
		return nil, nil
	}
	out := make([]fsm.Result, len(tokens))
	for i, t := range tokens {
		out[i] = fsm.Result{Status: fsm.StatusGranted, Token: t}
	}
	return out, nil
}

// leaveQueue takes the waiter at place seq out of keys' queues for a client that left, and
// releases the locks a Serve granted it meanwhile. Only a leader can: on a follower (the waiter's
// leader died) its wait's expiry takes it out, and a lock served to it ends with its lease.
func (s *Server) leaveQueue(keys [][]byte, at waitPlace, w *queueWait, giveBack bool) {
	seq := at.seq
	go func() {
		defer s.queueWaits.forget(at)
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		defer cancel()
		if err := s.withdraw(ctx, keys, seq); err != nil || !giveBack {
			return
		}
		// Its end is on its way: a release of its waiter, or a Serve that came first, whose
		// locks it gives back.
		select {
		case <-w.done:
		case <-ctx.Done():
			return
		}
		tokens, ok := w.granted(keys)
		if !ok {
			return
		}
		if _, err := s.homeOfTableKeys(keys).Exec(ctx, keys, func(v node.View) []fsm.Command {
			var cmds []fsm.Command
			for i, k := range keys {
				if c, ok := locks.HolderCommand(v, locks.Unlock(k, tokens[i]), tokens[i]); ok {
					cmds = append(cmds, c)
				}
			}
			return cmds
		}, nil); err != nil {
			s.log.Warn("a lock served to a client that left stays until its lease ends", "err", err)
		}
	}()
}

// withdraw takes the waiter at place seq out of keys' queues, by a committed release of its
// entries; an error (this node does not lead) leaves it to its wait's expiry.
func (s *Server) withdraw(ctx context.Context, keys [][]byte, seq fsm.Token) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := s.homeOfTableKeys(keys).Exec(ctx, keys, func(v node.View) []fsm.Command {
		var cmds []fsm.Command
		for _, k := range keys {
			wk := fsm.WaiterKey(k, seq)
			if _, _, queued := v.Lookup(wk); queued {
				cmds = append(cmds, fsm.Command{Kind: fsm.KindRelease, Key: wk, Match: fsm.Match{Kind: fsm.MatchToken, Token: seq}})
			}
		}
		return cmds
	}, nil)
	if err != nil {
		s.log.Debug("a waiter stays queued until its wait expires", "err", err)
	}
	return err
}

// resumeLook bounds how long a follower looks for its client's waiter after the link to the
// leader broke: a new leader is elected and replicates the committed entries within it.
const resumeLook = 5 * time.Second

// findWaiter finds, by owner, reqs' waiter in the queue of their first key (its place), or the
// locks a Serve gave them already (one result per key); neither when there is none of either.
func findWaiter(v node.View, reqs []lockRequest) (fsm.Token, []fsm.Result) {
	owner := reqs[0].Owner
	var seq fsm.Token
	v.Waiters(reqs[0].Key, func(w fsm.Waiter, _ time.Duration) bool {
		if bytes.Equal(w.Request.Owner, owner) {
			seq = w.Seq
			return false
		}
		return true
	})
	if seq != 0 {
		return seq, nil
	}
	out := make([]fsm.Result, len(reqs))
	for i, a := range reqs {
		if l, _, held := v.Lookup(a.Key); held && l.Value == nil && bytes.Equal(l.Owner, owner) {
			out[i] = fsm.Result{Status: fsm.StatusGranted, Token: l.Token}
			continue
		}
		v.Holders(a.Key, func(h fsm.Lock, _ time.Duration) bool {
			if bytes.Equal(h.Owner, owner) {
				out[i] = fsm.Result{Status: fsm.StatusGranted, Token: h.Token}
				return false
			}
			return true
		})
		if out[i].Token == 0 {
			return 0, nil
		}
	}
	return 0, out
}

// resumeWait is what a follower does when the link to the leader breaks while its client's
// LOCK ... WAIT (a, several: an MLOCK's) waits there: it finds the client's waiter in its own copy
// of the queue (by its owner, which the follower chose: withOwner) and waits for it here. It
// reports false when there is none (the Enqueue may not have reached it): the caller then tells
// the client the outcome is unknown.
func (r *request) resumeWait(reqs []lockRequest, wait time.Duration) bool {
	keys := keysOf(reqs)
	// This node may not have applied the client's Enqueue yet (the leader died just after it
	// committed), or may have applied its Serve already: it looks for a while, in the queue and
	// among the holders, by the owner it chose.
	var seq fsm.Token
	var served []fsm.Result
	for deadline := time.Now().Add(resumeLook); seq == 0 && served == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) || r.c.ctx.Err() != nil {
			return false
		}
		// Its keys' group now: their slot may have moved since the wait began.
		r.s.homeOfTableKeys(keys).ExecLocal(func(v node.View) {
			seq, served = findWaiter(v, reqs)
		})
	}
	res, err := served, error(nil)
	if seq != 0 {
		res, err = r.awaitTurn(reqs, seq, wait)
	}
	switch {
	case err != nil:
		r.replyError(err)
	case res == nil:
		r.w.Null()
	case len(reqs) > 1:
		r.w.Array(len(res))
		for i, x := range res {
			r.lockResult(keys[i], res[i:i+1])
			r.w.Int(int64(x.Token))
		}
	default:
		token, _ := r.lockResult(keys[0], res)
		r.w.Int(int64(token))
	}
	return true
}
