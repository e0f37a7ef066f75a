package raftnode

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Exec evaluates a request on the leader and replicates what it yields.
//
// keys are the keys eval will look at. If any has a proposal in flight, Exec waits for it to
// apply and evaluates again, so eval always sees the applied outcome of every earlier request on
// its keys (DESIGN.md §4: a refusal or read that looked at a pending effect waits for it).
// A request that yields commands gets their applied results, in order, after they commit and
// apply. They travel as one log entry, applied whole or not at all: when a guard fails at apply
// its command has its own result (fsm.Result.GuardFailed) and the others fsm.StatusAborted. On a
// stable leader that cannot happen (the pending marks keep every request's view current), so
// it means the view changed under the request between evaluation and apply, as only a change of
// leader does. A request that yields none is answered only after leadership is confirmed, so a
// deposed leader cannot give a stale answer.
//
// around, when not nil, is called with the wait for the outcome (the commit and apply, or a
// read's leadership check) and must call it. When around is called the request's commands are
// already in raft's queue, so a connection that pipelines can propose its next request from
// around, and its proposals reach the log in the order it made them: raft commits them together
// (one append, one fsync).
//
// ctx is the client's: when it is cancelled before anything is proposed, Exec returns ctx.Err()
// and nothing happens. Once proposed, Exec waits for the outcome regardless, and if the client
// is gone by then, a lock granted to it is released at once (ghost-lock cleanup).
func (n *Replica) Exec(ctx context.Context, keys [][]byte, eval node.Eval, around func(wait func())) ([]fsm.Result, error) {
	for {
		p, err := n.propose(ctx, keys, eval)
		if err != nil {
			return nil, err
		}
		if around == nil {
			p.results, p.err = p.wait()
		} else {
			// A method value: one allocation, where a closure over local results would move
			// them and itself to the heap (three).
			around(p.waitInPlace)
		}
		if errors.Is(p.err, errReadRaced) {
			continue
		}
		return p.results, p.err
	}
}

// Propose is Exec's first half for a caller that proposes several requests before it waits
// for any: a pipelining connection's lock commands, run on its own goroutine (server/stage.go).
// It evaluates the request and queues what it yields, as Exec does, and returns at once; the
// Pending's Wait gives what Exec would have returned, and must be called.
func (n *Replica) Propose(ctx context.Context, keys [][]byte, eval node.Eval) (node.Pending, error) {
	p, err := n.propose(ctx, keys, eval)
	if err != nil {
		return nil, err
	}
	n.pendingOwn(p, keys, eval)
	return p, nil
}

// ProposeAll is Propose for each of reqs in order, filling in their Pending or Err, as a
// connection's pipeline of lock commands proposes them (server/stage.go). The requests that
// need not wait are evaluated under one hold of Replica.mu, against one reading of the clock, and
// queued for the group commit in one go: a pipeline of 16 pays for the lock, the view and the
// queue once, not 16 times. A request that must wait (a key in flight, a log format not yet
// in force) is proposed on its own once the ones before it are queued, so they reach the log
// in order, and the batch goes on after it.
func (n *Replica) ProposeAll(ctx context.Context, reqs []node.Proposal) {
	for len(reqs) > 0 {
		if !n.ready.Load() {
			for i := range reqs {
				reqs[i].Pending, reqs[i].Err = n.Propose(ctx, reqs[i].Keys, reqs[i].Eval)
			}
			return
		}
		ps := make([]proposal, len(reqs)) // one allocation for the batch's proposals
		done, submits := 0, 0
		n.mu.Lock()
		v := n.viewLocked()
		for ; done < len(reqs); done++ {
			p, r := &ps[done], &reqs[done]
			*p = proposal{n: n, ctx: ctx}
			wait, need, err := n.evalLocked(p, r.Keys, r.Eval, v)
			if wait != nil || need != 0 {
				break // proposed on its own below, after the ones before it
			}
			r.Pending, r.Err = nil, err
			if err == nil {
				r.Pending = p
				if len(p.cmds) > 0 {
					submits++
				}
			}
		}
		n.mu.Unlock()
		n.submitAll(ps[:done], submits)
		for i := range done {
			if reqs[i].Err == nil {
				n.pendingOwn(&ps[i], reqs[i].Keys, reqs[i].Eval)
			}
		}
		if done == len(reqs) {
			return
		}
		r := &reqs[done]
		r.Pending, r.Err = n.Propose(ctx, r.Keys, r.Eval)
		reqs = reqs[done+1:]
	}
}

