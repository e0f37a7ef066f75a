package raftnode

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Members returns the current raft configuration with each member's client address.
func (n *Node) Members() ([]node.Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raft configuration: %w", err)
	}
	_, leaderID := n.raft.LeaderWithID()
	n.mu.Lock()
	addrs := n.mu.machine.Members()
	n.mu.Unlock()
	var out []node.Member
	for _, s := range f.Configuration().Servers {
		out = append(out, node.Member{
			ID:         string(s.ID),
			RaftAddr:   string(s.Address),
			ClientAddr: addrs[string(s.ID)],
			Voter:      s.Suffrage == raft.Voter,
			Leader:     s.ID == leaderID,
		})
	}
	slices.SortFunc(out, func(a, b node.Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out, nil
}

// LeaderClient returns the leader's ID and the client address it advertised; empty when no
// leader is known or it has not announced an address yet.
func (n *Node) LeaderClient() (id, clientAddr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	addr, _ := n.mu.machine.Member(string(lid))
	return string(lid), addr
}

// MemberAddr returns the client address node id advertised, from this node's applied table.
func (n *Node) MemberAddr(id string) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.machine.Member(id)
}

// SetMemberAddr records (through the log) that node id serves clients at addr. The leader
// calls it for itself after each election; followers reach it through ANNOUNCE.
func (n *Node) SetMemberAddr(ctx context.Context, id, addr string) error {
	key := []byte(id)
	_, err := n.Exec(ctx, [][]byte{key}, func(v node.View) []fsm.Command {
		if cur, ok := n.mu.machine.Member(id); ok && cur == addr {
			return nil
		}
		return []fsm.Command{{Kind: fsm.KindSetMember, Key: key, Owner: []byte(addr)}}
	}, nil)
	return err
}

// AddServer adds a member: as a non-voter that catches up first (then Promote), or directly as
// a voter. It returns the log index of the configuration change: a joining node that has
// applied it has everything committed before its arrival.
func (n *Node) AddServer(ctx context.Context, id, raftAddr, clientAddr string, voter bool) (uint64, error) {
	if !n.ready.Load() {
		return 0, n.notLeader()
	}
	var f raft.IndexFuture
	if voter {
		f = n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.ApplyTimeout)
	} else {
		f = n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.ApplyTimeout)
	}
	if err := f.Error(); err != nil {
		return 0, n.applyError(err)
	}
	n.log.Info("added member", "member", id, "raft", raftAddr, "voter", voter)
	if clientAddr != "" {
		if err := n.SetMemberAddr(ctx, id, clientAddr); err != nil {
			return 0, err
		}
	}
	return f.Index(), nil
}

// Promote makes a non-voter a voter.
func (n *Node) Promote(ctx context.Context, id string) error {
	members, err := n.Members()
	if err != nil {
		return err
	}
	for _, m := range members {
		if m.ID != id {
			continue
		}
		if m.Voter {
			return nil
		}
		_, err := n.AddServer(ctx, id, m.RaftAddr, "", true)
		return err
	}
	return fmt.Errorf("%w: %s", node.ErrNoSuchMember, id)
}

// RemoveServer removes a member and forgets its client address. A removed node shuts its raft
// down when it learns of the removal (raft's ShutdownOnRemove) and stops serving.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	if !n.ready.Load() {
		return n.notLeader()
	}
	members, err := n.Members()
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(members, func(m node.Member) bool { return m.ID == id }) {
		return fmt.Errorf("%w: %s", node.ErrNoSuchMember, id)
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return n.applyError(err)
	}
	n.log.Info("removed member", "member", id)
	if id == n.cfg.ID {
		return nil // we are no longer in the cluster: the new leader forgets our address
	}
	key := []byte(id)
	_, err = n.Exec(ctx, [][]byte{key}, func(node.View) []fsm.Command {
		return []fsm.Command{{Kind: fsm.KindRemoveMember, Key: key}}
	}, nil)
	return err
}

// Transfer hands leadership to id, or to the most caught-up voter when id is empty.
func (n *Node) Transfer(id string) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	var f raft.Future
	if id == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		members, err := n.Members()
		if err != nil {
			return err
		}
		i := slices.IndexFunc(members, func(m node.Member) bool { return m.ID == id })
		if i < 0 {
			return fmt.Errorf("%w: %s", node.ErrNoSuchMember, id)
		}
		f = n.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(members[i].RaftAddr))
	}
	if err := f.Error(); err != nil {
		return fmt.Errorf("leadership transfer: %w", err)
	}
	return nil
}

// Removed is closed when raft stopped on its own: this node was removed from the cluster.
func (n *Node) Removed() <-chan struct{} { return n.removed }

// watchRemoval notices raft shutting itself down after this node's removal.
func (n *Node) watchRemoval() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	// member: this node has been in a configuration. A joining node replays older ones without
	// itself, so only a node that was a member can find itself removed. A node that restarts
	// with state was a member (or crashed mid-join, before it was added: it then exits too and
	// must be started afresh with --join).
	member := n.hadState
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			removed := false
			if f := n.raft.GetConfiguration(); f.Error() == nil {
				in := slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return s.ID == raft.ServerID(n.cfg.ID) })
				member = member || in
				// Only a committed (here: applied) configuration counts: a removal the next
				// leader truncates must not stop us.
				removed = member && !in && f.Index() <= n.raft.AppliedIndex()
			}
			if (removed || n.raft.State() == raft.Shutdown) && !n.closing.Load() {
				n.ready.Store(false)
				n.log.Warn("raft stopped: this node was removed from the cluster")
				close(n.removed)
				return
			}
		}
	}
}
