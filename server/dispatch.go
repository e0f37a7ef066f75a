package server

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
)

// dispatch runs one command, cmd = lookupCommand(args[0]) (nil: unknown), replying on w. Every
// command of a connection comes here, alone or pipelined (st, its memory in the pipeline, not
// nil): here, and only here, it is counted, refused (admit), queued in a transaction, given its
// database, and timed. dispatch then decides, once, where it runs (forwarded to the leader, on a
// READONLY follower's own table, or through the node: where) and how (execute). The caller
// holds c.baton.
func (c *conn) dispatch(w *resp.Writer, cmd *command, args [][]byte, st *stagedCall) {
	defer c.recoverCommand(w, args)
	start := time.Now()
	c.s.stats.commands.Add(1)
	if !c.admit(w, cmd, args) {
		return
	}
	r := c.newRequest(w, cmd, args, st)
	if c.s.grouped() && !c.findHome(r) {
		return
	}
	c.noteOwnWrites(cmd, args, r.db) // before it runs: its own end of a lock it holds is no loss
	if t := c.sess.track.mode; t != trackOff && t != trackBcast {
		// Before the read runs or is forwarded: a change racing it costs a spurious
		// invalidation, never a missed one.
		r.trackReads = c.trackRead(cmd, args)
	}
	if cmd.write && c.sess.track.noloop && c.sess.track.mode != trackOff {
		// NOLOOP: this connection must not hear of the changes its own command makes.
		keys := dbKeys(r.db, cmd.keyArgs(args))
		c.s.tracker.beginWrite(c, keys)
		defer c.s.tracker.endWrite(c, keys)
	}
	c.place(r)
	c.execute(r, st, start)
}

