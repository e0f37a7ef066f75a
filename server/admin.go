package server

// Administration: RAFT (membership, leadership, snapshots, stats, digest) and DEBUG CLOCK-SHIFT.

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// RAFT SNAPSHOT writes, and RAFT DIGEST hashes, the whole table: each runs alone, at most once
// per snapshotEvery or digestEvery on a node. RAFT BACKUP copies it (docs/backup.md): one at a
// time, at most once per backupEvery, so a node never holds more than one backup in memory.
var snapshotEvery, digestEvery, backupEvery = 5 * time.Second, 250 * time.Millisecond, time.Second

// raftOnLeader lists the RAFT subcommands that must run on the leader.
var raftOnLeader = map[string]bool{"add": true, "promote": true, "remove": true, "transfer": true, "announce": true, "readindex": true, "groups": true}

// RAFT MEMBERS | MEMBER id | ADD id raftaddr [NONVOTER] [CLIENT addr] | PROMOTE id | REMOVE id [FORCE] |
// TRANSFER [id] | ANNOUNCE id clientaddr raftaddr | SNAPSHOT [group] | STATS | DIGEST [group] |
// BACKUP | READINDEX [group] | FORWARDED [user] | ORIGIN id
//
// ADD always adds a non-voter; without NONVOTER the leader promotes it once it has caught up.
// ADD, PROMOTE and REMOVE are refused when they could leave fewer reachable voters than a
// quorum; REMOVE of a voter the leader reaches (a live one) needs FORCE. ANNOUNCE is the
// members' own (a follower telling the leader its client address, sent to the leader directly,
// which calls that address back: never forwarded), and MEMBER and READINDEX too: a node whose
// log drops it asks the leader whether that removal committed, and a follower taking a backup
// asks the leader up to where it must apply (READINDEX g: raft group g's leader, on a cluster of
// several groups). BACKUP replies with a backup file of the whole
// state as one bulk string (`raftlock backup` writes it to a file): consistent with every write
// acknowledged before it, on any node.
func cmdRaft(r *request) {
	sub := lower(r.args[1])
	admin := r.s.admin
	if admin == nil && sub != "forwarded" && sub != "origin" && sub != "stats" && sub != "pubsub" {
		r.w.Error(errNoAdmin)
		return
	}
	group, named, ok := r.groupOption(sub)
	if !ok {
		return
	}
	if sub == "announce" && !r.s.node.IsLeader() {
		// A member announces to the leader itself, which calls it back: a forwarded announcement
		// would come from whoever reached a follower.
		r.w.Error("ERR RAFT ANNOUNCE is sent by a member to the leader directly; this node is not the leader")
		return
	}
	if sub == "moveslots" || sub == "movecmd" {
		r.moveSlots(sub)
		return
	}
	leaderOf := r.s.node
	if group >= 0 && len(r.s.groupAdmins) > 0 {
		// The command acts on raft group `group` alone: its administration, and its leader for
		// what must run on one (route forwards there).
		admin = r.s.groupAdmins[group]
		r.home = r.s.groups[group]
		leaderOf = r.home
	}
	if raftOnLeader[sub] && !leaderOf.IsLeader() {
		r.route(true) // a membership change may apply even if the link fails
		return
	}
	r.args = r.args[:len(r.args)-named] // a GROUP option goes with a forwarded command, not further
	wrongArgs := func() { r.wrongArgs("raft|" + sub) }
	switch sub {
	case "forwarded":
		// Only a peer's link gets here: RAFT FORWARDED is @admin, refused to other users.
		if len(r.args) > 3 {
			wrongArgs()
			return
		}
		if len(r.args) == 3 {
			// The link acts for the follower's client from now on: its commands are checked
			// as that user's, and it closes if that user is deleted.
			name := string(r.args[2])
			if u := r.s.users()[name]; u == nil || !u.enabled {
				r.w.Error(errWrongPass)
				return
			}
			r.c.user.Store(&name)
			r.c.authed = true
		}
		r.c.hop.forwarded = true
		if r.c.hop.origin.Load() == nil {
			// A follower that did not say which it is (an older one): its clients' locks
			// name no node, rather than this one.
			ctx := node.WithOrigin(r.c.ctx, "")
			r.c.hop.origin.Store(&ctx)
		}
		r.w.SimpleString("OK")
	case "origin":
		// A forwarding link says which follower it comes from, while it is still logged in as
		// a peer (the subcommand is @admin): the locks its requests take name that node (LOCKS,
		// LOCKWAITERS). It only labels; nothing is decided by it.
		if len(r.args) != 3 {
			wrongArgs()
			return
		}
		id := string(r.args[2])
		if !fsm.ValidNodeID(id) {
			r.w.Error("ERR invalid node ID")
			return
		}
		ctx := node.WithOrigin(r.c.ctx, id)
		r.c.hop.origin.Store(&ctx)
		r.w.SimpleString("OK")
	case "members":
		if len(r.args) > 2 {
			wrongArgs()
			return
		}
		members, err := admin.Members()
		if err != nil {
			r.replyError(err)
			return
		}
		r.w.Array(len(members))
		for _, m := range members {
			r.writeFields(m.Fields())
		}
	case "add":
		if len(r.args) < 4 {
			wrongArgs()
			return
		}
		voter, client := true, ""
		for j := 4; j < len(r.args); j++ {
			switch {
			case is(r.args[j], "nonvoter"):
				voter = false
			case is(r.args[j], "client") && j+1 < len(r.args):
				client = string(r.args[j+1])
				j++
			default:
				r.w.Error(errSyntax)
				return
			}
		}
		index, err := admin.AddServer(r.c.ctx, string(r.args[2]), string(r.args[3]), client, voter)
		if err != nil {
			r.replyError(err)
			return
		}
		r.w.Int(int64(index))
	case "promote", "remove":
		force := sub == "remove" && len(r.args) == 4 && is(r.args[3], "force")
		if sub == "remove" && len(r.args) == 4 && !force {
			r.w.Error(errSyntax)
			return
		}
		if len(r.args) != 3 && !force {
			wrongArgs()
			return
		}
		var err error
		if sub == "promote" {
			err = admin.Promote(r.c.ctx, string(r.args[2]))
		} else {
			err = admin.RemoveServer(r.c.ctx, string(r.args[2]), force)
		}
		if err != nil {
			r.replyError(err)
			return
		}
		r.w.SimpleString("OK")
	case "transfer":
		if len(r.args) > 3 {
			wrongArgs()
			return
		}
		id := ""
		if len(r.args) == 3 {
			id = string(r.args[2])
		}
		if err := admin.Transfer(id); err != nil {
			r.replyError(err)
			return
		}
		r.w.SimpleString("OK")
	case "announce":
		if len(r.args) != 5 {
			wrongArgs()
			return
		}
		// Who may announce is the ACL's (RAFT is @admin: the peer user); what is announced is
		// the leader's to verify: raftnode's Announce checks the ID and raft address against
		// the committed configuration and calls the client address back, which must answer
		// as that member of this cluster (over client-port TLS, with a member's certificate).
		if err := admin.Announce(r.c.ctx, string(r.args[2]), string(r.args[3]), string(r.args[4])); err != nil {
			r.replyError(err)
			return
		}
		r.w.SimpleString("OK")
	case "snapshot":
		if len(r.args) > 3 {
			wrongArgs()
			return
		}
		if why := r.s.snapshots.enter("RAFT SNAPSHOT"); why != "" {
			r.w.Error(why)
			return
		}
		err := admin.Snapshot()
		r.s.snapshots.leave()
		if err != nil {
			r.replyError(err)
			return
		}
		r.w.SimpleString("OK")
	case "pubsub":
		raftPubSub(r)
	case "stats":
		if len(r.args) > 3 {
			wrongArgs()
			return
		}
		fields := append(raftInfo(leaderOf.Stats()), r.s.groupsFields()...)
		r.w.Map(len(fields))
		for _, f := range fields {
			r.w.BulkString(f.name)
			r.w.BulkString(f.value)
		}
	case "member":
		if len(r.args) != 3 {
			wrongArgs()
			return
		}
		r.writeFields(admin.Membership(string(r.args[2])).Fields())
	case "backup":
		if len(r.args) != 2 {
			wrongArgs()
			return
		}
		if why := r.s.backups.enter("RAFT BACKUP"); why != "" {
			r.w.Error(why)
			return
		}
		data, err := admin.Backup(r.c.ctx)
		r.s.backups.leave()
		if err != nil {
			r.replyError(err)
			return
		}
		r.w.Bulk(data)
	case "readindex":
		if len(r.args) > 3 {
			wrongArgs()
			return
		}
		index, err := admin.ReadIndex(r.c.ctx)
		if err != nil {
			r.replyError(err)
			return
		}
		r.w.Int(int64(index))
	case "groups":
		if len(r.args) != 3 {
			wrongArgs()
			return
		}
		r.planGroups()
	case "digest":
		if len(r.args) > 3 {
			wrongArgs()
			return
		}
		if why := r.s.digests.enter("RAFT DIGEST"); why != "" {
			r.w.Error(why)
			return
		}
		applied, sum := admin.Digest()
		r.s.digests.leave()
		r.w.Array(2)
		r.w.Int(int64(applied))
		r.w.BulkString(sum)
	default:
		r.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, r.args[1], 128)) + "'. Try RAFT MEMBERS, MEMBER, ADD, PROMOTE, REMOVE, TRANSFER, SNAPSHOT, STATS, DIGEST, BACKUP, MOVESLOTS or GROUPS.")
	}
}