// submitAll submits the proposals among ps that have commands (count of them), in order: in
// a cluster that reads batches, as consecutive requests of the group commit's queue, sharing
// one done channel (doneShared).
func (n *Replica) submitAll(ps []proposal, count int) {
	if count == 0 {
		return
	}
	now := time.Now()
	grouped := make([]*groupEntry, 0, count)
	var shared *doneShared
	var done chan struct{}
	for i := range ps {
		p := &ps[i]
		if len(p.cmds) == 0 {
			continue
		}
		p.start = now
		if !n.groups(p.cmds, p.format) {
			// Entries of their own, in order: whatever queued before them goes first, and the
			// grouped ones after them share another channel (this one may be closed by then).
			n.submitGroupedAll(grouped)
			grouped, shared = grouped[:0], nil
			p.future, p.grouped = n.submit(p.cmds, p.format, p.lead, &p.entry)
			continue
		}
		if shared == nil {
			shared, done = &doneShared{}, make(chan struct{})
		}
		shared.left.Add(1) // counted before any of the channel's entries is queued and answered
		p.entry = newGroupEntry(p.cmds, p.lead, done, shared)
		p.grouped = &p.entry
		grouped = append(grouped, p.grouped)
	}
	n.submitGroupedAll(grouped)
}

// pendingOwn readies a proposal for Pending's use: it keeps the request, to evaluate a raced
// read again (Wait), and an entry of its own (no group commit) gets a goroutine that waits for
// raft's future, so that its pending marks clear once it applies whenever the caller collects
// it (answerBatch says why), and Done has a channel to give.
func (n *Replica) pendingOwn(p *proposal, keys [][]byte, eval node.Eval) {
	p.keys, p.eval = keys, eval
	if p.future == nil {
		return
	}
	e, future := &p.entry, p.future
	*e = groupEntry{cmds: p.cmds, done: make(chan struct{})}
	p.future, p.grouped = nil, e
	go func() {
		e.results, e.err = n.awaitEntry(e.cmds, future)
		close(e.done)
	}()
}

// Done is the group commit's answer channel; a read, or an entry of its own, has none.
func (p *proposal) Done() <-chan struct{} {
	if p.grouped != nil {
		return p.grouped.done
	}
	return nil
}

// Wait is wait for a proposal made by Propose: a read that a change of leadership raced is
// evaluated anew, as Exec does.
func (p *proposal) Wait() ([]fsm.Result, error) {
	for {
		results, err := p.wait()
		if !errors.Is(err, errReadRaced) {
			return results, err
		}
		keys, eval := p.keys, p.eval
		q, err := p.n.propose(p.ctx, keys, eval)
		if err != nil {
			return nil, err
		}
		*p = *q
		p.keys, p.eval = keys, eval
	}
}

// errReadRaced is proposal.wait's answer for a read that leadership changes raced: the read
// must be evaluated again.
var errReadRaced = errors.New("raftnode: leadership changed during the read; evaluate it again")

// proposal is a request that propose evaluated: its commands are in raft's queue, or it is a
// read or refusal waiting for the leadership check. wait gives its outcome.
type proposal struct {
	n    *Replica
	ctx  context.Context
	cmds []fsm.Command
	// own is how many of cmds are the request's; the lock policy's hand-off grants follow
	// them, and answer tells it their outcome (LockPolicy.Handoffs).
	own    int
	answer func([]fsm.Result, error)
	// future is the entry of cmds, or grouped its place in a group commit (groupcommit.go).
	future  raft.ApplyFuture
	grouped *groupEntry
	entry   groupEntry // where grouped points when set: one allocation with the proposal
	start   time.Time  // when cmds went to raft (commit latency)
	lead    leadership // when it was evaluated
	format  byte       // the table's log format when it was evaluated: its entry is written in it
	// keys and eval are the request, kept by Propose to evaluate a raced read again (Wait).
	keys [][]byte
	eval node.Eval
	// results and err are wait's outcome for Exec, which waits through a caller's hook
	// (waitInPlace).
	results []fsm.Result
	err     error
}

// waitInPlace is wait for Exec's hook: it keeps the outcome in p.
func (p *proposal) waitInPlace() { p.results, p.err = p.wait() }

