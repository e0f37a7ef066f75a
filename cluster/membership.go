package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
)

// This node's place in the cluster, kept by one goroutine (runMembership) and the FSM's
// configuration hook:
//   - join: a node started with Config.Join adds itself through any member's client port (RAFT
//     ADD, forwarded to the leader), as a non-voter the leader promotes once it has caught up
//     (quorum.go); the joiner asks for the promotion too (RAFT PROMOTE, refused until it is
//     caught up), in case the leader changed meanwhile;
//   - announce: the one way a client address gets into the replicated member table. The ready
//     leader records its own; a follower asks the leader directly (RAFT ANNOUNCE id clientaddr
//     raftaddr), which accepts it only for a member of the configuration under its own raft
//     address, once the client address, called back, answers as that member of this cluster
//     (Announce, member_announce.go). It runs when raft observes a leader change, when this node
//     becomes the ready leader, and when the member table changes, never on a timer unless a
//     try failed;
//   - removal: only a committed configuration without this node closes Removed (removal.go):
//     one it applies (raft hands every one to the FSM's ApplyBatch, noteConfiguration) unless a
//     later one in its log lists it again (a node added afresh after its removal replays the
//     removal when it restarts), or the newest one in its log once no leader contacts it
//     (droppedByLatestConfiguration: a removed follower seldom learns the commit) and the ready
//     leader confirms that its committed configuration lacks this node (RAFT MEMBER). A
//     leader's word alone never does;
//   - removal while away: a node removed while down or cut off never receives that
//     configuration (the leader stops replicating to it). So a member that has seen no leader
//     for leaderlessBeforeAsking asks the members it knows which of them is the ready leader,
//     and asks that one whether it is still a member; when it is not, it says so loudly, with
//     what to do, and keeps running (it cannot win an election: the members refuse its votes);
//   - promotion: the ready leader promotes the non-voters added as voters once they are
//     caught up (promotePending);
//   - leftovers: the ready leader forgets the client addresses of nodes the configuration no
//     longer lists (forgetNonMembers), so the member table holds members only;
//   - hints: the members' client addresses, kept in the stable store, so that a restarted node
//     can ask them before its log replay (which needs a leader) restores the member table.

const (
	// announceRetry is how long a failed announce waits before the next try.
	announceRetry = time.Second
	// joinRetry is how long a failed RAFT ADD or PROMOTE waits before the next try.
	joinRetry = time.Second
	// leaderlessBeforeAsking is how long a member goes without a leader before it asks whether
	// it was removed while away; membershipCheckEvery is how often it asks again after that.
	leaderlessBeforeAsking = 6 * time.Second
	membershipCheckEvery   = 2 * time.Second
	// removedQuiet is how long a member whose newest raft configuration lacks it must go without
	// a leader before it takes that as its removal (droppedByLatestConfiguration).
	removedQuiet = 3 * time.Second
)

// memberHintsKey is the stable-store key of the member hints (a JSON object id -> client
// address). raft's own keys (CurrentTerm, LastVoteTerm, LastVoteCand) never collide with it.
var memberHintsKey = []byte("raftlock/member-hints")

// identityKey is the stable-store key of this node's identity (identity.go: a JSON object of
// the node ID its data dir was created with and its cluster's ID).
var identityKey = []byte("raftlock/identity")

// wakeMembership tells the membership goroutine that something it watches changed.
func (n *Member) wakeMembership() {
	select {
	case n.memberWake <- struct{}{}:
	default:
	}
}

// noteConfiguration is told every committed configuration, in log order (ApplyBatch hands it
// raft's LogConfiguration entries). It runs on raft's FSM goroutine, with no lock held: it only
// compares and signals.
func (n *Member) noteConfiguration(index uint64, c raft.Configuration) {
	n.committedConf.set(index, c.Servers)
	if t, ok := n.trans.(*Transport); ok && t.group != nil {
		t.group.mux.forgetPeers()
	}
	in := n.listedIn(c)
	// A joining node replays older configurations without itself, so only a node that has been
	// in one can find itself removed. A node that restarts with state was a member unless its
	// identity says it was never listed (start); the first configuration that lists it clears
	// that, once.
	if in && !n.member.Swap(true) {
		if err := n.rememberIdentity(""); err != nil {
			n.log.Warn("recording that a configuration lists this node failed; a restart before the next try would not know it",
				"err", err)
		}
	}
	if n.member.Load() && !in {
		if n.listedByLatestConfiguration() {
			// A node removed and added again afresh replays its removal when it restarts: the
			// snapshot it joined with predates the removal, and the log it keeps after that
			// snapshot holds the removal and, later, its own addition.
			n.log.Info("a committed configuration without this node is superseded by a later one in its log that "+
				"lists it again: still a member", "index", index)
		} else {
			n.markRemoved("removed from the cluster: a committed configuration no longer lists this node", "index", index)
		}
	}
	n.wakeMembership()
}

