package raftnode

// Fair hand-off (issue #15 item 3): LOCK ... WAIT queues on the leader, one FIFO per key, and
// the entry that frees a key (a Release, an Expire) also grants it to the queue's head. No
// waiter is woken to retry: a release costs one grant however many wait, and nobody barges
// ahead of the queue between the release and the grant.

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// lockWaiter is one LOCK ... WAIT queued on the leader. Its fields but taken are set before it
// is queued and never change.
type lockWaiter struct {
	ctx   context.Context // the client's: once done, the waiter is skipped
	grant fsm.Command     // what the hand-off proposes for it: Grant(key, owner, lease, absent)
	// taken: the waiter left its queue to be answered on out (a hand-off entry carries its
	// grant, or leadership was lost). Guarded by Node.mu.
	taken bool
	// out receives the waiter's one answer (buffer 1: the sender never waits).
	out chan handoffOutcome
}

// handoffOutcome is a waiter's answer: its grant's applied result, or why there is none.
type handoffOutcome struct {
	res fsm.Result
	err error
}

// LockWait is Exec for LOCK ... WAIT on key: eval tries the lock as Exec would evaluate it
// (a Grant, a same-owner Renew, or nothing for a refusal). On a refusal the request joins key's
// queue, with grant as the command to propose for it when its turn comes, and waits up to wait:
// the entry that releases or expires the key grants it to the queue's head. It returns the
// results of eval's commands or of the hand-off grant, or no results and no error when wait
// passed first (a refusal: leadership is confirmed before it is given). A waiter whose client
// is gone (ctx done) is skipped; every waiter queued on a node that loses leadership is
// answered at once with the not-leader error.
func (n *Node) LockWait(ctx context.Context, key []byte, eval node.Eval, grant fsm.Command, wait time.Duration) ([]fsm.Result, error) {
	until := time.Now().Add(wait)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		res, w, err := n.tryOrQueue(ctx, key, eval, grant)
		if err != nil {
			return nil, err
		}
		if w == nil {
			if len(res) == 1 && res[0].GuardFailed() && !passed(deadline.C) {
				continue // eval's own Grant was refused at apply (the view changed under it): wait on
			}
			return res, nil
		}
		// Armed again for each turn: an earlier turn may have consumed the timer's one tick
		// (taken at the deadline, its hand-off then aborted); past until it fires at once.
		deadline.Reset(time.Until(until))
		out, err := n.awaitTurn(ctx, key, w, deadline.C)
		if err != nil || out == nil {
			return nil, err
		}
		if out.err != nil {
			return nil, out.err
		}
		if out.res.Status == fsm.StatusGranted {
			return []fsm.Result{out.res}, nil
		}
		// The hand-off entry aborted (only a change of the view under it does that): nothing
		// applied, so try again, at the back of the queue.
	}
}

// passed reports whether the deadline has fired.
func passed(deadline <-chan time.Time) bool {
	select {
	case <-deadline:
		return true
	default:
		return false
	}
}