// propose is Exec's first half, and the one path by which anything reaches the log: client
// requests, the lock policy's ghost-lock releases, lease expiries and hand-offs, and member
// addresses all pass its checks (ready leader, pending keys, valid commands, a live context).
// It evaluates the request and hands what it yields to raft, returning as soon as the commands
// are queued. wait must be called on every proposal returned, or its keys stay marked as in
// flight.
func (n *Replica) propose(ctx context.Context, keys [][]byte, eval node.Eval) (*proposal, error) {
	p := &proposal{n: n, ctx: ctx}
	for {
		if !n.ready.Load() {
			return nil, n.notLeader()
		}
		n.mu.Lock()
		wait, need, err := n.evalLocked(p, keys, eval, n.viewLocked())
		n.mu.Unlock()
		switch {
		case err != nil:
			return nil, err
		case wait != nil:
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-n.stop:
				return nil, node.ErrShutdown
			}
		case need != 0:
			// An older member could not read the entry: wait for the cluster to switch (format.go).
			if err := n.awaitFormat(ctx, need); err != nil {
				return nil, err
			}
			continue
		}
		if len(p.cmds) > 0 {
			p.start = time.Now()
			p.future, p.grouped = n.submit(p.cmds, p.format, p.lead, &p.entry)
		}
		return p, nil
	}
}

// evalLocked evaluates one request against v for p, a new proposal of ctx, under Replica.mu. It
// fills p with a read (no commands), or with the commands to submit, marked pending on their
// keys; or it says why it cannot yet: wait is closed once a proposal in flight on one of keys
// has applied, need is the log format the commands need and the cluster has not switched to.
// Nothing is marked unless p gets commands.
func (n *Replica) evalLocked(p *proposal, keys [][]byte, eval node.Eval, v *viewReader) (wait <-chan struct{}, need byte, err error) {
	if wait := n.pendingOnLocked(keys); wait != nil {
		return wait, 0, nil
	}
	p.lead.gen = n.leaderGen.Load()
	// The table must be the one completed in the term raft is in now: a node that lost and won
	// leadership again before watchLeadership ran may still say ready, and even have the new
	// generation, while its table misses a term in between. becomeReady sets readyTerm under
	// Replica.mu, after its barrier.
	if p.lead.term = n.readyTerm.Load(); n.raft.CurrentTerm() != p.lead.term {
		return nil, 0, n.notLeader()
	}
	cmds, err := safeEval(eval, v)
	if err != nil {
		return nil, 0, err
	}
	if len(cmds) == 0 {
		n.stats.reads.Add(1)
		return nil, 0, nil
	}
	if err := n.writable(); err != nil {
		return nil, 0, err // before anything is marked or proposed: certain, nothing written
	}
	for _, c := range cmds {
		if err := c.Validate(); err != nil {
			return nil, 0, err
		}
	}
	format := n.mu.machine.Format()
	fsm.ForFormat(cmds, format)
	if need := fsm.NeedsFormat(cmds); need > format {
		return nil, need, nil
	}
	if err := p.ctx.Err(); err != nil {
		return nil, 0, err
	}
	p.own = len(cmds)
	p.cmds, p.answer = n.locks.Handoffs(n.mu.machine, n.inFlight, cmds, format)
	fsm.ForFormat(p.cmds[p.own:], format) // the hand-offs' grants
	fsm.StampHeld(p.cmds, format, unixMilli, func() []byte { return n.originOf(p.ctx) })
	p.format = format
	n.markPendingLocked(p.cmds)
	return nil, 0, nil
}

// wait returns the applied results of the proposal's commands; for a read it confirms the
// leadership first and returns no results, or errReadRaced if the read must be evaluated again.
func (p *proposal) wait() ([]fsm.Result, error) {
	n := p.n
	if len(p.cmds) == 0 {
		if err := n.VerifyLeader(p.ctx); err != nil {
			return nil, err
		}
		if n.leaderGen.Load() != p.lead.gen {
			// Leadership was lost and regained between the read and its confirmation: a
			// leader of a term in between may have committed writes the read missed.
			return nil, errReadRaced
		}
		return nil, nil
	}
	results, err := n.await(p.cmds, p.future, p.grouped)
	if err == nil {
		n.stats.commit.Since(p.start)
	}
	if p.answer != nil {
		p.answer(results, err)
	}
	// The request's own results: a hand-off's Serves follow them in the entry.
	cmds := p.cmds[:p.own]
	if results != nil {
		results = results[:p.own:p.own]
	}
	if results != nil {
		n.locks.ReleaseAbandoned(p.ctx, cmds, results)
	}
	if err != nil {
		return nil, err
	}
	return results, nil
}