// planGroups is RAFT GROUPS n, on group 0's leader: it commits a plan to run n raft groups
// (docs/groups.md, "From one group to several"); every node runs them from its next start.
func (r *request) planGroups() {
	running := max(len(r.s.groups), 1)
	n, ok := parseInt(r.args[2])
	if !ok || n < 2 || n > MaxGroups {
		r.w.Error(fmt.Sprintf("ERR RAFT GROUPS: want a number of raft groups from 2 to %d", MaxGroups))
		return
	}
	if _, err := r.s.admin.PlanGroups(r.c.ctx, fsm.GroupsPlan{Groups: int(n), Layout: max(r.s.layout, 1)}, running); err != nil {
		r.replyError(err)
		return
	}
	r.w.SimpleString("OK")
}

// DEBUG CLOCK-SHIFT ms: move this node's lease clock by ms (negative: back), for fault tests.
// Only a node started with --test-clock accepts it.
func cmdDebug(r *request) {
	if r.s.cfg.ShiftClock == nil {
		r.w.Error("ERR DEBUG is disabled: start the node with --test-clock to use DEBUG CLOCK-SHIFT (tests only)")
		return
	}
	if !is(r.args[1], "clock-shift") || len(r.args) != 3 {
		r.w.Error("ERR the only DEBUG subcommand is CLOCK-SHIFT ms")
		return
	}
	ms, ok := parseInt(r.args[2])
	if !ok || ms > 365*24*3600*1000 || ms < -365*24*3600*1000 {
		r.w.Error(errNotInt)
		return
	}
	total := r.s.cfg.ShiftClock(time.Duration(ms) * time.Millisecond)
	r.w.Int(total.Milliseconds())
}

