package server

import "github.com/raftlock/raftlock/server/resp"

// dispatch runs one command, cmd = lookupCommand(args[0]) (nil: unknown), writing its reply to
// w. slot is its pipeline slot when it runs while others of its connection are in flight. The
// caller holds c.baton. dispatch decides, once, where the command runs: forwarded to the leader,
// on a READONLY follower's own table, or through the node.
func (c *conn) dispatch(w *resp.Writer, cmd *command, args [][]byte, slot *inflight) {
	c.s.stats.commands.Add(1)
	if cmd == nil {
		c.s.stats.errors.Add(1)
		w.Error(unknownCommand(args))
		return
	}
	if !cmd.arityOK(len(args)) {
		c.s.stats.errors.Add(1)
		w.Error("ERR wrong number of arguments for '" + cmd.name + "' command")
		return
	}
	r := &request{s: c.s, c: c, w: w, cmd: cmd, args: args, slot: slot}
	if t := c.sess.track.mode; t != trackOff && t != trackBcast {
		// Before the read runs or is forwarded: a change racing it costs a spurious
		// invalidation, never a missed one.
		r.trackReads = c.trackRead(cmd, args)
	}
	if cmd.write && c.sess.track.noloop && c.sess.track.mode != trackOff {
		// NOLOOP: this connection must not hear of the changes its own command makes.
		keys := cmd.keyArgs(args)
		c.s.tracker.beginWrite(c, keys)
		defer c.s.tracker.endWrite(c, keys)
	}
	if cmd.leader && !c.s.node.IsLeader() {
		if !c.sess.readonly || cmd.write {
			r.route(cmd.write)
			return
		}
		r.path = onLocal
	}
	cmd.run(r)
}