// safeEval runs eval, turning a panic into an error: a bug in one request's evaluation must not
// leave the view lock held and the node wedged.
func safeEval(eval node.Eval, v node.View) (cmds []fsm.Command, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("raftnode: evaluating the request panicked: %v", r)
		}
	}()
	return eval(v), nil
}

// pendingOnLocked returns a channel closed when the proposals in flight on one of keys have
// applied, or nil when none is in flight.
func (n *Replica) pendingOnLocked(keys [][]byte) <-chan struct{} {
	for _, k := range keys {
		if p, ok := n.mu.pending[n.markOf(k)]; ok {
			return p.wait()
		}
		if n.mu.wideMarks == 0 {
			continue
		}
		// A FLUSHDB (marked on its database's byte) or a FLUSHALL (on "") in flight changes
		// every key of its database: wait for it too.
		if len(k) > 1 {
			if p, ok := n.mu.pending[n.markOf(k[:1])]; ok {
				return p.wait()
			}
		}
		if p, ok := n.mu.pending[n.markOf(nil)]; ok && len(k) > 0 {
			return p.wait()
		}
	}
	return nil
}

// pendingLocked reports whether key has a proposal in flight (or shares its mark with a key
// that has: the hand-off it is asked for then waits for Changed, which is always correct).
func (n *Replica) pendingLocked(key []byte) bool {
	_, ok := n.mu.pending[n.markOf(key)]
	return ok
}

// markOf is the pending mark's index of key (Replica.mu.pending).
func (n *Replica) markOf(key []byte) uint64 {
	return maphash.Bytes(n.markSeed, key)
}

// markPendingLocked registers cmds as in flight on their keys: requests on those keys now wait
// for their outcome (await clears the marks). A Serve is in flight on its waiter's key and on
// the lock's key it grants: a request on that key (a share that would queue behind the waiter
// the Serve takes out, a read of the key's holders) waits for the grant, so it sees the key as
// the hand-off left it.
func (n *Replica) markPendingLocked(cmds []fsm.Command) {
	for _, c := range cmds {
		n.markKeyLocked(c.Key)
		if base, ok := servedKey(c); ok {
			n.markKeyLocked(base)
		}
	}
}

// servedKey is the lock's key a Serve grants.
func servedKey(c fsm.Command) ([]byte, bool) {
	if c.Kind != fsm.KindServe {
		return nil, false
	}
	base, _, ok := fsm.WaiterOf(c.Key)
	return base, ok
}

func (n *Replica) markKeyLocked(key []byte) {
	at := n.markOf(key)
	p, ok := n.mu.pending[at]
	if !ok {
		if free := n.mu.freeKeys; len(free) > 0 {
			p = free[len(free)-1]
			n.mu.freeKeys = free[:len(free)-1]
		} else {
			p = &pendingKey{}
		}
		n.mu.pending[at] = p
	}
	if len(key) <= 1 && !p.wide {
		p.wide = true
		n.mu.wideMarks++
	}
	p.n++
}

// submit hands cmds to raft as one request's entry: its commands commit together and apply
// together, all or nothing (fsm.Machine.ApplyEntry). In a cluster whose members all read
// batches (fsm.FormatBatch), the entry joins the next group commit (groupcommit.go) and its
// place there is returned; otherwise it is a log entry of its own and its future is. It runs
// without Replica.mu: raft.Apply can block while raft's queue is full, and draining that queue
// needs the apply path, which takes Replica.mu. Raft writes the entries waiting in its queue in
// one append and one fsync (BatchApplyCh). Order across keys does not matter, and on one key
// the pending marks already keep requests in order. The proposals counter counts requests that
// wrote, whatever their commands.
//
// format is the table's log format when the request was evaluated, which carries cmds: the
// entry is written in it (a format only ever moves up, so every member still reads it); lead is
// the leadership it was evaluated in; into is where a grouped entry goes.
func (n *Replica) submit(cmds []fsm.Command, format byte, lead leadership, into *groupEntry) (raft.ApplyFuture, *groupEntry) {
	if splitSubmit != nil && len(cmds) > 1 {
		return splitSubmit(n, cmds), nil
	}
	if n.groups(cmds, format) {
		*into = newGroupEntry(cmds, lead, make(chan struct{}), nil)
		n.submitGroupedAll([]*groupEntry{into})
		return nil, into
	}
	data, err := fsm.EncodeEntryIn(nil, cmds, format)
	if err != nil {
		return refusedFuture{err}, nil // propose checked the format: a bug, refused before the log
	}
	f := n.raft.Apply(data, n.cfg.ApplyTimeout)
	n.stats.proposals.Add(1)
	return f, nil
}