// admit replies to a command that may not run now, and reports whether it may: refused (not
// known, not permitted, past a bound; Redis's order of checks), refused while subscribed, or
// queued in the open transaction.
func (c *conn) admit(w *resp.Writer, cmd *command, args [][]byte) bool {
	if msg, why := c.refusal(cmd, args); msg != "" {
		c.s.stats.errors.Add(1)
		c.s.metrics.refuse(why)
		c.refuse(w, cmd, args, msg)
		return false
	}
	if c.sess.subs.active() && c.out.Protocol() == 2 && !allowedSubscribed(cmd) {
		c.s.stats.errors.Add(1)
		c.s.metrics.refuse(refusedSubscribed)
		c.refuse(w, cmd, args, "ERR Can't execute '"+fullName(cmd, args)+"': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
		return false
	}
	if c.sess.multi != nil && !runsInMulti(cmd) {
		c.queue(w, cmd, args)
		return false
	}
	return true
}

// newRequest is the request serving an admitted command: in its pipeline memory when it has
// some (a staged command's request lives there, allocation-free), else a new one.
func (c *conn) newRequest(w *resp.Writer, cmd *command, args [][]byte, st *stagedCall) *request {
	var r *request
	if st != nil {
		r = &st.r
	} else {
		r = new(request)
	}
	*r = request{s: c.s, c: c, w: w, cmd: cmd, args: args, clientArgs: args, db: c.sess.db, home: c.s.node}
	return r
}

// findHome sets the home of r, a request of a several-group cluster, to the group of its keys,
// or refuses it (CROSSSLOT) when they are in different slots, and reports whether it may run.
func (c *conn) findHome(r *request) bool {
	if !r.cmd.leader {
		return true
	}
	if spansGroups(r.cmd, r.args) {
		r.spans = true
		return true
	}
	g, ok := c.s.groupOfKeys(r.cmd.keyArgs(r.args))
	if !ok {
		c.s.stats.errors.Add(1)
		c.s.metrics.refuse(refusedCrossSlot)
		c.refuse(r.w, r.cmd, r.args, errCrossSlot)
		return false
	}
	r.home = c.s.groups[g]
	return true
}

// place decides where r runs (where) and, when it runs here, makes its key arguments table
// keys (r.args are the client's until then).
func (c *conn) place(r *request) {
	r.path = c.where(r)
	if r.path != onLeader && r.cmd.leader && !r.cmd.movable {
		r.args = withDBKeys(r.cmd, r.args, r.db)
	}
}

// where decides where an admitted command runs. A command for the leader, on a follower, runs
// on this node's own table for a READONLY connection's read, and is forwarded otherwise once a
// leader is known; a blocking one waits here, where its client is, and forwards each pop it
// tries (lists.go).
func (c *conn) where(r *request) execPath {
	cmd := r.cmd
	if !cmd.leader || r.spans || r.home.IsLeader() {
		return onNode
	}
	switch {
	case c.sess.readonly && !cmd.write:
		return onLocal
	case cmd.blocking && !c.hop.forwarded:
		c.awaitLeaderOf(r.home)
		return onNode
	case !c.awaitLeaderOf(r.home):
		return onLeader
	}
	return onNode
}

// execute runs an admitted command. Alone (st nil), it runs here. Pipelined, it is staged when it
// runs through this node and has two halves: its first half runs here and its proposal joins
// its neighbours' (stage.go); otherwise it runs on a worker, which lets the connection go on
// while it waits for its outcome (pipeline.go).
func (c *conn) execute(r *request, st *stagedCall, start time.Time) {
	switch {
	case st == nil:
		r.run()
		c.s.metrics.latency[r.cmd.fam].Since(start)
	case r.path == onNode && r.cmd.stage != nil:
		c.stage(st, start)
	default:
		c.runOnWorker(r, st, start)
	}
}

// refuse replies msg to a command refused before it runs. As Redis's rejectCommand: a refused
// command inside MULTI makes EXEC abort, and a refused EXEC ends the transaction (abortExec).
func (c *conn) refuse(w *resp.Writer, cmd *command, args [][]byte, msg string) {
	c.flagTransaction()
	if cmd != nil && cmd.name == "exec" {
		c.abortExec(w, cmd, args, msg)
		return
	}
	w.Error(msg)
}

// refusal is the error a command gets before it runs, in Redis's order of checks: unknown, wrong
// arity, not authenticated, not permitted, past the key or memory bound, and why; "" when it
// may run.
func (c *conn) refusal(cmd *command, args [][]byte) (string, refusalReason) {
	switch {
	case cmd == nil:
		return unknownCommand(args), refusedUnknown
	case !cmd.arityOK(len(args)):
		return wrongArity(cmd.name), refusedArity
	case !c.authed && !cmd.noAuth:
		return "NOAUTH Authentication required.", refusedNoAuth
	}
	if d, ok := c.permit(cmd, args, ""); !ok {
		return d.noperm(), refusedNoPerm
	}
	if cmd.denyOOM && c.s.full() {
		return errOOM, refusedOOM
	}
	if cmd.blocking || cmd.fam == famPubSub && subscribes(cmd.name) {
		// Nothing would ever reach it here: this node applies nothing more.
		if msg, failed := c.s.failedDisk(); failed {
			return msg, refusedDiskFailed
		}
	}
	return "", refusedNone
}

// recoverCommand turns a bug that panics in a command's code into an error reply and the end of
// this one connection, logged with its stack, instead of the end of the node.
func (c *conn) recoverCommand(w *resp.Writer, args [][]byte) {
	p := recover()
	if p == nil {
		return
	}
	c.s.log.Error("command panicked; closing its connection", "client", c.id, "command", string(appendSanitized(nil, args[0], 64)),
		"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	w.Error("ERR internal error while running the command; the connection is closed")
	if w == c.out {
		w.Flush()
	}
	c.cancel()
	c.nc.Close()
}

// full reports whether the table holds Config.MaxKeys keys, or the heap is above
// Config.MaxMemory: commands that may create keys are refused (Redis's denyoom commands past
// maxmemory).
func (s *Server) full() bool {
	return s.cfg.MaxKeys > 0 && s.keyCount() >= s.cfg.MaxKeys || s.overMemory.Load()
}

// leaderKnown reports whether a request that needs home's leader can be served now: this node
// is its ready leader, or l is another node, known to lead, at a known client address.
func (s *Server) leaderKnown(home Replica, l node.Leadership) bool {
	return home.IsLeader() || l.ID != "" && l.ID != s.cfg.NodeID && l.ClientAddr != ""
}

// awaitLeader waits, up to Config.LeaderWait, until a leader is known (first contact: a client
// that connects right after a node starts, or during an election, is served instead of being
// told CLUSTERDOWN). It reports whether this node is the ready leader itself; otherwise the
// request is routed (forwarded, or answered with why it cannot be).
func (c *conn) awaitLeader() bool { return c.awaitLeaderOf(c.s.node) }

// awaitLeaderOf is awaitLeader for the leader of n, one raft group's replica.
func (c *conn) awaitLeaderOf(n Replica) bool {
	if c.s.cfg.LeaderWait <= 0 {
		return n.IsLeader()
	}
	var deadline *time.Timer
	for {
		// Another group's leader is known by its client address from group 0's member table
		// (members announce to group 0 only): a change there may be what this wait needs. Its
		// Changed is taken before the leader is read, as is n's: no change is missed.
		var book <-chan struct{}
		if n != c.s.node {
			book = c.s.node.Leadership().Changed
		}
		l := n.Leadership()
		if c.s.leaderKnown(n, l) {
			return n.IsLeader()
		}
		if _, failed := c.s.failedDisk(); failed {
			return false // no leader will be known: raft stopped (forward says why)
		}
		if deadline == nil {
			deadline = time.NewTimer(c.s.cfg.LeaderWait)
			defer deadline.Stop()
		}
		select {
		case <-l.Changed:
		case <-book:
		case <-deadline.C:
			return n.IsLeader()
		case <-c.ctx.Done():
			return n.IsLeader()
		}
	}
}

// fullName is the name Redis gives a command in errors: "client|id" for a subcommand of a
// container command, the command's name otherwise.
func fullName(cmd *command, args [][]byte) string {
	switch cmd.name {
	case "client", "config", "command", "cluster", "script", "function", "pubsub", "debug", "raft":
		if len(args) > 1 {
			return cmd.name + "|" + lower(args[1])
		}
	}
	return cmd.name
}
