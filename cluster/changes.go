package cluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// MemberAddr returns the client address node id advertised, from this node's applied table.
func (n *Member) MemberAddr(id string) (addr string, ok bool) {
	if book := n.cfg.AddressBook; book != nil {
		return book.MemberAddr(id)
	}
	n.core.Load().ReadTable(func(m *fsm.Machine) { addr, ok = m.Member(id) })
	return addr, ok
}

// SetMemberAddr records (through the log) that node id serves clients at addr. The leader
// calls it for itself after each election; followers reach it through ANNOUNCE. It proposes
// nothing past the bounds of the member table: an address longer than fsm.MaxMemberAddr, or a
// new member's once Config.MaxMembers have one.
func (n *Member) SetMemberAddr(ctx context.Context, id, addr string) error {
	if err := checkMemberAddr(addr); err != nil {
		return err
	}
	n.memberWrites.Lock()
	defer n.memberWrites.Unlock()
	key := []byte(id)
	full := false
	err := n.core.Load().ExecTable(ctx, [][]byte{key}, func(m *fsm.Machine) []fsm.Command {
		cur, ok := m.Member(id)
		full = !ok && m.MemberCount() >= n.cfg.MaxMembers
		if ok && cur == addr || full {
			return nil
		}
		return []fsm.Command{{Kind: fsm.KindSetMember, Key: key, Owner: []byte(addr)}}
	})
	if err == nil && full {
		return n.memberTableFull()
	}
	return err
}

// checkMemberAddr refuses a client address the member table would not take.
func checkMemberAddr(addr string) error {
	if len(addr) > fsm.MaxMemberAddr {
		return fmt.Errorf("%w: a client address of %d bytes (at most %d)", node.ErrMemberTable, len(addr), fsm.MaxMemberAddr)
	}
	return nil
}

func (n *Member) memberTableFull() error {
	return fmt.Errorf("%w: the member table is full (at most %d members)", node.ErrMemberTable, n.cfg.MaxMembers)
}

// forgetNonMembers drops, on the ready leader, the addresses of nodes that the raft
// configuration no longer lists: a leader that removed itself, or a RemoveServer whose
// KindRemoveMember did not commit, leaves them behind. The table is read before the
// configuration, so an address recorded after a member was added is never taken for a
// leftover.
func (n *Member) forgetNonMembers(ctx context.Context) error {
	if !n.isLeader() {
		return nil
	}
	var addrs map[string]string
	n.core.Load().ReadTable(func(m *fsm.Machine) { addrs = m.Members() })
	c, err := n.configuration()
	if err != nil {
		return err
	}
	var gone [][]byte
	for id := range addrs {
		if !slices.ContainsFunc(c.Servers, func(s raft.Server) bool { return string(s.ID) == id }) {
			gone = append(gone, []byte(id))
		}
	}
	if len(gone) == 0 {
		return nil
	}
	_, err = n.core.Load().Exec(ctx, gone, func(node.View) []fsm.Command {
		cmds := make([]fsm.Command, len(gone))
		for i, id := range gone {
			cmds[i] = fsm.Command{Kind: fsm.KindRemoveMember, Key: id}
		}
		return cmds
	}, nil)
	if err == nil {
		n.log.Info("forgot the client addresses of nodes no longer members", "count", len(gone))
	}
	return err
}

