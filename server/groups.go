package server

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
)

// Raft groups (DESIGN.md §13). A cluster created with G groups serves each of Redis Cluster's
// 16384 hash slots from one group: the slots split into G even ranges, in order. A request
// runs in the group of its keys (its home): the keys of one request must share a slot, as in
// Redis Cluster, and a request without keys runs in group 0, which also holds what belongs to
// no key (ACL users, functions, the cluster's members). With one group every request's home
// is the node itself and nothing here changes what a request does.

// hashSlots is Redis Cluster's number of hash slots.
const hashSlots = fsm.HashSlots

// errCrossSlot is Redis Cluster's reply to a request whose keys are in different slots.
const errCrossSlot = "CROSSSLOT Keys in request don't hash to the same slot"

// GroupOfKey is the raft group that serves key by default in a cluster of groups raft groups,
// before any slot moved (for tools and tests outside the server).
func GroupOfKey(key []byte, groups int) int { return fsm.GroupOfSlot(fsm.KeySlot(key), groups) }

// ownerOfSlot is the group that serves slot as this node's replicas have applied it, and
// whether a move of it is in flight (frozen: its requests wait for the move to end). Slots
// move between groups (fsm/slotmoves.go): each group's table says which it owns, and the owner
// is the one that owns it at the highest epoch.
func (s *Server) ownerOfSlot(slot int) (g int, frozen bool) {
	if !s.slotsMoved() {
		return fsm.GroupOfSlot(slot, len(s.groups)), false
	}
	g, rec, ok := fsm.OwnerOf(len(s.groups), s.slotsOf, slot)
	if !ok {
		// Released by its source and not yet imported by its target as far as this node's
		// replicas have applied (each group applies on its own). A source releases only after
		// its target's import committed: the target of the latest release serves it.
		if to, ok := fsm.ReleasedTo(len(s.groups), s.slotsOf, slot); ok && to < len(s.groups) {
			return to, false
		}
		return fsm.GroupOfSlot(slot, s.layout), true
	}
	return g, rec.State == fsm.SlotFrozen
}

// slotsMoved reports whether a move ever named a group on this node: until then every slot is
// where the default ranges put it, and routing needs no look at the tables. On a node of one
// group it is a move out of group 0 to a group its cluster added (RAFT GROUPS) before this node
// was restarted to run it: its requests on those slots are then refused (errSlotNotRunHere).
func (s *Server) slotsMoved() bool {
	if s.slotsHaveMoved.Load() {
		return true
	}
	for g := range s.groups {
		if s.slotsOf(g).Moved() {
			s.slotsHaveMoved.Store(true) // a group's records never go back to the default ranges
			return true
		}
	}
	return false
}

// slotsOf is group g's ownership of the slots as this node applied it (SlotOwnership), or its
// default ranges' for a replica that cannot say.
func (s *Server) slotsOf(g int) fsm.Slots {
	if o, ok := s.groups[g].(SlotOwnership); ok {
		return o.Slots()
	}
	return fsm.Slots{}
}

// slotRanges is each group's slot ranges, as routing sees them now (index = group).
func (s *Server) slotRanges() [][][2]int {
	out := make([][][2]int, len(s.groups))
	if !s.slotsMoved() {
		for g := range s.groups {
			first, last := fsm.DefaultSlots(g, len(s.groups))
			out[g] = [][2]int{{first, last}}
		}
		return out
	}
	for slot := 0; slot < hashSlots; slot++ {
		g, _ := s.ownerOfSlot(slot)
		if n := len(out[g]); n > 0 && out[g][n-1][1] == slot-1 {
			out[g][n-1][1] = slot
		} else {
			out[g] = append(out[g], [2]int{slot, slot})
		}
	}
	return out
}

// GroupSlots is the slot ranges group g serves now as this node's replicas say ("first-last"
// words; empty when every slot moved away), and the move out of it in flight, if any, for the
// status page.
func (s *Server) GroupSlots(g int) string {
	if !s.grouped() {
		return "0-16383"
	}
	out := formatRanges(s.slotRanges()[g], " ")
	if mv, moving := s.slotsOf(g).Moving(); moving {
		out += fmt.Sprintf(" (moving %d-%d to group %d)", mv.First, mv.Last, mv.Target)
	}
	return out
}

// formatRanges is ranges as "first-last" words joined by sep.
func formatRanges(ranges [][2]int, sep string) string {
	var b strings.Builder
	for i, r := range ranges {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(strconv.Itoa(r[0]) + "-" + strconv.Itoa(r[1]))
	}
	return b.String()
}

// grouped reports whether the cluster runs several groups.
func (s *Server) grouped() bool { return len(s.groups) > 1 }