// groups reports whether a request's cmds, evaluated in the log format format, join the group
// commit (a cluster whose members all read batches), rather than go as an entry of their own.
func (n *Replica) groups(cmds []fsm.Command, format byte) bool {
	return format >= fsm.FormatBatch && !n.cfg.NoGroupCommit && (splitSubmit == nil || len(cmds) <= 1)
}

// refusedFuture is the outcome of an entry that never reached raft.
type refusedFuture struct{ err error }

func (f refusedFuture) Error() error          { return f.err }
func (f refusedFuture) Index() uint64         { return 0 }
func (f refusedFuture) Response() interface{} { return nil }

// splitSubmit is nil in every build but the chaos harness's deliberately broken one
// (nonatomic_chaos.go, build tag chaos_nonatomic), where it proposes a request's commands as one
// entry each: the harness proves its atomicity checker against that build.
var splitSubmit func(n *Replica, cmds []fsm.Command) raft.ApplyFuture

// await collects the outcome of a request's entry: its group commit's answer, or raft's future
// for an entry of its own. On success results has one entry per command; err is the request's
// error, with no results: a certain one (nothing was proposed) when raft refused the entry
// before it reached the log, otherwise ErrUncertain. An entry is never half applied, so there
// is no partial outcome to report.
func (n *Replica) await(cmds []fsm.Command, future raft.ApplyFuture, grouped *groupEntry) (results []fsm.Result, err error) {
	if grouped != nil {
		results, err = grouped.wait(n.stop)
	} else {
		results, err = n.awaitEntry(cmds, future)
	}
	if err != nil {
		n.stats.failedProposals.Add(1)
		return nil, n.applyError(err)
	}
	if fsm.Aborted(results) {
		n.stats.abortedEntries.Add(1)
	}
	for _, r := range results {
		if r.Rerouted() {
			// The request's slot is moving or moved (fsm/slotmoves.go): nothing applied, and
			// its results would read as refusals. Its caller routes it again.
			return nil, &node.SlotError{Frozen: r.Status == fsm.StatusSlotFrozen}
		}
	}
	return results, nil
}

// Slots is this group's ownership of the hash slots as this node applied it (routing reads it
// for every request of a several-group cluster, so it takes no lock).
func (n *Replica) Slots() fsm.Slots { return *n.slots.Load() }

// noteSlotsLocked publishes the table's slot ownership to Slots.
func (n *Replica) noteSlotsLocked() {
	s := n.mu.machine.Slots()
	n.slots.Store(&s)
}

// GroupsPlan is the groups plan this node's table of group 0 applied last, if any
// (fsm.GroupsPlan): the node runs its groups from its next start.
func (n *Replica) GroupsPlan() (fsm.GroupsPlan, bool) {
	if p := n.plan.Load(); p != nil {
		return *p, true
	}
	return fsm.GroupsPlan{}, false
}

// notePlanLocked publishes the table's groups plan to GroupsPlan.
func (n *Replica) notePlanLocked() {
	if p, ok := n.mu.machine.GroupsPlan(); ok {
		n.plan.Store(&p)
	} else {
		n.plan.Store(nil)
	}
}

// awaitEntry waits for raft's future for an entry of its own, then clears its pending marks
// (as answerBatch does for a group commit's).
func (n *Replica) awaitEntry(cmds []fsm.Command, future raft.ApplyFuture) (results []fsm.Result, err error) {
	if err = n.waitFuture(future); err == nil {
		if r, ok := future.Response().(*entryResponse); ok && len(r.results) == len(cmds) {
			results = r.results
		} else {
			// The entry did not decode on this node: a bug, logged by ApplyBatch. Nothing
			// applied, but every node must agree on that, and this one cannot vouch for them.
			err = node.ErrUncertain
		}
	}
	n.mu.Lock()
	n.clearPendingLocked(cmds)
	n.mu.Unlock()
	return results, err
}

