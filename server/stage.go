package server

import (
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
)

// Staged commands. A pipelined command otherwise runs on a worker goroutine (pipeline.go),
// which proposes, yields the connection, sleeps until its commit and wakes to write its reply:
// a handful of goroutine hand-offs and a reply buffer per command. The commands a pipeline of
// locks is made of (LOCK without WAIT, UNLOCK; the Redis recipe's SET, EVAL/EVALSHA and DEL)
// come in two halves instead (command.stage): the first parses and says what to propose, the second
// replies from the outcome. Once dispatch has admitted such a command and found it runs through
// this node, the connection's own goroutine runs the first half and proposes
// (Replica.ProposeAll), goes on to the next command, and runs the second halves in order as the
// outcomes come in, writing the replies straight to the socket's writer: a pipeline of such
// commands costs no goroutine hand-off per command.
//
// The proposals of consecutive staged commands go to the node together: while the reader has
// the next command parsed, a staged command's proposal waits in c.unproposed, and the lot is
// proposed (proposeStaged) when no command is waiting, before anything else runs, and before
// the connection waits on any outcome. The node then evaluates them under one lock and queues
// them for the group commit in one go.
//
// The rules of pipeline.go hold: handler code runs under c.baton, proposals reach the log in
// the connection's order (each is queued before a command that is not staged starts, and
// staged ones are proposed in order), a command sharing a key with one in flight waits for
// that one's reply, and replies are written in order.

// finishFunc is a staged command's second half: it replies from its proposal's outcome.
type finishFunc func([]fsm.Result, error)

// runHalves runs a command's two halves back to back, as a command running alone does: the
// first half's proposal (eval nil: it replied already) executes along the request's path, and
// finish replies from the outcome.
func (r *request) runHalves(keys [][]byte, eval node.Eval, finish finishFunc) {
	if eval != nil {
		finish(r.exec(keys, eval))
	}
}

// stagedCall is a pipelined command's memory, reused from one command to the next: dispatch
// admits it there, and for a staged command it is the command in flight: its request, its
// proposal (or the error that kept it from being proposed) and its second half. A command that
// replied at once (refused, or an argument error) waits there for its turn to be written.
type stagedCall struct {
	// f is its place in the pipeline (f.staged points back here), and r its request: one
	// allocation for the three.
	f       inflight
	r       request
	pending node.Pending
	err     error
	finish  finishFunc
	// replied: the command replied already (refused, or its first half found an argument
	// error), reply is what it wrote while earlier commands were in flight, and there is no
	// second half.
	replied bool
	reply   []byte
	// halves outlive the command: the next staged command in this memory reuses them.
	halves lockHalves
	start  time.Time
	size   int64 // read-ahead bytes, released when it finishes
	// unproposed: its first half ran and its proposal (keys, eval) waits in c.unproposed.
	unproposed bool
	keys       [][]byte
	eval       node.Eval
	// worker: dispatch gave the command to a worker, in this slot (runOnWorker); this memory
	// served its admission only.
	worker *inflight
	// guard, on a cluster whose slots moved, is its evaluation's slotGuard (slotmoves.go).
	guard *slotGuard
}

// stage runs an admitted command's first half on the connection's goroutine (dispatch decided
// it is staged): it replies at once (an argument error), or its proposal waits in c.unproposed
// to go to the node with its neighbours' (proposeStaged).
func (c *conn) stage(st *stagedCall, start time.Time) {
	r := &st.r
	st.start = start
	r.halves = &st.halves
	st.halves.makeHalves(r)
	keys, eval, finish := r.cmd.stage(r)
	if eval == nil { // it replied already
		c.s.metrics.latency[r.cmd.fam].Since(start)
		return
	}
	st.finish = finish
	eval = r.touchingWatched(eval)
	if c.s.slotsMoved() {
		st.guard, eval = c.s.guardFor(r.cmd.keyArgs(r.clientArgs), eval)
	}
	st.unproposed, st.keys, st.eval = true, keys, eval
	c.unproposed = append(c.unproposed, st)
	st.f.staged = st
	c.pipe.push(&st.f)
}

// proposeStaged proposes the staged commands waiting in c.unproposed, in order, in one call to
// the node. Their evaluations run under the baton, as their first halves did.
func (c *conn) proposeStaged() {
	if len(c.unproposed) == 0 {
		return
	}
	c.baton.Lock()
	defer c.baton.Unlock()
	c.proposeStagedLocked()
}

