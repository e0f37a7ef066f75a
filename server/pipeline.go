package server

import (
	"bytes"
	"sync"
	"time"

	"github.com/raftlock/raftlock/resp"
)

// Pipelined execution. A client that pipelines (sends commands before reading the replies of
// earlier ones) should not pay one commit per command: the connection proposes each command as
// soon as it is read and raft commits the lot in one append and one fsync. So when commands are
// waiting behind the one being dispatched, a lock command runs on its own goroutine: it
// evaluates and proposes, then yields the connection to the next command while it waits for its
// commit. Replies are buffered per command and written in the order the commands came.
//
// The rules that keep this equivalent to running the commands one by one:
//   - Handler code runs only while holding c.baton, so connection state (its session) has one
//     user at a time. A handler lets go of it only in request.await, between the proposal and
//     its outcome; its request (writer, command, arguments) is its own and needs no saving.
//   - The next command starts only after the previous one proposed (or finished), so proposals
//     reach the raft log in the connection's order.
//   - A command sharing a key with one still in flight waits for that one to finish: it may
//     depend on its outcome (UNLOCK without a token reads the token LOCK remembered).
//   - Anything else (connection commands, scripts, blocking LOCK ... WAIT, tracking) first
//     waits for every command in flight, then runs alone, as before.
//
// On a follower the same commands are forwarded to the leader over the connection's upstream:
// each is sent in order and yields while it waits for its reply (forward.go), so a pipeline
// stays a pipeline through a follower.

// maxInFlight bounds the commands of one connection running at once.
const maxInFlight = 64

// pipeline is a connection's commands in flight, in the order they came: their replies are
// written in that order.
type pipeline struct {
	inflight []*inflight
	// room is inflight's backing array: a pipeline of any length costs no allocation for its
	// list (push moves the list back to room's start when it reaches room's end).
	room [maxInFlight]*inflight
	// spare are finished staged commands whose memory the next ones reuse: a pipeline of
	// them costs no allocation for their state, as a worker's command costs none for its
	// goroutine. A connection keeps as many as its deepest pipeline had in flight: at most
	// maxInFlight of 336 bytes (22 KiB), beside its reader's 16 KiB buffer.
	spare []*stagedCall
}

// push appends f to the commands in flight; the caller made room (fewer than maxInFlight).
func (p *pipeline) push(f *inflight) {
	if p.inflight == nil {
		p.inflight = p.room[:0]
	}
	if len(p.inflight) == cap(p.inflight) {
		n := copy(p.room[:], p.inflight)
		clear(p.room[n:])
		p.inflight = p.room[:n]
	}
	p.inflight = append(p.inflight, f)
}

// inflight is one pipelined command: a worker's (its buffered reply and whether it has
// finished), or a staged one's (stage.go).
type inflight struct {
	keys [][]byte
	// staged is set for a command run in two halves on the connection's goroutine; the fields
	// below it are a worker's command's.
	staged *stagedCall

	w   *resp.Writer
	buf bytes.Buffer
	// yielded is closed when the command has proposed (or finished): the next may start.
	yielded   chan struct{}
	yieldOnce sync.Once
	// done is closed when the reply is complete in buf.
	done chan struct{}
}

func (f *inflight) yield() { f.yieldOnce.Do(func() { close(f.yielded) }) }

// pipelinable reports whether the command may run while earlier ones are still in flight. One
// refused for its name or arity runs alone: its keys cannot be told.
func (c *conn) pipelinable(cmd *command, args [][]byte) bool {
	if cmd == nil || !cmd.arityOK(len(args)) {
		return false
	}
	if !cmd.pipelined || c.sess.track.mode != trackOff || c.sess.readonly || c.sess.subs.active() || c.sess.multi != nil {
		return false
	}
	if lockWaitOf(cmd, args) > 0 {
		return false // it may block for a long time: it runs alone
	}
	if cmd.movable && len(cmd.keyArgs(args)) == 0 {
		// A script that declares no keys may still touch some (Redis allows it outside a
		// cluster): it runs alone, after everything before it.
		return false
	}
	// On a follower the command is forwarded: it yields while waiting for the leader's reply,
	// so a pipeline is forwarded as a pipeline.
	return true
}

// startPipelined dispatches a command while earlier ones of its connection are in flight, in
// pipeline memory of its own, once no command in flight shares a key with it and there is
// room. It returns once the command has replied, is staged, or has proposed on its worker.
// The command's size read-ahead bytes are released when it finishes.
func (c *conn) startPipelined(cmd *command, args [][]byte, size int64) {
	keys := cmd.keyArgs(args)
	c.awaitKeys(keys)
	for len(c.pipe.inflight) >= maxInFlight {
		c.finishHead(true)
	}
	c.baton.Lock()
	st := c.pipe.newStaged()
	st.f.keys, st.size = keys, size
	// With nothing in flight a reply given at once goes straight to the socket's writer;
	// otherwise it waits, in a scratch writer, for its turn.
	w := c.out
	if len(c.pipe.inflight) > 0 {
		w = c.scratch()
	}
	c.dispatch(w, cmd, args, st)
	worker := st.worker
	switch {
	case st.f.staged != nil: // in the pipeline
	case worker != nil:
		c.pipe.recycle(st) // it served the admission only
	default:
		c.repliedEarly(st, w)
	}
	c.baton.Unlock()
	if worker != nil {
		<-worker.yielded
	}
}