// AddServer adds a member as a non-voter: it counts for no quorum until it has caught up, so
// not even a dead address can take the cluster out of quorum (quorum.go). With voter set it is
// promoted automatically once caught up; without, it stays a non-voter until RAFT PROMOTE. When
// clientAddr is given the node there is asked who it is first, and refused when it names another
// ID or another cluster. It returns the log index of the configuration change: a joining node
// that has applied it has everything committed before its arrival.
func (n *Member) AddServer(ctx context.Context, id, raftAddr, clientAddr string, voter bool) (uint64, error) {
	if !n.isLeader() {
		return 0, n.notLeader()
	}
	n.changes.Lock()
	defer n.changes.Unlock()
	if err := n.plannedGroupsRun(ctx, id); err != nil {
		return 0, err
	}
	if !fsm.ValidNodeID(id) {
		return 0, fmt.Errorf("invalid node ID %q: want 1 to 128 printable characters without spaces", id)
	}
	c, err := n.configuration()
	if err != nil {
		return 0, err
	}
	for _, s := range c.Servers {
		switch {
		case string(s.ID) == id && string(s.Address) != raftAddr:
			// raft would move the member to the new address: a voter's quorum with it.
			return 0, fmt.Errorf("%s is already a member at %s: RAFT REMOVE it first to give it another address", id, s.Address)
		case string(s.ID) != id && string(s.Address) == raftAddr:
			return 0, fmt.Errorf("the raft address %s is member %s's", raftAddr, s.ID)
		case string(s.ID) == id:
			// Already a member at this address (a join retried after a lost reply): done.
			if voter && s.Suffrage != raft.Voter {
				n.peers.wantPromotion(id, time.Now().Add(promoteDeadline))
				n.wakeMembership()
			}
			return n.raft().LastIndex(), nil
		}
	}
	if clientAddr != "" {
		// Refuse what SetMemberAddr would refuse before the member is added.
		if err := checkMemberAddr(clientAddr); err != nil {
			return 0, err
		}
		var full bool
		n.core.Load().ReadTable(func(m *fsm.Machine) { full = m.MemberCount() >= n.cfg.MaxMembers })
		if full {
			return 0, n.memberTableFull()
		}
		if st, err := n.peerAPI.State(ctx, clientAddr); err == nil {
			if st.ID != "" && st.ID != id {
				return 0, fmt.Errorf("%w: the node at %s says it is %q, not %s", node.ErrNotMember, clientAddr, st.ID, id)
			}
			if ours, theirs := n.ClusterID(), st.ClusterID; ours != "" && theirs != "" && ours != theirs {
				return 0, fmt.Errorf("%w: %s at %s is a member of cluster %s, this is cluster %s: "+
					"stop it, empty its --dir and start it with --join to add it here", node.ErrForeignCluster, id, clientAddr, theirs, ours)
			}
			// Even as a non-voter it would be sent entries it cannot read, skip them, and hold a
			// wrong table (which a later promotion would count).
			if ours := n.format(); st.LogFormatMax < ours {
				return 0, fmt.Errorf("%w: %s reads log format %d only, and this cluster writes format %d: upgrade it to a binary that reads format %d",
					node.ErrOlderBinary, id, st.LogFormatMax, ours, ours)
			}
		}
	}
	f := n.raft().AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.Core.ApplyTimeout)
	if err := n.waitFuture(f); err != nil {
		return 0, n.applyError(err)
	}
	n.log.Info("added member as a non-voter", "member", id, "raft", raftAddr, "promote_when_caught_up", voter)
	if voter {
		n.peers.wantPromotion(id, time.Now().Add(promoteDeadline))
		n.wakeMembership()
	}
	if clientAddr != "" {
		if err := n.SetMemberAddr(ctx, id, clientAddr); err != nil {
			return 0, err
		}
	}
	return f.Index(), nil
}

// Promote makes a non-voter a voter, once it is caught up (caughtUp) and the voters this leader
// reaches stay a quorum (checkAddVoter).
func (n *Member) Promote(ctx context.Context, id string) error {
	if !n.isLeader() {
		return n.notLeader()
	}
	n.changes.Lock()
	defer n.changes.Unlock()
	if err := n.plannedGroupsRun(ctx, id); err != nil {
		return err
	}
	c, err := n.configuration()
	if err != nil {
		return err
	}
	for _, s := range c.Servers {
		if string(s.ID) != id {
			continue
		}
		if s.Suffrage == raft.Voter {
			n.peers.promoted(id)
			return nil
		}
		if err := n.caughtUp(ctx, id); err != nil {
			return err
		}
		if err := n.readsOurFormat(ctx, id); err != nil {
			return err
		}
		if err := n.checkAddVoter(c, id); err != nil {
			return err
		}
		if err := n.waitFuture(n.raft().AddVoter(s.ID, s.Address, 0, n.cfg.Core.ApplyTimeout)); err != nil {
			return n.applyError(err)
		}
		n.peers.promoted(id)
		n.log.Info("promoted member to voter", "member", id)
		return nil
	}
	return fmt.Errorf("%w: %s", node.ErrNoSuchMember, id)
}

