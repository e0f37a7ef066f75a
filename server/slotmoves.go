package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Requests whose slot moves (docs/groups.md, "Moving slots"). A request is routed by this
// node's replicas of every group (ownerOfSlot), which may be behind the group it reaches: the
// group's state machine refuses, at apply, a command on a slot it is moving away (frozen) or no
// longer serves, and the request comes back with node.SlotError, nothing applied. replyError
// then runs it again where the slot is served now (reroute): a request waits here while the
// move is in flight (it is not refused), then runs in the slot's new group, on this node if it
// leads that group, else forwarded to its leader, as dispatch would have done.

const (
	// moveWait bounds how long a request waits for a move of its slot to end: a move holds
	// the slot for one import's commit, and a mover that lost its leader is undone by the next
	// leader within a few election timeouts.
	moveWait = 10 * time.Second
	// movePoll is how often a waiting request looks at the slot's owner again; maxMoveBackoff
	// bounds the pause before a request is routed again after a refusal (this node's replicas
	// of the groups catch up meanwhile: each group's apply runs on its own).
	movePoll       = 2 * time.Millisecond
	maxMoveBackoff = 50 * time.Millisecond
	// maxReroutes bounds how often one request is routed again, with moveWait.
	maxReroutes = 64
)

// moveRunTimeout bounds one RAFT MOVESLOTS: each of its ranges' moves, and their decisions
// (a move not decided by then is left to the recovery loop of its source's leader).
const moveRunTimeout = 5 * time.Minute

// moveWaitOf is how long a forwarded RAFT MOVESLOTS may legitimately run on the source's leader.
func moveWaitOf(cmd *command, args [][]byte) time.Duration {
	if cmd.name == "raft" && len(args) > 1 && is(args[1], "moveslots") {
		return moveRunTimeout
	}
	return 0
}

// errSlotMoving is the reply to a request whose slot moved while it ran and that cannot be
// run again where it belongs now (a transaction's EXEC, a request that spans groups, or one
// whose slot moved maxReroutes times). Nothing of it applied.
const errSlotMoving = "TRYAGAIN the keys' hash slot moved to another raft group while the request ran; nothing was applied, retry"

// errSlotNotRunHere is the reply of a node that still runs one raft group to a request whose slot
// moved to a group its cluster added (docs/groups.md, "From one group to several").
const errSlotNotRunHere = "TRYAGAIN the keys' hash slot moved to a raft group this node does not run yet: the cluster planned more raft groups (RAFT GROUPS) and this node must be restarted to run them; nothing was applied"

// rerouteable reports whether the request can run again from its start elsewhere: it names its
// keys in its own arguments, outside a transaction, and is not one group's part of a request
// that spans them.
func (r *request) rerouteable() bool {
	return r.s.grouped() && r.cmd.leader && !r.spans && !r.pinned && r.path != onScript && r.cmd.name != "exec" &&
		r.c.sess.multi == nil && len(r.cmd.keyArgs(r.clientArgs)) > 0 && r.reroutes < maxReroutes
}

// reroute runs the request again in the group that serves its keys' slot once no move of it
// is in flight, replying as the request does (or errSlotMoving when it cannot, within moveWait
// of its first refusal).
func (r *request) reroute() {
	if !r.s.grouped() {
		// A node of one group whose cluster planned more (RAFT GROUPS) and moved slots to them
		// before this node was restarted to run them (or is moving them now).
		if keys := r.cmd.keyArgs(r.clientArgs); len(keys) > 0 && r.s.slotsOf(0).Of(fsm.KeySlot(keys[0])).State == fsm.SlotFrozen {
			r.w.Error(errSlotMoving)
			return
		}
		r.w.Error(errSlotNotRunHere)
		return
	}
	if !r.rerouteable() {
		r.w.Error(errSlotMoving)
		return
	}
	if r.reroutes == 0 {
		r.rerouteBy = time.Now().Add(moveWait)
	}
	pause := time.Duration(0)
	if r.reroutes > 0 {
		pause = min(movePoll<<min(r.reroutes, 5), maxMoveBackoff)
	}
	r.reroutes++
	var g int
	var ok bool
	// The wait lets go of the connection, as a proposal's does: a pipelining client's other
	// commands go on meanwhile.
	r.await(func() {
		time.Sleep(pause)
		g, ok = r.s.awaitSlot(r.c.ctx, fsm.KeySlot(r.cmd.keyArgs(r.clientArgs)[0]), r.rerouteBy)
	})
	if !ok {
		r.w.Error(errSlotMoving)
		return
	}
	r.s.metrics.reroutes.Add(1)
	r.home, r.args = r.s.groups[g], r.clientArgs
	r.c.place(r)
	r.run()
}