// listedByLatestConfiguration reports whether the newest configuration in this node's log lists
// it: a configuration applied without it is then an old one, superseded by a later entry that
// adds it again. Should that entry never commit, a later leader either replicates to this node
// (which is then in that leader's configuration) or never contacts it again: the node, without a
// leader, then asks whether it was removed while away and says so (removedByLeader).
func (n *Member) listedByLatestConfiguration() bool {
	r := n.startedRaft()
	if r == nil {
		// raft applies nothing before a leader has told it the commit index, in practice long
		// after NewRaft returned. Should it ever, this entry alone does not remove the node:
		// droppedByLatestConfiguration catches a removal the newest configuration shows.
		return true
	}
	// hashicorp/raft's GetConfiguration (v1.7.2) reads the copy of the latest configuration
	// that raft keeps in an atomic value. Older releases asked raft's main loop, which may be
	// waiting for this very goroutine (the FSM's): on one of those this call could deadlock.
	c := r.GetConfiguration().Configuration()
	return n.listedIn(c)
}

// listedIn reports whether c lists this node.
func (n *Member) listedIn(c raft.Configuration) bool {
	return slices.ContainsFunc(c.Servers, func(s raft.Server) bool { return s.ID == raft.ServerID(n.cfg.Core.ID) })
}

// droppedByLatestConfiguration reports whether this node, once a member, is missing from the
// newest configuration in its log. A leader that removes a follower replicates the change to it
// but then stops replicating, so the follower rarely learns that it committed and never applies
// it. The entry came over raft from a leader, not from a client, but it may never have committed
// (its leader lost quorum or crashed first): after removedQuiet without a leader, the node asks
// the ready leader whether the removal committed (removalConfirmed) and leaves only if so.
func (n *Member) droppedByLatestConfiguration() bool {
	if !n.member.Load() || time.Since(n.raft().LastContact()) < removedQuiet {
		return false
	}
	c, err := n.configuration()
	if err != nil || len(c.Servers) == 0 {
		return false
	}
	return !n.listedIn(c)
}

// markRemoved stops this node from serving and closes Removed, once; msg says how it learnt.
// The member of a raft group other than 0 only says so and counts as no member again: a node
// leaves its cluster when group 0 removes it (the last group a removal reaches,
// GroupsAdmin.RemoveServer), and a removal that reached some groups only is undone or finished
// by repeating it, a RAFT PROMOTE adding it back where it went, so its replica of this group
// must stay able to serve.
func (n *Member) markRemoved(msg string, args ...any) {
	if n.closing.Load() {
		return
	}
	if n.cfg.Core.Group > 0 {
		if n.member.Swap(false) {
			n.log.Warn(msg+"; still a member of raft group 0: RAFT REMOVE finishes the removal, RAFT PROMOTE undoes it", args...)
		}
		return
	}
	n.removeOnce.Do(func() {
		if core := n.core.Load(); core != nil {
			core.Retire()
		}
		n.log.Warn(msg, args...)
		close(n.removed)
	})
}

// diskFailed reports whether the core stopped raft because this node's disk failed: it is still
// a member, and its process stays up to say why (INFO, /readyz, replies) until an operator
// restarts it (docs/disk-faults.md).
func (n *Member) diskFailed() bool {
	core := n.core.Load()
	if core == nil {
		return false
	}
	var df node.DiskFault
	return errors.As(core.DiskFault(), &df) && !df.DiskFull()
}

// Removed is closed when this node learns it is no longer a member: from a committed
// configuration, or (removed while away) from the leader.
func (n *Member) Removed() <-chan struct{} { return n.removed }

