package locks

// Fair hand-off: LOCK ... WAIT queues on the leader, one FIFO per key, and the entry that frees
// a key (a Release, an Expire) also grants it to the queue's head. No waiter is woken to retry:
// a release costs one grant however many wait, and nobody barges ahead of the queue between the
// release and the grant.
//
// Shared locks, semaphores and MLOCK queue in the same FIFOs (an MLOCK in the queue of each of
// its keys, in one step, so all queues agree on the order of any two waiters). Their turn comes
// from the hand-off after the entry that changed their key (Changed): it grants, in one entry,
// the head and every waiter after it that fits too (consecutive readers, permits left), and
// stops at the first that does not, so a waiting writer is never overtaken. An MLOCK is granted
// once it heads the queue of every one of its keys and all are free; it never holds one key while
// it waits for another, so it cannot deadlock with any other waiter.

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// lockWaiter is one LOCK ... WAIT (SEMACQUIRE ... WAIT, MLOCK ... WAIT) queued on the leader.
// Its fields but taken are set before it is queued and never change.
type lockWaiter struct {
	ctx context.Context // the client's: once done, the waiter is skipped
	// grants are what the hand-off proposes for it, one per key: a Grant (key, owner, lease,
	// absent) or an Acquire; an MLOCK's several, in the order of its keys.
	grants []fsm.Command
	since  time.Time // when it queued (LOCKWAITERS)
	// taken: the waiter left its queues to be answered on out (a hand-off entry carries its
	// grants, or leadership was lost). Guarded by Policy.mu.
	taken bool
	// out receives the waiter's one answer (buffer 1: the sender never waits).
	out chan handoffOutcome
}

// handoffOutcome is a waiter's answer: its grants' applied results, or why there are none.
type handoffOutcome struct {
	res []fsm.Result
	err error
}

// granted reports whether every grant of the outcome applied.
func (o handoffOutcome) granted() bool {
	for _, r := range o.res {
		if r.Status != fsm.StatusGranted {
			return false
		}
	}
	return len(o.res) > 0
}

// simple reports whether w is a plain lock's waiter, one Grant: the one kind the entry that frees
// its key hands off to at once (Handoffs).
func (w *lockWaiter) simple() bool { return len(w.grants) == 1 && w.grants[0].Kind == fsm.KindGrant }