// clearPendingLocked takes cmds off their keys' pending marks, once their entry applied or
// failed: a request that waited on the marks sees the applied table.
func (n *Replica) clearPendingLocked(cmds []fsm.Command) {
	for _, c := range cmds {
		n.clearKeyLocked(c.Key)
		if base, ok := servedKey(c); ok {
			n.clearKeyLocked(base)
		}
	}
}

func (n *Replica) clearKeyLocked(key []byte) {
	at := n.markOf(key)
	p := n.mu.pending[at]
	if p == nil {
		return
	}
	if p.n--; p.n > 0 {
		return
	}
	if p.done != nil {
		close(p.done) // its waiters hold the channel, not p
	}
	delete(n.mu.pending, at)
	if p.wide {
		n.mu.wideMarks--
	}
	if len(n.mu.freeKeys) < maxFreeKeys {
		*p = pendingKey{}
		n.mu.freeKeys = append(n.mu.freeKeys, p)
	}
}

// applyError maps raft's errors to ours. Only errors raised before the entry reached the log
// are certain; anything after that may still commit.
func (n *Replica) applyError(err error) error {
	var df node.DiskFault
	if errors.As(err, &df) && df.DiskFull() {
		// raft got it from this leader's own store, which writes before any follower is sent
		// the entry, and the store kept nothing of it: certain.
		return err
	}
	if failed := n.diskFailed(); failed != nil {
		// The entry may be on this node's disk, and a follower's: the outcome is unknown.
		return uncertainDisk{failed}
	}
	var refused *node.NotLeaderError
	switch {
	case errors.As(err, &refused):
		return err // this node's own refusal before raft had it (sendBatch): certain
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return n.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown),
		errors.Is(err, raft.ErrAbortedByRestore), errors.Is(err, node.ErrUncertain):
		return node.ErrUncertain
	}
	n.log.Warn("proposal failed", "err", err)
	return node.ErrUncertain
}

// viewReader is the node.View a request sees while Replica.mu is held.
type viewReader struct {
	n   *Replica
	now time.Time
}

// viewLocked returns the view as of now. It is valid until Replica.mu is released: an evaluation
// must not keep it.
func (n *Replica) viewLocked() *viewReader {
	n.mu.view = viewReader{n: n, now: n.cfg.Now()}
	return &n.mu.view
}

func (v viewReader) Lookup(key []byte) (fsm.Lock, time.Duration, bool) {
	l, ok := v.n.mu.machine.Get(key)
	if !ok {
		return fsm.Lock{}, 0, false
	}
	if l.LeaseMs == 0 {
		return l, 0, true
	}
	return l, max(time.Duration(l.Deadline-v.n.leaseClock(v.now)), 0), true
}

// remaining is what is left of l's lease, as of the view's now (0 for none).
func (v viewReader) remaining(l fsm.Lock) time.Duration {
	if l.LeaseMs == 0 {
		return 0
	}
	return max(time.Duration(l.Deadline-v.n.leaseClock(v.now)), 0)
}

func (v viewReader) Kinds(key []byte) (fsm.Kinds, time.Duration) {
	k := v.n.mu.machine.Kinds(key)
	if !k.Delayed {
		return k, 0
	}
	return k, v.remaining(k.Delay)
}

func (v viewReader) Holders(key []byte, fn func(l fsm.Lock, remaining time.Duration) bool) {
	v.n.mu.machine.Holders(key, func(l fsm.Lock) bool { return fn(l, v.remaining(l)) })
}

func (v viewReader) Waiters(key []byte, fn func(w fsm.Waiter, remaining time.Duration) bool) {
	v.n.mu.machine.Waiters(key, func(w fsm.Waiter) bool { return fn(w, v.remaining(w.Lock)) })
}

func (v viewReader) QueuedKeys(fn func(key []byte) bool) { v.n.mu.machine.QueuedKeys(fn) }

func (v viewReader) Slots() fsm.Slots { return v.n.mu.machine.Slots() }

func (v viewReader) Len(db int) int { return v.n.mu.machine.LenDB(db) }

func (v viewReader) Ascend(from []byte, fn func(key []byte, l fsm.Lock) bool) {
	v.n.mu.machine.Ascend(string(from), func(key string, l fsm.Lock) bool { return fn([]byte(key), l) })
}

