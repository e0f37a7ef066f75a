package server

import (
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
)

// request is one command being served: everything its handler reads and the writer it replies
// on (net/http's Request and ResponseWriter in one). dispatch builds it; a redis.call inside a
// script gets its own, on the script's overlay. Connection state a handler changes (its tokens,
// its name) lives in r.c and is touched only while the connection's baton is held.
type request struct {
	s    *Server
	c    *conn
	w    *resp.Writer // the socket, a pipelined command's reply buffer, or a script's capture
	cmd  *command
	args [][]byte // the key arguments are table keys once the request runs here (db.go)
	// clientArgs are the arguments as the client sent them (its keys without their database):
	// what a request whose slot moved is run again or forwarded with (slotmoves.go).
	clientArgs [][]byte
	// reroutes counts how often the request ran again because its slot moved (reroute), which
	// it may until rerouteBy.
	reroutes  int
	rerouteBy time.Time
	db        int // the database its keys are in
	path      execPath
	// home is the replica of the raft group its keys are in (groups.go): the node itself in a
	// cluster of one group.
	home Replica
	// spans: a request of a several-group cluster that concerns every group (spansGroups); it
	// runs here and reaches the groups itself. pinned: this is one group's run of such a
	// request (acrossGroups), in home alone.
	spans, pinned bool
	// script is the running script whose overlay a redis.call evaluates on (path onScript).
	script *scriptRun
	// slot is the pipeline slot of a command running while others of its connection are in
	// flight: it yields the connection while it waits (await). Nil when it runs alone.
	slot *inflight
	// trackReads: this command is a script sent in a tracking mode that tracks its reads: the
	// reads its redis.calls make (or, forwarded, its declared keys) are tracked.
	trackReads bool
	// key1 holds the key list of a one-key staged command (oneKey): no allocation for it.
	key1 [1][]byte
	// halves, set for a staged command, is where a LOCK or UNLOCK keeps its halves (locks.go).
	halves *lockHalves
	// resume, set for a LOCK ... WAIT forwarded to the leader, goes on waiting here when the link
	// to the leader breaks (handoff.go: resumeWait); it reports whether it replied.
	resume func() bool
}

// oneKey returns a key list of key alone, valid as long as r.
func (r *request) oneKey(key []byte) [][]byte {
	r.key1[0] = key
	return r.key1[:]
}

// execPath is where a request's evaluation runs, decided once by dispatch.
type execPath uint8

const (
	// onNode: through the node, against the leader's view (linearizable).
	onNode execPath = iota
	// onLocal: a READONLY connection's read on a follower, against this node's applied table
	// (possibly stale).
	onLocal
	// onScript: a redis.call inside a script, against the script's overlay; the script's
	// commands replicate together when it ends.
	onScript
	// onLeader: on a follower, forwarded to the leader (forward.go).
	onLeader
)

// run executes the request along its path: forwarded, or by its command's handler.
func (r *request) run() {
	if r.path == onLeader {
		r.route(r.cmd.write)
		return
	}
	r.cmd.run(r)
}

// exec evaluates eval along the request's path and returns the applied results of the commands
// it yields (none for a read). A write command's evaluation touches the watches of the keys it
// writes (transactions.go), when any key is watched.
func (r *request) exec(keys [][]byte, eval node.Eval) ([]fsm.Result, error) {
	eval = r.touchingWatched(eval)
	switch r.path {
	case onScript:
		return r.script.ov.apply(eval(r.script.ov)), nil
	case onLocal:
		guard, eval := r.s.guardFor(r.cmd.keyArgs(r.clientArgs), eval)
		r.home.ExecLocal(func(v node.View) { eval(v) })
		return nil, guard.err() // this node's copy of the group no longer serves the keys' slot
	}
	var guard *slotGuard
	if !r.spans && !r.pinned && r.s.slotsMoved() {
		guard, eval = r.s.guardFor(r.cmd.keyArgs(r.clientArgs), eval)
	}
	res, err := r.home.Exec(r.c.proposeCtx(), keys, eval, r.await)
	if err == nil {
		err = guard.err()
	}
	return res, err
}

// touchingWatched is eval, for a write command while some key is watched, made to touch the
// watches of the keys it writes.
func (r *request) touchingWatched(eval node.Eval) node.Eval {
	if r.cmd.write && r.s.watches.active() {
		return r.s.watches.touching(eval, r.c)
	}
	return eval
}

// await is how a request waits for its proposal to commit (or its forwarded request's reply).
// A pipelined one lets go of the connection so the next command can run, and takes it back
// when the outcome is in; one running alone just waits.
func (r *request) await(wait func()) {
	if r.slot == nil {
		wait()
		return
	}
	r.slot.yield()
	r.c.baton.Unlock()
	wait()
	r.c.baton.Lock()
}

// wrongArgs replies Redis's arity error for the request's command (or a subcommand of it).
func (r *request) wrongArgs(name string) {
	r.w.Error("ERR wrong number of arguments for '" + name + "' command")
}