// repliedEarly places the reply of a pipelined command that answered without running (refused,
// or its first half replied): written already when nothing was in flight, else kept for its
// turn.
func (c *conn) repliedEarly(st *stagedCall, w *resp.Writer) {
	if w == c.out {
		c.releaseRead(st.size)
		c.pipe.recycle(st)
		return
	}
	w.Flush()
	st.replied, st.reply = true, bytes.Clone(c.scratchBuf.Bytes())
	c.scratchBuf.Reset()
	st.f.staged = st
	c.pipe.push(&st.f)
}

// runOnWorker runs an admitted pipelined command on a worker's goroutine (workers.go), in a
// slot of the pipeline whose buffer keeps its reply for its turn; the caller waits for it to
// propose (st.worker.yielded) after letting go of the baton. The staged commands before it go
// to the node first: they reach the log before it.
func (c *conn) runOnWorker(r *request, st *stagedCall, start time.Time) {
	c.proposeStagedLocked()
	f := &inflight{keys: st.f.keys, yielded: make(chan struct{}), done: make(chan struct{})}
	f.w = resp.NewWriter(&f.buf)
	f.w.SetProtocol(c.out.Protocol())
	wr := new(request) // st's memory is for staged commands: the worker's request outlives it
	*wr = *r
	wr.w, wr.slot = f.w, f
	c.pipe.push(f)
	st.worker = f
	size := st.size
	c.s.workers.run(func() {
		c.baton.Lock()
		c.runSlot(wr, start)
		f.w.Flush() // into f.buf
		close(f.done)
		f.yield()
		c.baton.Unlock()
		c.releaseRead(size)
	})
}

// runSlot is a worker's part of execute: it runs the request and times it.
func (c *conn) runSlot(r *request, start time.Time) {
	defer c.recoverCommand(r.w, r.args)
	r.run()
	c.s.metrics.latency[r.cmd.fam].Since(start)
}

// awaitKeys waits until no command in flight shares a key with keys: a worker's until it has
// finished, a staged one's until it has replied (with every command before it, in order).
func (c *conn) awaitKeys(keys [][]byte) {
	for i := 0; i < len(c.pipe.inflight); i++ {
		f := c.pipe.inflight[i]
		if !sharesKey(f.keys, keys) {
			continue
		}
		if f.staged == nil {
			<-f.done
			continue
		}
		for range i + 1 {
			c.finishHead(true)
		}
		i = -1 // the pipeline moved up: look again from its head
	}
}

// sharesKey reports whether two key lists have a key in common.
func sharesKey(a, b [][]byte) bool {
	for _, x := range a {
		for _, y := range b {
			if bytes.Equal(x, y) {
				return true
			}
		}
	}
	return false
}

// writeFinished writes the replies of the finished commands at the head of the pipeline to the
// connection's writer, in order.
func (c *conn) writeFinished() {
	for len(c.pipe.inflight) > 0 && c.finishHead(false) {
	}
}

// finishHead writes the reply of the command at the head of the pipeline and removes it,
// waiting for it if block; without block it reports false if the command has not finished.
func (c *conn) finishHead(block bool) bool {
	p := &c.pipe
	f := p.inflight[0]
	st := f.staged
	if st != nil {
		if !block && !st.ready() {
			return false
		}
		if st.unproposed {
			c.proposeStaged()
		}
		c.finishStaged(st)
	} else {
		if block {
			<-f.done
		} else {
			select {
			case <-f.done:
			default:
				return false
			}
		}
		c.out.Raw(f.buf.Bytes())
	}
	p.inflight[0] = nil
	p.inflight = p.inflight[1:]
	if len(p.inflight) == 0 {
		p.inflight = p.room[:0]
	}
	if st != nil {
		p.recycle(st) // off the list: nothing refers to it any more
	}
	return true
}

// headDone is closed when the command at the head of the pipeline has finished; nil when
// nothing is in flight.
func (p *pipeline) headDone() <-chan struct{} {
	if len(p.inflight) == 0 {
		return nil
	}
	f := p.inflight[0]
	if f.staged != nil {
		return f.staged.readyChan()
	}
	return f.done
}

// drainPipeline waits for every command in flight and writes their replies: what runs next
// runs alone.
func (c *conn) drainPipeline() {
	c.proposeStaged()
	for len(c.pipe.inflight) > 0 {
		c.finishHead(true)
	}
}