// slotFrozenAnywhere reports whether a group's replica here has slot frozen: a move of it not
// decided yet, even if another group serves it already (imported, its source's release still
// to come). A new move of the slot waits for that decision.
func (s *Server) slotFrozenAnywhere(slot int) bool {
	for g := range s.groups {
		if s.slotsOf(g).Of(slot).State == fsm.SlotFrozen {
			return true
		}
	}
	return false
}

// awaitSlot waits, until deadline or ctx's end, while a move of slot is in flight as this
// node's replicas see it, and returns the group that serves it then. It looks again after
// movePoll, then less and less often (up to maxMoveBackoff): thousands of requests waiting on a
// frozen slot must not cost the node more than the move.
func (s *Server) awaitSlot(ctx context.Context, slot int, deadline time.Time) (int, bool) {
	for pause := movePoll; ; pause = min(2*pause, maxMoveBackoff) {
		g, frozen := s.ownerOfSlot(slot)
		if !frozen {
			return g, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, false
		}
		time.Sleep(pause)
	}
}

// slotGuard makes a request's evaluation run only in a group that serves its keys' slot, on
// a cluster whose slots have moved: the state machine refuses a command on a slot it does not
// serve, but an evaluation that proposes nothing (a read, or a refusal such as UNLOCK's of a
// key it does not find) would answer from a table the keys left. The guard looks at the group's
// ownership in the same view, under the same lock, as the evaluation it wraps.
type slotGuard struct {
	slots           []int
	refused, frozen bool
}

// guardFor returns the guard of a request of keys (client keys) and eval wrapped by it, or nil
// and eval as it is when no slot ever moved here (routing by the default ranges is exact).
func (s *Server) guardFor(keys [][]byte, eval node.Eval) (*slotGuard, node.Eval) {
	if len(keys) == 0 || !s.slotsMoved() {
		return nil, eval
	}
	if !s.grouped() {
		// A node of one group takes keys of any slots in one request: each is checked.
		slots := make([]int, len(keys))
		for i, k := range keys {
			slots[i] = fsm.KeySlot(k)
		}
		return s.guardForSlots(slots, eval)
	}
	return s.guardForSlots([]int{fsm.KeySlot(keys[0])}, eval)
}

// guardForSlots is guardFor of a request on the keys of slots (a transaction's may be several
// slots of one group).
func (s *Server) guardForSlots(slots []int, eval node.Eval) (*slotGuard, node.Eval) {
	if len(slots) == 0 || !s.slotsMoved() {
		return nil, eval
	}
	g := &slotGuard{slots: slots}
	return g, func(v node.View) []fsm.Command {
		owned := v.Slots()
		g.refused, g.frozen = false, false
		for _, slot := range g.slots {
			if st := owned.Of(slot).State; st != fsm.SlotOwned {
				g.refused, g.frozen = true, st == fsm.SlotFrozen
				return nil
			}
		}
		return eval(v)
	}
}

// err is the request's outcome as the guard saw it: a SlotError when its evaluation found the
// slot not served, nil otherwise (or for no guard).
func (g *slotGuard) err() error {
	if g == nil || !g.refused {
		return nil
	}
	return &node.SlotError{Frozen: g.frozen}
}

// movedReply reports whether reply, a forwarded request's, is the leader's -MOVED: it found
// the slot served by another group's leader, on another node, which a forwarded request is
// not sent on to (no chains). A connection that routes by slots passes it on to its client; for
// any other the forwarding node routes the request again itself.
func movedReply(reply []byte) bool {
	return len(reply) > 7 && string(reply[:7]) == "-MOVED "
}