// proposeStagedLocked is proposeStaged with the baton held.
func (c *conn) proposeStagedLocked() {
	if len(c.unproposed) == 0 {
		return
	}
	reqs := c.proposals[:0]
	for _, st := range c.unproposed {
		reqs = append(reqs, node.Proposal{Keys: st.keys, Eval: st.eval})
	}
	if c.s.grouped() {
		c.proposeToGroups(reqs)
	} else {
		c.s.node.ProposeAll(c.proposeCtx(), reqs)
	}
	for i, st := range c.unproposed {
		st.pending, st.err = reqs[i].Pending, reqs[i].Err
		st.unproposed, st.keys, st.eval = false, nil, nil
		c.unproposed[i] = nil
	}
	clear(reqs)
	c.proposals, c.unproposed = reqs[:0], c.unproposed[:0]
}

// newStaged returns a zeroed stagedCall: one a finished command left (finishHead), or a new one.
func (p *pipeline) newStaged() *stagedCall {
	if n := len(p.spare); n > 0 {
		st := p.spare[n-1]
		p.spare[n-1] = nil
		p.spare = p.spare[:n-1]
		return st
	}
	return new(stagedCall)
}

// recycle keeps a finished staged command's memory for the connection's next one. Nothing
// refers to it by then: the node is done with its proposal (Wait returned), the pipeline
// dropped it, and its halves (which hold its request) ran.
func (p *pipeline) recycle(st *stagedCall) {
	if len(p.spare) < maxInFlight {
		h := st.halves
		h.forget()
		*st = stagedCall{halves: h} // made for this memory: kept
		p.spare = append(p.spare, st)
	}
}

// scratch is the writer a staged command's first half replies to while earlier commands are
// in flight.
func (c *conn) scratch() *resp.Writer {
	if c.scratchW == nil {
		c.scratchW = resp.NewWriter(&c.scratchBuf)
	}
	c.scratchW.SetProtocol(c.out.Protocol())
	return c.scratchW
}

// ready reports whether the command's outcome is in. A read's leadership check has no channel
// to watch: it is never ready, and is waited for when it is at the head and the connection has
// nothing else to do (readyChan).
func (st *stagedCall) ready() bool {
	if st.unproposed {
		return false // proposeStaged first
	}
	if st.pending == nil {
		return true
	}
	done := st.pending.Done()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// readyChan is closed when ready would report true; for a read, at once: its wait may block.
func (st *stagedCall) readyChan() <-chan struct{} {
	if st.pending != nil {
		if done := st.pending.Done(); done != nil {
			return done
		}
	}
	return closedChan
}

// closedChan is a channel that is always ready.
var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// finishStaged waits for a staged command's outcome and runs its second half, writing the
// reply to the socket's writer: the command is at the head of the pipeline.
func (c *conn) finishStaged(st *stagedCall) {
	defer c.releaseRead(st.size)
	if st.replied {
		c.out.Raw(st.reply)
		return
	}
	res, err := st.res()
	if err == nil {
		err = st.guard.err()
	}
	c.baton.Lock()
	defer c.baton.Unlock()
	st.r.w = c.out
	func() {
		defer c.recoverCommand(c.out, st.r.args)
		st.finish(res, err)
	}()
	c.s.metrics.latency[st.r.cmd.fam].Since(st.start)
}

// res is the staged command's outcome: its proposal's, or the error that kept it from one.
func (st *stagedCall) res() ([]fsm.Result, error) {
	if st.pending == nil {
		return nil, st.err
	}
	return st.pending.Wait()
}

// proposeToGroups is ProposeAll for a several-group cluster: each group's replica proposes its
// requests (reqs[i] is c.unproposed[i]'s), in their order. Requests of different groups touch
// different keys, so the order between groups does not matter.
func (c *conn) proposeToGroups(reqs []node.Proposal) {
	var mine []node.Proposal
	var at []int
	for _, home := range c.s.groups {
		mine, at = mine[:0], at[:0]
		for i, st := range c.unproposed {
			if st.r.home == home {
				mine = append(mine, reqs[i])
				at = append(at, i)
			}
		}
		if len(mine) == 0 {
			continue
		}
		home.ProposeAll(c.proposeCtx(), mine)
		for j, i := range at {
			reqs[i] = mine[j]
		}
	}
}