// VerifyLeader confirms this node is still the leader after the caller read the table. Checks
// are batched: one raft VerifyLeader round answers every request that asked before it started.
func (n *Replica) VerifyLeader(ctx context.Context) error {
	ch := make(chan error, 1)
	select {
	case n.verifyReqs <- ch:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stop:
		return node.ErrShutdown
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stop:
		return node.ErrShutdown
	}
}

// awaitFuture waits for f's outcome, or until stop is closed. hashicorp/raft (v1.7.2) can leave a
// future unanswered for ever: its verify channel is buffered, and a request queued as the main
// loop exits (Shutdown, or a leader removing itself) is never drained; an entry committed but
// still queued for the FSM at shutdown is not answered either.
// Close waits for the node's goroutines, so none may wait on such a future; the goroutine left
// behind ends only if raft ever answers (at shutdown, one per future raft dropped).
func awaitFuture(f raft.Future, stop <-chan struct{}) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-stop:
		return node.ErrShutdown
	}
}

// waitFuture is awaitFuture on the node's stop channel, for futures whose outcome is raft's: a
// node shutting down reports raft.ErrRaftShutdown, which leaves an entry uncertain (applyError).
// WaitFuture waits for a raft future, or for this core to close (raft.ErrRaftShutdown then).
// Cluster management waits for its configuration changes with it.
func (n *Replica) WaitFuture(f raft.Future) error { return n.waitFuture(f) }

// RaftError maps an error of raft's to the one a request gets (applyError): cluster
// management's configuration changes answer as proposals do.
func (n *Replica) RaftError(err error) error { return n.applyError(err) }

// ExecTable is Exec for cluster management's own proposals (member addresses, the cluster
// ID): eval reads the applied table itself, under the view lock, where a request's evaluation
// sees only node.View, which has no member table. eval must not block or keep m.
func (n *Replica) ExecTable(ctx context.Context, keys [][]byte, eval func(m *fsm.Machine) []fsm.Command) error {
	_, err := n.Exec(ctx, keys, func(node.View) []fsm.Command { return eval(n.mu.machine) }, nil)
	return err
}

func (n *Replica) waitFuture(f raft.Future) error {
	if err := awaitFuture(f, n.stop); !errors.Is(err, node.ErrShutdown) {
		return err
	}
	return raft.ErrRaftShutdown
}

func (n *Replica) runVerifier() {
	var batch []chan error
	for {
		batch = batch[:0]
		select {
		case <-n.stop:
			return
		case ch := <-n.verifyReqs:
			batch = append(batch, ch)
		}
	drain:
		for {
			select {
			case ch := <-n.verifyReqs:
				batch = append(batch, ch)
			default:
				break drain
			}
		}
		err := awaitFuture(n.raft.VerifyLeader(), n.stop)
		// Leading now is not enough: in a term other than the one the table was completed in
		// (lost and won again before watchLeadership saw it, which then still says ready), a
		// leader of a term in between may have committed what the table misses.
		if err != nil || !n.ready.Load() || n.raft.CurrentTerm() != n.readyTerm.Load() {
			err = n.notLeader()
		}
		n.stats.verifyRounds.Add(1)
		for _, ch := range batch {
			ch <- err
		}
	}
}

func (v viewReader) Script(sha string) (string, bool) { return v.n.mu.machine.Script(sha) }

func (v viewReader) ScriptCache() (scripts, bytes int) {
	return v.n.mu.machine.Scripts(), v.n.mu.machine.ScriptBytes()
}
func (v viewReader) User(name string) (string, bool) { return v.n.mu.machine.User(name) }
func (v viewReader) Format() byte                    { return v.n.mu.machine.Format() }
func (v viewReader) Libraries() *fsm.Libraries       { return v.n.mu.machine.Libraries() }

func unixMilli() int64 { return time.Now().UnixMilli() }

// originOf is the ID of the node the client of a request run with ctx is on: the follower
// whose link forwarded it (node.WithOrigin), or this one. A link that did not say, or named a
// node that is not a member, gives none: what goes into the log, and so into every node's
// table for good (fsm's originNames), is only ever a member's ID. Under Replica.mu.
func (n *Replica) originOf(ctx context.Context) []byte {
	id, forwarded := node.OriginOf(ctx)
	if !forwarded {
		return n.selfID
	}
	if _, member := n.mu.machine.Member(id); !member {
		return nil
	}
	return []byte(id)
}