// moveSlots serves RAFT MOVESLOTS and RAFT MOVECMD.
//
// RAFT MOVESLOTS first last group moves the hash slots first to last, all served by one group
// now, to raft group group, and replies how many keys moved. It runs on the node that leads the
// source group (forwarded there from any other).
//
// RAFT MOVECMD IMPORT move floor keys, and RAFT MOVECMD ABORT move, propose one command of a
// move in its target group, on that group's leader: what a mover on another node sends (the
// mover's own part, as the peer user). RAFT MOVECMD PROBE answers +OK: a mover asks it first. +OK when it applied; -MOVEREFUSED when the target
// refused it (an import after its abort, an abort after its import).
func (r *request) moveSlots(sub string) {
	if !r.s.grouped() || r.s.mover == nil {
		if len(r.s.planInfo()) > 0 {
			r.w.Error("ERR RAFT " + strings.ToUpper(sub) + ": this node does not run the raft groups its cluster planned yet (RAFT GROUPS): restart it, and move slots once every node runs them (docs/groups.md)")
			return
		}
		r.w.Error("ERR RAFT " + strings.ToUpper(sub) + " needs a cluster of several raft groups (raftlock --groups, docs/groups.md)")
		return
	}
	if sub == "movecmd" {
		r.moveCommand()
		return
	}
	if len(r.args) != 5 {
		r.wrongArgs("raft|moveslots")
		return
	}
	first, ok1 := parseInt(r.args[2])
	last, ok2 := parseInt(r.args[3])
	target, ok3 := parseInt(r.args[4])
	switch {
	case !ok1 || !ok2 || !ok3:
		r.w.Error(errNotInt)
		return
	case first < 0 || last < first || last >= hashSlots:
		r.w.Error(fmt.Sprintf("ERR RAFT MOVESLOTS: slots %d-%d are not a range of 0-%d", first, last, hashSlots-1))
		return
	case target < 0 || target >= int64(len(r.s.groups)):
		r.w.Error(fmt.Sprintf("ERR RAFT MOVESLOTS: no raft group %d (the cluster runs %d)", target, len(r.s.groups)))
		return
	}
	source, _ := r.s.ownerOfSlot(int(first))
	for slot := int(first); slot <= int(last); slot++ {
		if g, frozen := r.s.ownerOfSlot(slot); g != source || frozen || r.s.slotFrozenAnywhere(slot) {
			r.w.Error(fmt.Sprintf("ERR RAFT MOVESLOTS: slots %d-%d are not all served by one group now, with no move of them in flight: slot %d is group %d's%s",
				first, last, slot, g, map[bool]string{true: ", and a move of it is being decided"}[frozen || r.s.slotFrozenAnywhere(slot)]))
			return
		}
	}
	if source == int(target) {
		r.w.Error(fmt.Sprintf("ERR RAFT MOVESLOTS: slots %d-%d are group %d's already", first, last, target))
		return
	}
	r.home = r.s.groups[source]
	if !r.home.IsLeader() {
		r.route(true) // the source group's leader moves them
		return
	}
	// Not the connection's context: a move runs to its end (or its decision) even if the client
	// that asked hangs up.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.c.ctx), moveRunTimeout)
	defer cancel()
	keys, err := r.s.mover.MoveSlots(ctx, source, int(first), int(last), int(target))
	if err != nil {
		r.w.Error("ERR RAFT MOVESLOTS: " + err.Error())
		return
	}
	r.w.Int(int64(keys))
}

// moveCommand is RAFT MOVECMD (moveSlots).
func (r *request) moveCommand() {
	var cmd fsm.Command
	switch {
	case len(r.args) == 6 && is(r.args[2], "import"):
		floor, ok := parseInt(r.args[4])
		if !ok || floor < 0 {
			r.w.Error(errNotInt)
			return
		}
		cmd = fsm.Command{Kind: fsm.KindImportSlots, Key: r.args[3], Owner: r.args[5], Token: fsm.Token(floor)}
	case len(r.args) == 4 && is(r.args[2], "abort"):
		cmd = fsm.Command{Kind: fsm.KindAbortSlots, Key: r.args[3]}
	case len(r.args) == 3 && is(r.args[2], "probe"):
		// A mover asks it before it freezes a range: that it may send the import and the
		// abort here at all (the peer user's ACL allows raft|movecmd).
		r.w.SimpleString("OK")
		return
	default:
		r.wrongArgs("raft|movecmd")
		return
	}
	if err := cmd.Validate(); err != nil {
		r.w.Error("ERR RAFT MOVECMD: " + err.Error())
		return
	}
	mv, _ := fsm.DecodeMove(cmd.Key)
	if mv.Target >= len(r.s.groups) {
		r.w.Error(fmt.Sprintf("ERR RAFT MOVECMD: no raft group %d (the cluster runs %d)", mv.Target, len(r.s.groups)))
		return
	}
	r.home = r.s.groups[mv.Target]
	if !r.home.IsLeader() {
		r.route(true)
		return
	}
	res, err := r.home.Exec(r.c.proposeCtx(), nil, func(node.View) []fsm.Command { return []fsm.Command{cmd} }, r.await)
	switch {
	case err != nil:
		r.replyError(err)
	case res[0].Status == fsm.StatusSlots:
		r.w.SimpleString("OK")
	default:
		r.w.Error("MOVEREFUSED raft group " + strconv.Itoa(mv.Target) + " refused the move's " + cmd.Kind.String())
	}
}