// runMembership keeps this node's place in the cluster (see the top of this file).
func (n *Member) runMembership() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // ends with this function at the latest
		select {
		case <-n.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	observations := make(chan raft.Observation, 16)
	obs := raft.NewObserver(observations, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState, raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	n.raft().RegisterObserver(obs)
	defer n.raft().DeregisterObserver(obs)
	// Observations are handled on their own goroutine: the loop below may be in a call to
	// another member, and requests waiting for a leader must hear of one at once.
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for {
			select {
			case <-ctx.Done():
				return
			case o := <-observations:
				switch d := o.Data.(type) {
				case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
					n.peers.heartbeat(d) // the leader's view of which voters it reaches
					continue
				case raft.LeaderObservation:
					n.peers.leaderChanged()
				case raft.RaftState:
					if d == raft.Shutdown && !n.diskFailed() {
						n.markRemoved("removed from the cluster: raft stopped on its own")
					}
				}
				n.wakeMembership()
			}
		}
	}()
	defer func() { cancel(); <-observed }()

	if n.cfg.Join != "" && !n.hadState {
		n.join(ctx)
	}
	hints := n.loadMemberHints()
	retry := time.NewTimer(0) // the first look at the state happens at once
	defer retry.Stop()
	var leaderless time.Time
	warned := false            // told the operator the leader does not list this node, this leaderless spell
	unconfirmedWarned := false // told the operator its log drops it but no leader confirms it
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.memberWake:
		case <-retry.C:
		}
		hints = n.saveMemberHints(hints)
		next := time.Duration(0)
		if !n.announce(ctx) || !n.upgradeFormat(ctx, hints) || !n.ensureClusterID(ctx) {
			next = announceRetry
		}
		if err := n.forgetNonMembers(ctx); err != nil {
			n.log.Warn("forgetting the addresses of former members failed", "err", err)
			next = announceRetry
		}
		if n.promotePending(ctx) && (next == 0 || joinRetry < next) {
			next = joinRetry
		}
		// Removal while away: only a member that sees no leader asks.
		if id, _ := n.raft().LeaderWithID(); id != "" || !n.member.Load() {
			leaderless, warned, unconfirmedWarned = time.Time{}, false, false
		} else {
			if leaderless.IsZero() {
				leaderless = time.Now()
			}
			if quiet := time.Since(leaderless); quiet >= removedQuiet && n.droppedByLatestConfiguration() {
				if leader, ok := n.removalConfirmed(ctx, hints); ok {
					n.markRemoved("removed from the cluster: the newest configuration the leader replicated to this node over "+
						"raft no longer lists it, and the leader confirms that the removal committed",
						"leader", leader, "quiet", quiet.Round(time.Millisecond))
					if n.cfg.Core.Group == 0 {
						return
					}
					continue
				}
				if !unconfirmedWarned {
					n.log.Warn("the newest configuration in this node's log no longer lists it, but no ready leader confirms "+
						"that the removal committed: it keeps running and asks again (a removal that never commits, "+
						"its leader lost, does not remove a node)", "quiet", quiet.Round(time.Millisecond))
					unconfirmedWarned = true
				}
			}
			wait := leaderlessBeforeAsking - time.Since(leaderless)
			if q := removedQuiet - time.Since(leaderless); q > 0 && q < wait {
				wait = q
			}
			if wait <= 0 {
				if leader, removed := n.removedByLeader(ctx, hints); removed && !warned {
					// Only a committed configuration removes a node: this answer came over RESP
					// from whoever says it leads, so it is reported, not obeyed.
					n.log.Warn("the member that says it is the leader does not list this node: it was probably removed "+
						"while away. It keeps running, without a leader (only a committed configuration removes a node). "+
						"If it was removed, stop it, empty its --dir and start it with --join to add it again",
						"leader", leader)
					warned = true
				}
				wait = membershipCheckEvery
			}
			if next == 0 || wait < next {
				next = wait
			}
		}
		if next > 0 {
			retry.Reset(next)
		}
	}
}

// announce makes sure the member table holds this node's client address. It reports false when
// it should be tried again later (the leader could not be reached).
func (n *Member) announce(ctx context.Context) bool {
	want := n.cfg.ClientAddr
	if want == "" {
		return true
	}
	if addr, ok := n.MemberAddr(n.cfg.Core.ID); ok && addr == want {
		return true
	}
	if n.isLeader() {
		if err := n.SetMemberAddr(ctx, n.cfg.Core.ID, want); err != nil {
			n.log.Warn("recording own client address failed", "err", err)
			return false
		}
		return true
	}
	leaderID, leaderAddr := n.LeaderClient()
	if leaderID == "" || leaderAddr == "" {
		return true // a leader, or its address, is still to come: that change wakes us
	}
	if err := n.peerAPI.Announce(ctx, leaderAddr, n.cfg.Core.ID, want, n.cfg.RaftAddr); err != nil {
		n.log.Warn("telling the leader our client address failed", "leader", leaderID, "err", err)
		return false
	}
	n.log.Info("announced client address", "addr", want, "leader", leaderID)
	return true
}