// tryOrQueue evaluates eval; on a refusal it queues a waiter for key under the same view lock,
// so no release can slip in between. It returns eval's results, or the queued waiter.
func (n *Node) tryOrQueue(ctx context.Context, key []byte, eval node.Eval, grant fsm.Command) ([]fsm.Result, *lockWaiter, error) {
	var w *lockWaiter
	notReady := false
	// propose evaluates again only after a wait that comes before, or instead of, returning
	// the commands; an evaluation that queued w returned none, so propose returned at once.
	p, err := n.propose(ctx, [][]byte{key}, func(v node.View) []fsm.Command {
		cmds := eval(v)
		if len(cmds) > 0 {
			return cmds
		}
		// Under mu: watchLeadership clears ready before it fails the queued waiters under mu,
		// so a waiter queued while ready is seen there.
		if notReady = !n.ready.Load(); notReady {
			return nil
		}
		w = &lockWaiter{ctx: ctx, grant: grant, out: make(chan handoffOutcome, 1)}
		n.queueLocked(w)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if notReady {
		return nil, nil, n.notLeader()
	}
	if w != nil {
		return nil, w, nil // a refusal proposes nothing: p needs no wait
	}
	res, err := p.wait()
	return res, nil, err
}

// awaitTurn waits for w's answer. At the deadline, or when the client is gone, w leaves the
// queue unless a hand-off took it already: then its entry's outcome is on its way and comes
// (raft answers every entry, or the node stops). It returns nil and no error at the deadline.
func (n *Node) awaitTurn(ctx context.Context, key []byte, w *lockWaiter, deadline <-chan time.Time) (*handoffOutcome, error) {
	var why error
	select {
	case out := <-w.out:
		return &out, nil
	case <-deadline:
	case <-ctx.Done():
		why = ctx.Err()
	case <-n.stop:
		why = node.ErrShutdown
	}
	n.mu.Lock()
	taken := w.taken
	if !taken {
		n.dropWaiterLocked(w)
	}
	n.mu.Unlock()
	if taken {
		select {
		case out := <-w.out:
			return &out, nil
		case <-n.stop:
			return nil, node.ErrShutdown
		}
	}
	if why != nil {
		return nil, why
	}
	// A refusal: confirm that this node led throughout (a deposed leader's waiters were
	// answered with an error already; this closes the race with a very late loss).
	vctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	if err := n.verifyLeader(vctx); err != nil {
		if ctx.Err() == nil && vctx.Err() != nil {
			return nil, n.notLeader() // no quorum confirmed it in time: not a leader to trust
		}
		return nil, err
	}
	return nil, nil
}

// queueLocked appends w to its key's queue.
func (n *Node) queueLocked(w *lockWaiter) {
	if n.mu.handoff == nil {
		n.mu.handoff = map[string][]*lockWaiter{}
	}
	k := string(w.grant.Key)
	n.mu.handoff[k] = append(n.mu.handoff[k], w)
}

// dropWaiterLocked takes w out of its key's queue (it may be there no more).
func (n *Node) dropWaiterLocked(w *lockWaiter) {
	k := string(w.grant.Key)
	q := n.mu.handoff[k]
	for i, x := range q {
		if x == w {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(n.mu.handoff, k)
	} else {
		n.mu.handoff[k] = q
	}
}

// headLocked takes the first waiter of key's queue whose client is still there, skipping (and
// dropping) the others; nil when none waits.
func (n *Node) headLocked(key string) *lockWaiter {
	q := n.mu.handoff[key]
	i := 0
	for i < len(q) && q[i].ctx.Err() != nil {
		i++ // its client is gone: skipped (its own awaitTurn finds it out of the queue)
	}
	var w *lockWaiter
	if i < len(q) {
		w = q[i]
		w.taken = true
		i++
	}
	clear(q[:i])
	if q = q[i:]; len(q) == 0 {
		delete(n.mu.handoff, key)
	} else {
		n.mu.handoff[key] = q
	}
	return w
}

// handoffsLocked appends to a request's commands a Grant for the head waiter of each key the
// entry frees: one whose last command in the entry is a Release of the lock the view holds, or
// the Expire of its lease in force. With no proposal in flight on the key, the view is what
// the entry applies to, so the Grant (guarded: key absent) cannot fail. freed names keys that
// are free in the view already (a kick: freed by a change that hands nothing off). It returns
// the commands and the waiters granted, in the order of their Grants at the end of cmds.
//
// format is the entry's log format: a waiter whose Grant it cannot carry waits for a later turn.
func (n *Node) handoffsLocked(cmds []fsm.Command, freed []string, format byte) ([]fsm.Command, []*lockWaiter) {
	if len(n.mu.handoff) == 0 {
		return cmds, nil
	}
	head := func(k string) *lockWaiter {
		if q := n.mu.handoff[k]; len(q) == 0 || fsm.NeedsFormat([]fsm.Command{q[0].grant}) > format {
			return nil
		}
		return n.headLocked(k)
	}
	var hands []*lockWaiter
	for i, c := range cmds {
		if c.Kind != fsm.KindRelease && c.Kind != fsm.KindExpire {
			continue
		}
		if _, ok := n.mu.handoff[string(c.Key)]; !ok || touchedAfter(cmds, i) {
			continue
		}
		if _, busy := n.mu.pending[string(c.Key)]; busy {
			continue
		}
		if l, held := n.mu.machine.Get(c.Key); !held || !fsm.Frees(l, c) {
			continue // its guard would fail: the key stays held, no grant can follow
		}
		if w := head(string(c.Key)); w != nil {
			hands = append(hands, w)
		}
	}
	for _, k := range freed {
		if _, busy := n.mu.pending[k]; busy {
			continue
		}
		if _, held := n.mu.machine.Get([]byte(k)); held {
			continue
		}
		if w := head(k); w != nil {
			hands = append(hands, w)
		}
	}
	if len(hands) == 0 {
		return cmds, nil
	}
	out := make([]fsm.Command, 0, len(cmds)+len(hands))
	out = append(out, cmds...)
	for _, w := range hands {
		out = append(out, w.grant)
	}
	return out, hands
}

// touchedAfter reports whether a command after cmds[i] names the same key.
func touchedAfter(cmds []fsm.Command, i int) bool {
	for _, c := range cmds[i+1:] {
		if bytes.Equal(c.Key, cmds[i].Key) {
			return true
		}
	}
	return false
}

// answerHandoffs gives each waiter granted by an entry its outcome. results are the entry's
// (nil when err), the hand-off Grants being the last len(hands). A waiter whose client hung up
// meanwhile holds a ghost lock: it is released, and that release hands the key on.
func (n *Node) answerHandoffs(hands []*lockWaiter, cmds []fsm.Command, results []fsm.Result, err error) {
	base := len(cmds) - len(hands)
	for i, w := range hands {
		out := handoffOutcome{err: err}
		if err == nil {
			out.res = results[base+i]
			if w.ctx.Err() != nil {
				n.releaseGhosts(cmds[base+i:base+i+1], results[base+i:base+i+1])
			}
		}
		w.out <- out
	}
}

// failWaitersLocked answers every queued waiter with err: this node no longer leads.
func (n *Node) failWaitersLocked(err error) {
	for k, q := range n.mu.handoff {
		for _, w := range q {
			w.taken = true
			w.out <- handoffOutcome{err: err}
		}
		delete(n.mu.handoff, k)
	}
}

// kickHandoffs grants the head waiter of each of keys that an applied entry left free without
// handing it off (a DEL of a collection, a flush, an entry that aborted): otherwise its queue
// would wait for a release that never comes. Only the ready leader kicks.
func (n *Node) kickHandoffsLocked(keys [][]byte) {
	if len(n.mu.handoff) == 0 || !n.ready.Load() {
		return
	}
	var freed []string
	for _, k := range keys {
		if _, ok := n.mu.handoff[string(k)]; !ok {
			continue
		}
		if _, held := n.mu.machine.Get(k); !held {
			freed = append(freed, string(k))
		}
	}
	if keys == nil { // a flush: any key may be free
		for k := range n.mu.handoff {
			if _, held := n.mu.machine.Get([]byte(k)); !held {
				freed = append(freed, k)
			}
		}
	}
	if len(freed) == 0 {
		return
	}
	// A key an entry touched twice is in keys twice: one grant for it, or the second would fail
	// its guard and abort the entry.
	slices.Sort(freed)
	freed = slices.Compact(freed)
	n.goFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
		defer cancel()
		keys := make([][]byte, len(freed))
		for i, k := range freed {
			keys[i] = []byte(k)
		}
		p, err := n.proposeFreed(ctx, keys, func(node.View) []fsm.Command { return nil }, freed)
		if err == nil {
			_, err = p.wait()
		}
		if err != nil {
			n.log.Warn("lock hand-off failed", "keys", len(freed), "err", err)
		}
	})
}

// LockWaiters is how many LOCK ... WAITs are queued on this node now (INFO's lock_waiters).
func (n *Node) LockWaiters() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, q := range n.mu.handoff {
		c += len(q)
	}
	return c
}