// groupOptionAfter is how many arguments of its own each subcommand taking GROUP g has before it.
var groupOptionAfter = map[string]int{"members": 0, "member": 1, "promote": 1, "remove": 1, "add": 2}

// groupOption finds the raft group a RAFT subcommand names: the last argument of READINDEX,
// SNAPSHOT, DIGEST and STATS (RAFT SNAPSHOT 2), or a trailing GROUP g of MEMBERS, MEMBER, ADD,
// PROMOTE and REMOVE (RAFT ADD n4 addr GROUP 2 is one group's step of the change RAFT ADD makes in
// every group: cluster.GroupsAdmin). group is -1 when it names none; named is how many
// arguments the option took, which the command drops once it is not forwarded. ok is false
// when it names a group this node does not run (the error is written).
func (r *request) groupOption(sub string) (group, named int, ok bool) {
	var arg []byte
	switch sub {
	case "readindex", "snapshot", "digest", "stats":
		if len(r.args) != 3 {
			return -1, 0, true
		}
		arg = r.args[2]
	case "members", "member", "add", "promote", "remove":
		// GROUP g after the subcommand's own arguments (MEMBERS none, MEMBER, PROMOTE and
		// REMOVE an ID, ADD an ID and an address): a node named "group" stays a node.
		n, own := len(r.args), groupOptionAfter[sub]
		if n < 2+own+2 || !is(r.args[n-2], "group") {
			return -1, 0, true
		}
		arg, named = r.args[n-1], 2
	default:
		return -1, 0, true
	}
	runs := max(len(r.s.groupAdmins), 1)
	g, err := strconv.Atoi(string(arg))
	if err != nil || g < 0 || g >= runs {
		r.w.Error(fmt.Sprintf("ERR RAFT %s: no raft group %q on this node (it runs %d)", strings.ToUpper(sub), appendSanitized(nil, arg, 32), runs))
		return -1, 0, false
	}
	return g, named, true
}

// groupsFields are RAFT STATS's lines about the node's raft groups: how many it runs, how many
// its cluster was created with, and how many its groups plan asks for (node.PeerState).
func (s *Server) groupsFields() []infoField {
	runs := max(len(s.groups), 1)
	layout, planned := s.layout, runs
	if layout == 0 {
		layout = runs
	}
	if p, ok := s.node.(GroupsPlanner); ok {
		if plan, ok := p.GroupsPlan(); ok {
			layout, planned = plan.Layout, max(plan.Groups, runs)
		}
	}
	return []infoField{
		{node.FieldRaftGroups, strconv.Itoa(runs)},
		{node.FieldRaftGroupsLayout, strconv.Itoa(layout)},
		{node.FieldRaftGroupsPlanned, strconv.Itoa(planned)},
	}
}