// LockWait is Exec for LOCK ... WAIT (and SEMACQUIRE, MLOCK) on keys: eval tries the lock as
// Exec would evaluate it (a Grant, a same-owner Renew, or nothing for a refusal). On a refusal
// the request joins the queue of each of keys, with grants (one per key) as the commands to
// propose for it when its turn comes, and waits up to wait: the entry that releases or expires
// the key grants it to the queue's head. It returns the results of eval's commands or of the
// hand-off grants, or no results and no error when wait passed first (a refusal: leadership is
// confirmed before it is given). A waiter whose client is gone (ctx done) is skipped; every
// waiter queued on a node that loses leadership is answered at once with the not-leader error.
func (p *Policy) LockWait(ctx context.Context, keys [][]byte, eval node.Eval, grants []fsm.Command, wait time.Duration) ([]fsm.Result, error) {
	until := time.Now().Add(wait)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		res, w, err := p.tryOrQueue(ctx, keys, eval, grants)
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
		out, err := p.awaitTurn(ctx, w, deadline.C)
		if err != nil || out == nil {
			return nil, err
		}
		if out.err != nil {
			return nil, out.err
		}
		if out.granted() {
			return out.res, nil
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
func (p *Policy) tryOrQueue(ctx context.Context, keys [][]byte, eval node.Eval, grants []fsm.Command) ([]fsm.Result, *lockWaiter, error) {
	var w *lockWaiter
	notLeading := false
	// The core evaluates again only after a wait that comes before, or instead of, returning
	// the commands; an evaluation that queued w returned none, so Propose returned at once.
	pending, err := p.replica.Propose(ctx, keys, func(v node.View) []fsm.Command {
		cmds := eval(v)
		if len(cmds) > 0 {
			return cmds
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		// Demote clears leading and fails the queued waiters under mu, so a waiter queued
		// while leading is answered there.
		if notLeading = !p.leading.Load(); notLeading {
			return nil
		}
		w = &lockWaiter{ctx: ctx, grants: grants, since: time.Now(), out: make(chan handoffOutcome, 1)}
		p.queueLocked(w)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if notLeading {
		return nil, nil, p.replica.NotLeader()
	}
	if w != nil {
		return nil, w, nil // a refusal proposes nothing: its Pending holds no entry to wait for
	}
	res, err := pending.Wait()
	return res, nil, err
}

// awaitTurn waits for w's answer. At the deadline, or when the client is gone, w leaves the
// queue unless a hand-off took it already: then its entry's outcome is on its way and comes
// (raft answers every entry, or the node stops). It returns nil and no error at the deadline.
func (p *Policy) awaitTurn(ctx context.Context, w *lockWaiter, deadline <-chan time.Time) (*handoffOutcome, error) {
	var why error
	select {
	case out := <-w.out:
		return &out, nil
	case <-deadline:
	case <-ctx.Done():
		why = ctx.Err()
	case <-p.stop:
		why = node.ErrShutdown
	}
	p.mu.Lock()
	taken := w.taken
	var headed []string
	if !taken {
		headed = p.headedLocked(w)
		p.dropWaiterLocked(w)
	}
	p.mu.Unlock()
	if len(headed) > 0 && p.leading.Load() {
		// The waiter behind it may fit now (a share behind a writer that gave up; the key may
		// even be free): a request that does not wait is refused while anyone waits, so
		// nothing else would hand the key on.
		p.goFunc(func() { p.handOff(headed) })
	}
	if taken {
		select {
		case out := <-w.out:
			return &out, nil
		case <-p.stop:
			return nil, node.ErrShutdown
		}
	}
	if why != nil {
		return nil, why
	}
	// A refusal: confirm that this node led throughout (a deposed leader's waiters were
	// answered with an error already; this closes the race with a very late loss).
	vctx, cancel := context.WithTimeout(ctx, p.applyTimeout)
	defer cancel()
	if err := p.replica.VerifyLeader(vctx); err != nil {
		if ctx.Err() == nil && vctx.Err() != nil {
			return nil, p.replica.NotLeader() // no quorum confirmed it in time: not a leader to trust
		}
		return nil, err
	}
	return nil, nil
}

// queueLocked appends w to the queue of each of its keys, and counts it once.
func (p *Policy) queueLocked(w *lockWaiter) {
	if p.mu.handoff == nil {
		p.mu.handoff = map[string][]*lockWaiter{}
	}
	for _, g := range w.grants {
		k := string(g.Key)
		p.mu.handoff[k] = append(p.mu.handoff[k], w)
	}
	p.queued.Add(1)
}

// dropWaiterLocked takes w out of its keys' queues (it may be there no more).
func (p *Policy) dropWaiterLocked(w *lockWaiter) {
	found := false
	for _, g := range w.grants {
		k := string(g.Key)
		q := p.mu.handoff[k]
		if i := slices.Index(q, w); i >= 0 {
			q = slices.Delete(q, i, i+1)
			found = true
		}
		p.setQueueLocked(k, q)
	}
	if found {
		p.queued.Add(-1)
	}
}

// Waiting reports whether anyone waits on key (a table key): a request that is not a hand-off
// must not take it ahead of them. While nobody waits anywhere it costs an atomic load.
func (p *Policy) Waiting(key []byte) bool {
	if p.queued.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mu.handoff[string(key)]) > 0
}

// Waiter is one request queued on a key, for LOCKWAITERS.
type Waiter struct {
	Owner []byte
	// Kind is "lock", "shared", "semaphore" or "mlock".
	Kind  string
	Since time.Time
}

// Waiters lists key's queue in order (a table key).
func (p *Policy) Waiters(key []byte) []Waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Waiter
	for _, w := range p.mu.handoff[string(key)] {
		if w.ctx.Err() != nil {
			continue // gone: skipped at its turn
		}
		g := w.grants[0]
		kind := "lock"
		switch {
		case len(w.grants) > 1:
			kind = "mlock"
		case g.Kind == fsm.KindAcquire && g.Permits == 0:
			kind = "shared"
		case g.Kind == fsm.KindAcquire:
			kind = "semaphore"
		}
		out = append(out, Waiter{Owner: g.Owner, Kind: kind, Since: w.since})
	}
	return out
}

// setQueueLocked stores key's queue, or forgets the key when its queue is empty.
func (p *Policy) setQueueLocked(key string, q []*lockWaiter) {
	if len(q) == 0 {
		delete(p.mu.handoff, key)
	} else {
		p.mu.handoff[key] = q
	}
}

// liveHeadLocked drops the waiters at the front of key's queue whose client is gone (their own
// awaitTurn finds them out of it) and returns the first one left; nil when none waits.
func (p *Policy) liveHeadLocked(key string) *lockWaiter {
	for {
		q := p.mu.handoff[key]
		if len(q) == 0 {
			return nil
		}
		if q[0].ctx.Err() == nil {
			return q[0]
		}
		p.dropWaiterLocked(q[0])
	}
}

// takeLocked takes w out of its queues to be answered on out.
func (p *Policy) takeLocked(w *lockWaiter) {
	p.dropWaiterLocked(w)
	w.taken = true
}

// headFor takes the head waiter of key for a grant in an entry of log format format, when it is
// a plain lock's: nil when no waiter is queued on key, or when the head is of another kind or
// needs a newer format (its turn comes from Changed).
func (p *Policy) headFor(key string, format byte) *lockWaiter {
	w := p.liveHeadLocked(key)
	if w == nil || !w.simple() || fsm.NeedsFormat(w.grants) > format {
		return nil
	}
	p.takeLocked(w)
	return w
}

// Handoffs appends to a request's commands a Grant for the head waiter of each key the entry
// frees: one whose last command in the entry is a Release of the lock m holds, or the Expire of
// its lease in force. The core calls it under its view lock as it proposes cmds, in log format
// format, with m its applied table and inFlight telling which keys have proposals in flight:
// with none on the key, m is what the entry applies to, so the Grant (guarded: key absent)
// cannot fail. It returns the commands, the Grants last, and the function the core calls with
// the entry's results (or its error) to answer the waiters granted; nil when it granted none.
// While nobody waits it costs one atomic load.
func (p *Policy) Handoffs(m *fsm.Machine, inFlight func(key []byte) bool, cmds []fsm.Command, format byte) ([]fsm.Command, func([]fsm.Result, error)) {
	if p.queued.Load() == 0 {
		return cmds, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var hands []*lockWaiter
	for i, c := range cmds {
		if c.Kind != fsm.KindRelease && c.Kind != fsm.KindExpire {
			continue
		}
		if _, ok := p.mu.handoff[string(c.Key)]; !ok || touchedAfter(cmds, i) || inFlight(c.Key) {
			continue
		}
		if l, held := m.Get(c.Key); !held || !fsm.FreesKey(l, c) || m.Kinds(c.Key).Blocks() {
			continue // its guard would fail: the key stays held (or shared, or delayed), no grant can follow
		}
		if w := p.headFor(string(c.Key), format); w != nil {
			hands = append(hands, w)
		}
	}
	if len(hands) == 0 {
		return cmds, nil
	}
	out := make([]fsm.Command, 0, len(cmds)+len(hands))
	out = append(out, cmds...)
	for _, w := range hands {
		out = append(out, w.grants...)
	}
	return out, func(results []fsm.Result, err error) { p.answerHandoffs(hands, out, results, err) }
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
// (nil when err), the hand-off grants being the last ones, hands' in order. A waiter whose
// client hung up meanwhile holds ghost locks: they are released, and that release hands the
// keys on.
func (p *Policy) answerHandoffs(hands []*lockWaiter, cmds []fsm.Command, results []fsm.Result, err error) {
	n := 0
	for _, w := range hands {
		n += len(w.grants)
	}
	at := len(cmds) - n
	for _, w := range hands {
		out := handoffOutcome{err: err}
		if err == nil {
			out.res = results[at : at+len(w.grants) : at+len(w.grants)]
			if out.granted() {
				p.handoffs.Add(1)
			}
			if w.ctx.Err() != nil {
				p.Abandoned(cmds[at:at+len(w.grants)], out.res)
			}
		}
		at += len(w.grants)
		w.out <- out
	}
}

// failWaitersLocked answers every queued waiter with err: this node no longer leads.
func (p *Policy) failWaitersLocked(err error) {
	for k, q := range p.mu.handoff {
		for _, w := range q {
			if !w.taken { // an MLOCK is in several queues, and answered once
				w.taken = true
				w.out <- handoffOutcome{err: err}
			}
		}
		delete(p.mu.handoff, k)
	}
	p.queued.Store(0)
}

// Changed grants the head waiter of each of keys that an applied entry left free without
// handing it off (a DEL of a collection, a flush, an entry that aborted): otherwise its queue
// would wait for a release that never comes. The core calls it under its view lock at the end
// of each applied batch, with m its table and keys those whose lock changed (nil after a flush:
// any key may be free). Only the ready leader hands off.
func (p *Policy) Changed(m *fsm.Machine, keys [][]byte, flushed bool) {
	if p.queued.Load() == 0 || !p.leading.Load() || len(keys) == 0 && !flushed {
		return
	}
	var freed []string
	p.mu.Lock()
	for _, k := range keys {
		k = fsm.BaseKey(k) // a share's or a permit's end frees room on its key
		if _, ok := p.mu.handoff[string(k)]; !ok {
			continue
		}
		if _, held := m.Get(k); !held {
			freed = append(freed, string(k))
		}
	}
	if flushed {
		for k := range p.mu.handoff {
			if _, held := m.Get([]byte(k)); !held {
				freed = append(freed, k)
			}
		}
	}
	p.mu.Unlock()
	if len(freed) == 0 {
		return
	}
	// A key an entry touched twice is in keys twice: one grant for it, or the second would fail
	// its guard and abort the entry.
	slices.Sort(freed)
	freed = slices.Compact(freed)
	p.goFunc(func() { p.handOff(freed) })
}

// handOff proposes, as a request of its own, the grants of the waiters at the head of each of
// freed's queues that fit when it is evaluated (the core waits for proposals in flight on those
// keys first): the head, and each one after it that fits too, up to the first that does not.
func (p *Policy) handOff(freed []string) {
	ctx, cancel := context.WithTimeout(context.Background(), p.applyTimeout)
	defer cancel()
	keys := make([][]byte, len(freed))
	for i, k := range freed {
		keys[i] = []byte(k)
	}
	var hands, took []*lockWaiter
	var refused []refusal
	cmds := []fsm.Command(nil)
	results, err := p.replica.Exec(ctx, keys, func(v node.View) []fsm.Command {
		p.mu.Lock()
		defer p.mu.Unlock()
		// An evaluation run again puts back, at the head of their queues, the waiters the
		// earlier run took, granted or refused (in reverse, so they keep their order).
		for i := len(took) - 1; i >= 0; i-- {
			p.requeueFrontLocked(took[i])
		}
		hands, took, cmds, refused = hands[:0], took[:0], cmds[:0], refused[:0]
		room := newRoom(v)
		for _, k := range freed {
			for {
				w := p.liveHeadLocked(k)
				if w == nil || fsm.NeedsFormat(w.grants) > v.Format() {
					break
				}
				if err := room.mismatch(w); err != nil {
					p.takeLocked(w)
					took = append(took, w)
					refused = append(refused, refusal{w, err})
					continue
				}
				if !p.headOfAllLocked(w) || !room.fits(w) {
					break
				}
				p.takeLocked(w)
				took = append(took, w)
				room.take(w)
				hands = append(hands, w)
				cmds = append(cmds, w.grants...)
			}
		}
		return cmds
	}, nil)
	for _, r := range refused {
		r.w.out <- handoffOutcome{err: r.err}
	}
	if len(hands) > 0 {
		p.answerHandoffs(hands, cmds, results, err)
	}
	if err != nil {
		p.log.Warn("lock hand-off failed", "keys", len(freed), "err", err)
	}
}

// requeueFrontLocked puts a waiter a hand-off took back at the front of its queues.
func (p *Policy) requeueFrontLocked(w *lockWaiter) {
	w.taken = false
	for _, g := range w.grants {
		k := string(g.Key)
		p.mu.handoff[k] = append([]*lockWaiter{w}, p.mu.handoff[k]...)
	}
	p.queued.Add(1)
}

// headedLocked lists the keys whose queue w heads, with others behind it.
func (p *Policy) headedLocked(w *lockWaiter) []string {
	var keys []string
	for _, g := range w.grants {
		if q := p.mu.handoff[string(g.Key)]; len(q) > 1 && q[0] == w {
			keys = append(keys, string(g.Key))
		}
	}
	return keys
}

// headOfAllLocked reports whether w heads the queue of every one of its keys (an MLOCK's turn).
func (p *Policy) headOfAllLocked(w *lockWaiter) bool {
	for _, g := range w.grants {
		if p.liveHeadLocked(string(g.Key)) != w {
			return false
		}
	}
	return true
}

// LockWaiters is how many LOCK ... WAITs are queued on this node now (INFO's lock_waiters).
func (p *Policy) LockWaiters() int { return int(p.queued.Load()) }
