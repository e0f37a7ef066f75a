package raftnode

import (
	"fmt"
	"slices"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
)

// Members returns the current raft configuration with each member's client address.
func (n *Replica) Members() ([]node.Member, error) {
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
func (n *Replica) LeaderClient() (id, clientAddr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	addr, _ := n.mu.machine.Member(string(lid))
	return string(lid), addr
}