// groupOfKeys is the group of keys (client keys, before their database prefix; 0 for none),
// and false when they are in different slots.
func (s *Server) groupOfKeys(keys [][]byte) (int, bool) {
	if !s.grouped() || len(keys) == 0 {
		return 0, true
	}
	slot := fsm.KeySlot(keys[0])
	for _, k := range keys[1:] {
		if fsm.KeySlot(k) != slot {
			return 0, false
		}
	}
	g, _ := s.ownerOfSlot(slot)
	return g, true
}

// homeOfTableKeys is the replica of table keys (with their database prefix, as the node's
// requests carry them): the group of the first key's slot. The caller knows they share one.
func (s *Server) homeOfTableKeys(keys [][]byte) Replica {
	if !s.grouped() || len(keys) == 0 {
		return s.node
	}
	return s.groups[s.groupOfTableKey(keys[0])]
}

// groupOfTableKey is the group of a table key (0 with one group).
func (s *Server) groupOfTableKey(key []byte) int {
	if !s.grouped() {
		return 0
	}
	g, _ := s.ownerOfSlot(fsm.SlotOf(key))
	return g
}

// servesKey reports whether group g's table here serves the slot of table key key (owns it,
// or is moving it away): whose the key is by that group's own record, not by routing, which
// reads every group's replica and may be ahead of or behind g's.
func (s *Server) servesKey(g int, key []byte) bool {
	if !s.grouped() {
		return true
	}
	st := s.slotsOf(g).Of(fsm.SlotOf(key)).State
	return st == fsm.SlotOwned || st == fsm.SlotFrozen
}

// groupIndex is the number of the group whose replica is home.
func (s *Server) groupIndex(home Replica) int {
	for g, rep := range s.groups {
		if rep == home {
			return g
		}
	}
	return 0
}

// keyCount is the number of keys in every group's table on this node.
func (s *Server) keyCount() int {
	if !s.grouped() {
		return s.node.Keys()
	}
	n := 0
	for _, g := range s.groups {
		n += g.Keys()
	}
	return n
}

// eachGroup runs f on this node's applied table of every group, in group order.
func (s *Server) eachGroup(f func(v node.View)) {
	for _, g := range s.groups {
		g.ExecLocal(f)
	}
}

// logEnds is where each group's log ends now (LogEnd), index = group.
func (s *Server) logEnds() []node.LogEnd {
	out := make([]node.LogEnd, len(s.groups))
	for i, g := range s.groups {
		out[i] = g.LogEnd()
	}
	return out
}

// inHome reports whether keys (client keys; none counts as in) are all in home's group.
func (s *Server) inHome(home Replica, keys [][]byte) bool {
	if len(keys) == 0 {
		return true
	}
	g, ok := s.groupOfKeys(keys)
	return ok && s.groups[g] == home
}

// Reads of a whole database in a several-group cluster (DBSIZE, KEYS, SCAN, LOCKS, the lock
// page) read this node's applied table of every group, as a READONLY connection's read does:
// a write another node acknowledged a moment ago may not show yet. Their cursors are table
// keys, in one order over all groups: a walk resumes at the smallest key any group stopped
// at (resume), every group having looked at all its keys below it, so a key present for the
// whole walk is returned once.

