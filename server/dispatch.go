package server

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/raftlock/raftlock/resp"
)

// dispatch runs one command, cmd = lookupCommand(args[0]) (nil: unknown), writing its reply to
// w. slot is its pipeline slot when it runs while others of its connection are in flight. The
// caller holds c.baton. dispatch decides, once, where the command runs: forwarded to the leader,
// on a READONLY follower's own table, or through the node.
func (c *conn) dispatch(w *resp.Writer, cmd *command, args [][]byte, slot *inflight) {
	defer c.recoverCommand(w, args)
	start := time.Now()
	c.s.stats.commands.Add(1)
	if msg, why := c.refusal(cmd, args); msg != "" {
		c.s.stats.errors.Add(1)
		c.s.metrics.refuse(why)
		c.refuse(w, cmd, args, msg)
		return
	}
	if c.sess.subs.active() && c.out.Protocol() == 2 && !allowedSubscribed(cmd) {
		c.s.stats.errors.Add(1)
		c.s.metrics.refuse(refusedSubscribed)
		c.refuse(w, cmd, args, "ERR Can't execute '"+fullName(cmd, args)+"': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
		return
	}
	if c.sess.multi != nil && !runsInMulti(cmd) {
		c.queue(w, cmd, args)
		return
	}
	r := &request{s: c.s, c: c, w: w, cmd: cmd, args: args, db: c.sess.db, slot: slot}
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
	if cmd.leader && !c.s.node.IsLeader() {
		switch {
		case c.sess.readonly && !cmd.write:
			r.path = onLocal
		case cmd.blocking && !c.hop.forwarded:
			// It waits here, where its client is, and forwards each pop it tries (lists.go).
			c.awaitLeader()
		case !c.awaitLeader():
			r.route(cmd.write)
			c.s.metrics.latency[cmd.fam].Since(start)
			return
		}
	}
	if cmd.leader && !cmd.movable {
		r.args = withDBKeys(cmd, args, r.db) // it runs here: its keys become table keys
	}
	cmd.run(r)
	c.s.metrics.latency[cmd.fam].Since(start)
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
	return s.cfg.MaxKeys > 0 && s.node.Keys() >= s.cfg.MaxKeys || s.overMemory.Load()
}

// leaderKnown reports whether a request that needs the leader can be served now: this node is
// the ready leader, or it knows another leader and where that one serves clients.
func (s *Server) leaderKnown() bool {
	if s.node.IsLeader() {
		return true
	}
	id, addr := s.node.LeaderClient()
	return id != "" && id != s.cfg.NodeID && addr != ""
}

// awaitLeader waits, up to Config.LeaderWait, until a leader is known (first contact: a client
// that connects right after a node starts, or during an election, is served instead of being
// told CLUSTERDOWN). It reports whether this node is the ready leader itself; otherwise the
// request is routed (forwarded, or answered with why it cannot be).
func (c *conn) awaitLeader() bool {
	n := c.s.node
	if c.s.cfg.LeaderWait <= 0 {
		return n.IsLeader()
	}
	var deadline *time.Timer
	for {
		changed := n.LeaderChanged() // taken before the check: a change racing it is not missed
		if c.s.leaderKnown() {
			return n.IsLeader()
		}
		if deadline == nil {
			deadline = time.NewTimer(c.s.cfg.LeaderWait)
			defer deadline.Stop()
		}
		select {
		case <-changed:
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
	case "client", "config", "command", "cluster", "script", "pubsub", "debug", "raft":
		if len(args) > 1 {
			return cmd.name + "|" + lower(args[1])
		}
	}
	return cmd.name
}