// join adds this new node to the cluster that Config.Join belongs to: as a non-voter, which
// catches up from the leader (by snapshot if the log was compacted) and is then promoted to
// voter by the leader. Once it has applied the configuration change that added it, it asks for
// the promotion itself too until it is a voter (a new leader does not know it should).
func (n *Member) join(ctx context.Context) {
	via := n.cfg.Join
	var index uint64
	for {
		err := n.runsClusterGroups(ctx, via)
		if err == nil {
			if index, err = n.peerAPI.Add(ctx, via, n.cfg.Core.ID, n.cfg.RaftAddr); err == nil {
				break
			}
		}
		n.log.Warn("join: adding this node failed; retrying", "via", via, "err", err)
		if !sleepCtx(ctx, joinRetry) {
			return
		}
	}
	n.log.Info("join: added as a non-voter; catching up", "via", via, "index", index)
	// raft offers no event for "applied up to": a short poll, for the join only.
	for n.raft().AppliedIndex() < index {
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
	for {
		// The leader promotes a member it can ask on its client address: announce it first
		// (the loop of runMembership, which announces otherwise, starts after the join).
		n.announce(ctx)
		err := n.peerAPI.Promote(ctx, via, n.cfg.Core.ID)
		if err == nil {
			n.log.Info("join: promoted to voter")
			return
		}
		n.log.Info("join: not promoted yet; retrying", "via", via, "err", err)
		if !sleepCtx(ctx, joinRetry) {
			return
		}
	}
}

// runsClusterGroups refuses to join a cluster that runs or plans more raft groups than this
// node runs: it learned their number when it first started (cmd/raftlock), and a RAFT GROUPS
// committed since would add it to groups it does not run.
func (n *Member) runsClusterGroups(ctx context.Context, via string) error {
	st, err := n.peerAPI.State(ctx, via)
	if err != nil {
		return err
	}
	if want, runs := max(st.Groups, st.Planned), max(n.cfg.Core.Groups, 1); want > runs {
		return fmt.Errorf("the cluster runs or plans %d raft groups and this node runs %d: stop it, empty its --dir and start it again with --join, which asks the number again", want, runs)
	}
	return nil
}

// removedByLeader finds, among the members this node knows, one that says it is the ready
// leader, and reports whether that leader's member list lacks this node. Only a leader's answer
// counts: its configuration is the newest, so a node that was just added is never told it is
// gone.
func (n *Member) removedByLeader(ctx context.Context, hints map[string]string) (string, bool) {
	removed := false
	leader := n.askReadyLeader(ctx, hints, func(addr string) bool {
		if st, err := n.peerAPI.StateOf(ctx, addr, n.cfg.Core.Group); err != nil || !st.ReadyLeader() {
			return false
		}
		members, err := n.peerAPI.Members(ctx, addr, n.cfg.Core.Group)
		if err != nil || len(members) == 0 {
			return true // the leader, but no usable answer: ask again later
		}
		removed = !slices.ContainsFunc(members, func(m node.Member) bool { return m.ID == n.cfg.Core.ID })
		return true
	})
	return leader, removed
}

// askReadyLeader calls ask for the members of this node's newest configuration other than
// itself, at the client addresses it knows (the applied member table, else the hints), until
// ask reports that the member at addr is the ready leader, and returns that member's ID ("" if
// none was).
func (n *Member) askReadyLeader(ctx context.Context, hints map[string]string, ask func(addr string) bool) string {
	members, err := n.Members()
	if err != nil {
		return ""
	}
	for _, m := range members {
		addr := m.ClientAddr
		if addr == "" {
			// A restarted node applies its log only once a leader tells it what is committed:
			// until then its member table is its last snapshot's.
			addr = hints[m.ID]
		}
		if m.ID == n.cfg.Core.ID || addr == "" {
			continue
		}
		if ctx.Err() == nil && ask(addr) {
			return m.ID
		}
	}
	return ""
}

// loadMemberHints reads the member hints from the stable store (none if there are none, or if
// they cannot be read: they are only hints).
func (n *Member) loadMemberHints() map[string]string {
	hints := map[string]string{}
	b, err := n.stable.Get(memberHintsKey)
	if err != nil || len(b) == 0 {
		return hints
	}
	if err := json.Unmarshal(b, &hints); err != nil {
		n.log.Warn("member hints unreadable; ignoring them", "err", err)
		return map[string]string{}
	}
	n.hints.Store(int64(len(hints)))
	return hints
}

// saveMemberHints writes the members' client addresses to the stable store when they differ
// from known, and returns what is now stored.
func (n *Member) saveMemberHints(known map[string]string) map[string]string {
	members, err := n.Members()
	if err != nil {
		return known
	}
	addrs := map[string]string{}
	for _, m := range members {
		if m.ClientAddr != "" {
			addrs[m.ID] = m.ClientAddr
		}
	}
	if len(addrs) == 0 || maps.Equal(addrs, known) {
		return known
	}
	b, _ := json.Marshal(addrs)
	if err := n.stable.Set(memberHintsKey, b); err != nil {
		n.log.Warn("remembering the members' client addresses failed", "err", err)
		return known
	}
	n.hints.Store(int64(len(addrs)))
	return addrs
}

// sleepCtx waits d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