// spanKeys is listKeys over every group's table on this node: the keys below the walk's resume
// point (nil: the walk is over), in key order.
func (s *Server) spanKeys(db int, from []byte, limit int64, pattern *glob, typ []byte) (keys [][]byte, resume []byte) {
	parts := make([][][]byte, len(s.groups))
	for g, rep := range s.groups {
		var next []byte
		rep.ExecLocal(func(v node.View) { parts[g], next = listKeys(v, db, from, limit, pattern, typ) })
		resume = earlier(resume, next)
	}
	for _, part := range parts {
		for _, k := range part {
			if resume == nil || bytes.Compare(k, resume[1:]) < 0 { // resume is a key of db
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, bytes.Compare)
	return keys, resume
}

// spanLocks is listLocks over every group's table on this node, as spanKeys; each, when not
// nil, is called with each group's view and the entries it returned.
func (s *Server) spanLocks(db byte, from []byte, limit int, pattern *glob, kind string, readable func([]byte) bool,
	each func(v node.View, entries []lockEntry)) (page []lockEntry, resume []byte) {
	parts := make([][]lockEntry, len(s.groups))
	for g, rep := range s.groups {
		var next []byte
		rep.ExecLocal(func(v node.View) {
			parts[g], next = listLocks(v, db, from, limit, pattern, kind, readable)
			if each != nil {
				each(v, parts[g])
			}
		})
		resume = earlier(resume, next)
	}
	for _, part := range parts {
		for _, e := range part {
			if resume == nil || bytes.Compare(e.at, resume) < 0 {
				page = append(page, e)
			}
		}
	}
	slices.SortFunc(page, func(a, b lockEntry) int { return bytes.Compare(a.at, b.at) })
	return page, resume
}

// earlier is the earlier of two resume points, nil meaning none (past every key).
func earlier(a, b []byte) []byte {
	switch {
	case a == nil:
		return b
	case b == nil || bytes.Compare(a, b) <= 0:
		return a
	}
	return b
}

// spansGroups reports whether a command (with its arguments) concerns every group of a
// several-group cluster: the whole-database reads above, and the writes acrossGroups sends to
// every group (a flush; a script or function library loaded or dropped, so that EVALSHA and
// FCALL find it in the group of whatever keys they name).
func spansGroups(cmd *command, args [][]byte) bool {
	switch cmd.name {
	case "dbsize", "keys", "scan", "locks", "flushdb", "flushall":
		return true
	case "script":
		return len(args) > 1 && (is(args[1], "load") || is(args[1], "flush"))
	case "function":
		return len(args) > 1 && (is(args[1], "load") || is(args[1], "delete") || is(args[1], "flush") || is(args[1], "restore"))
	}
	return false
}

// acrossGroups runs r, a write that concerns every group (spansGroups), in each group: here in
// the groups this node leads (a pinned copy of r each), and forwarded to each other node that
// leads some, which runs it in the groups it leads and answers which (groupReplies). A group
// that no run covered (its leadership moved while the request travelled) is tried again at its
// leader then, for acrossAttempts rounds; one still not covered makes the reply an error that
// names it. The reply is the first error any run gave, else the first run's. It is not atomic
// across groups: as on Redis Cluster, where a client sends it to each master, another client
// may see some groups changed before others, and a group whose leadership moved into a node
// after this node ran it there may run it twice.
func (r *request) acrossGroups() {
	if r.c.hop.forwarded {
		r.groupReplies()
		return
	}
	replies := make([][]byte, len(r.s.groups))
	covered := 0
	for attempt := 0; attempt < acrossAttempts && covered < len(r.s.groups); attempt++ {
		if attempt > 0 {
			time.Sleep(acrossRetryWait) // for the group's new leader to be known
		}
		forwardedTo := map[string]bool{}
		for g, home := range r.s.groups {
			if replies[g] != nil {
				continue
			}
			q := r.pinnedTo(home)
			if home.IsLeader() {
				replies[g] = q.runBuffered()
				covered++
				continue
			}
			l := home.Leadership()
			if l.ID == "" || l.ID == r.s.cfg.NodeID || l.ClientAddr == "" || forwardedTo[l.ID] {
				// No leader yet, or this node before it is ready to lead, or one whose address is
				// not known yet: the next round tries again. Or that node runs it in every group
				// it leads.
				continue
			}
			forwardedTo[l.ID] = true
			buf := q.captureReply()
			reply, ok := q.forward([][][]byte{r.args}, true)
			if !ok {
				q.w.Flush()
				replies[g] = buf.Bytes() // the forward's own error: the client hears it
				covered++
				continue
			}
			ran, err := parseGroupReplies(reply, len(r.s.groups))
			if err != nil {
				replies[g] = reply // an error the node gave before running it anywhere
				covered++
				continue
			}
			for rg, b := range ran {
				if replies[rg] == nil { // a second run's reply (FUNCTION LOAD's "already exists") is not the client's
					replies[rg] = b
					covered++
				}
			}
		}
	}
	for g, b := range replies {
		if b == nil {
			r.s.metrics.refuse(refusedNoLeader)
			r.w.Error(fmt.Sprintf("TRYAGAIN raft group %d had no leader that ran it within %d tries; it ran in the groups that had one: send it again", g, acrossAttempts))
			return
		}
	}
	for _, b := range replies {
		if len(b) > 0 && b[0] == '-' {
			r.w.Raw(b)
			return
		}
	}
	r.w.Raw(replies[0])
}

// acrossAttempts and acrossRetryWait bound acrossGroups's rounds: a leadership transfer
// (cluster/balance.go) completes within a few heartbeats.
const (
	acrossAttempts  = 4
	acrossRetryWait = 100 * time.Millisecond
)

// pinnedTo is a copy of r that runs in home's group only.
func (r *request) pinnedTo(home Replica) *request {
	q := *r
	q.home, q.pinned, q.path = home, true, onNode
	return &q
}

// runBuffered runs q and returns its reply's bytes, in the client's protocol.
func (q *request) runBuffered() []byte {
	buf := q.captureReply()
	q.cmd.run(q)
	q.w.Flush()
	return buf.Bytes()
}

// captureReply makes q write its reply, in the client's protocol, to the buffer it returns
// (once q.w is flushed).
func (q *request) captureReply() *bytes.Buffer {
	var buf bytes.Buffer
	proto := q.w.Protocol()
	q.w = resp.NewWriter(&buf)
	q.w.SetProtocol(proto)
	return &buf
}

// groupReplies runs r, forwarded here by a peer's acrossGroups, in every group this node
// leads, and answers which: an array of (group number, that run's reply) pairs, empty when it
// leads none. Only acrossGroups reads it (spansGroups writes reach a peer only through it); the
// commands it runs never reply with an array themselves.
func (r *request) groupReplies() {
	var out bytes.Buffer
	n := 0
	for g, home := range r.s.groups {
		if !home.IsLeader() {
			continue
		}
		out.WriteString(":" + strconv.Itoa(g) + "\r\n")
		out.Write(r.pinnedTo(home).runBuffered())
		n++
	}
	r.w.Raw(append([]byte("*"+strconv.Itoa(2*n)+"\r\n"), out.Bytes()...))
}

// parseGroupReplies reads groupReplies's answer: each group's reply by group number. Anything
// else (an error the node answered before running it) is an error.
func parseGroupReplies(b []byte, groups int) (map[int][]byte, error) {
	// The array's elements are walked one by one, keeping each run's reply raw, to relay as it is.
	head, rest, found := bytes.Cut(b, []byte("\r\n"))
	n, err := strconv.Atoi(string(head[min(1, len(head)):]))
	if !found || len(head) == 0 || head[0] != '*' || err != nil || n < 0 || n%2 != 0 {
		return nil, errors.New("not a groups reply")
	}
	out := map[int][]byte{}
	for range n / 2 {
		gv, after, err := resp.ParseValue(rest)
		if err != nil || gv.Kind != resp.KindInteger || gv.Int < 0 || gv.Int >= int64(groups) {
			return nil, errors.New("not a groups reply")
		}
		_, next, err := resp.ParseValue(after)
		if err != nil {
			return nil, errors.New("not a groups reply")
		}
		out[int(gv.Int)] = after[:len(after)-len(next)]
		rest = next
	}
	if len(rest) > 0 {
		return nil, errors.New("not a groups reply")
	}
	return out, nil
}

// tableStats is the node's figures (Replica.Stats) with the table's counts (locks, leases,
// pending keys, expiries, keys per database) summed over every group's table on this node.
func (s *Server) tableStats() node.Stats {
	ns := s.node.Stats()
	for _, rep := range s.groups[1:] {
		gs := rep.Stats()
		ns.Locks += gs.Locks
		ns.Leases += gs.Leases
		ns.PendingKeys += gs.PendingKeys
		ns.Expired += gs.Expired
		ns.GhostReleases += gs.GhostReleases
		for db := range ns.DBKeys {
			ns.DBKeys[db] += gs.DBKeys[db]
			ns.DBLeases[db] += gs.DBLeases[db]
		}
	}
	return ns
}

// planInfo is INFO raft's line for a groups plan this node does not run yet:
// raft_groups_planned, the groups it runs from its next start.
func (s *Server) planInfo() []infoField {
	p, ok := s.node.(GroupsPlanner)
	if !ok {
		return nil
	}
	if plan, ok := p.GroupsPlan(); ok && plan.Groups > len(s.groups) {
		return []infoField{{"raft_groups_planned", strconv.Itoa(plan.Groups)}}
	}
	return nil
}

// groupsInfo is INFO raft's lines for a several-group cluster (the lines above them are group
// 0's): the number of groups, and for each its slots, its leader as this node knows it, its
// term and its applied index here.
func (s *Server) groupsInfo() []infoField {
	if !s.grouped() {
		return s.planInfo()
	}
	out := []infoField{{"raft_groups", strconv.Itoa(len(s.groups))},
		{"raft_slot_reroutes", strconv.FormatUint(s.metrics.reroutes.Load(), 10)}} // requests run again after their slot moved
	out = append(out, s.planInfo()...)
	ranges := s.slotRanges()
	for g, rep := range s.groups {
		gs := rep.Stats()
		out = append(out, infoField{"raft_group" + strconv.Itoa(g),
			"slots=" + formatRanges(ranges[g], ";") + ",state=" + gs.State + ",leader=" + rep.Leadership().ID +
				",term=" + strconv.FormatUint(gs.Term, 10) + ",applied=" + strconv.FormatUint(gs.AppliedIndex, 10) +
				",keys=" + strconv.Itoa(gs.Locks)})
	}
	return out
}