// RemoveServer removes a member and forgets its client address, unless the voters left would
// not be a reachable quorum, or it is a voter the leader reaches and force is not set
// (checkRemove). A removed node stops serving when it applies the configuration without itself
// (Removed).
func (n *Member) RemoveServer(ctx context.Context, id string, force bool) error {
	if !n.isLeader() {
		return n.notLeader()
	}
	n.changes.Lock()
	defer n.changes.Unlock()
	if err := n.plannedGroupsRun(ctx, id); err != nil {
		return err
	}
	c, err := n.configuration()
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(c.Servers, func(s raft.Server) bool { return string(s.ID) == id }) {
		return fmt.Errorf("%w: %s", node.ErrNoSuchMember, id)
	}
	if err := n.checkRemove(c, id, force); err != nil {
		return err
	}
	if err := n.waitFuture(n.raft().RemoveServer(raft.ServerID(id), 0, n.cfg.Core.ApplyTimeout)); err != nil {
		return n.applyError(err)
	}
	n.peers.promoted(id)
	n.log.Info("removed member", "member", id, "force", force)
	if id == n.cfg.Core.ID {
		return nil // we are no longer in the cluster: the new leader forgets our address (forgetNonMembers)
	}
	key := []byte(id)
	_, err = n.core.Load().Exec(ctx, [][]byte{key}, func(node.View) []fsm.Command {
		return []fsm.Command{{Kind: fsm.KindRemoveMember, Key: key}}
	}, nil)
	return err
}

// Announce records member id's client address, on the leader, for a member that tells it
// (RAFT ANNOUNCE): only a member of the committed configuration, under its own raft address,
// whose client address answers as that member of this cluster when called back
// (member_announce.go), and never the leader's own (it records that itself). The caller
// authenticates the peer.
func (n *Member) Announce(ctx context.Context, id, clientAddr, raftAddr string) error {
	if !n.isLeader() {
		return n.notLeader()
	}
	if id == n.cfg.Core.ID {
		return fmt.Errorf("%w: %s is the leader, which records its own client address", node.ErrNotMember, id)
	}
	if _, _, err := net.SplitHostPort(clientAddr); err != nil || len(clientAddr) > 256 {
		return fmt.Errorf("%w: %q is not a host:port client address", node.ErrNotMember, clientAddr)
	}
	c, err := n.configuration()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(c.Servers, func(s raft.Server) bool { return string(s.ID) == id })
	if i < 0 {
		return fmt.Errorf("%w: %q is not in the cluster's configuration", node.ErrNotMember, id)
	}
	if string(c.Servers[i].Address) != raftAddr {
		return fmt.Errorf("%w: member %s's raft address is %s, not %s", node.ErrNotMember, id, c.Servers[i].Address, raftAddr)
	}
	if err := n.verifyAnnounced(ctx, id, clientAddr); err != nil {
		return err
	}
	return n.SetMemberAddr(ctx, id, clientAddr)
}

// Transfer hands leadership to id, or to the most caught-up voter when id is empty.
func (n *Member) Transfer(id string) error {
	if n.raft().State() != raft.Leader {
		return n.notLeader()
	}
	var f raft.Future
	if id == "" {
		f = n.raft().LeadershipTransfer()
	} else {
		members, err := n.Members()
		if err != nil {
			return err
		}
		i := slices.IndexFunc(members, func(m node.Member) bool { return m.ID == id })
		if i < 0 {
			return fmt.Errorf("%w: %s", node.ErrNoSuchMember, id)
		}
		f = n.raft().LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(members[i].RaftAddr))
	}
	if err := n.waitFuture(f); err != nil {
		return fmt.Errorf("leadership transfer: %w", err)
	}
	return nil
}
