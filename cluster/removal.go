package cluster

import (
	"context"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
)

// A node leaves the cluster only on a committed configuration that no longer lists it. It
// learns of one in two ways:
//   - it applies that configuration itself (noteConfiguration): the usual way for a leader that
//     removes itself, and for a follower the leader kept replicating to long enough;
//   - its newest configuration (which came over raft from a leader) drops it, no leader has
//     contacted it since, and the ready leader of the cluster confirms over RESP (RAFT MEMBER,
//     with the peer credentials and TLS the node uses for every call to a member) that its
//     committed configuration does not list it. hashicorp/raft stops replicating to a follower
//     as soon as it appends the configuration that removes it, so the follower seldom learns
//     the commit over raft.
//
// A configuration that drops the node but never commits (its leader lost quorum, or crashed
// before the others had it) is not enough on its own: the node keeps running, says so, and asks
// again. Each node keeps the newest configuration it has seen committed (committedConfig) to
// answer that question for the others.

// committedConfig is the newest configuration this node knows to be committed: the last one it
// applied (raft hands every configuration entry to the FSM once committed) or, before any,
// the one in its newest snapshot. An empty one is never kept: no committed configuration lists
// nobody, and an empty one would count every node as removed.
type committedConfig struct {
	mu      sync.Mutex
	index   uint64
	servers []raft.Server
}

func (c *committedConfig) set(index uint64, servers []raft.Server) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(servers) == 0 || index < c.index {
		return // none, or an older snapshot's: what was applied since is newer
	}
	c.index, c.servers = index, slices.Clone(servers)
}

// len is the number of servers in the configuration.
func (c *committedConfig) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.servers)
}

// get returns the configuration's index and whether id is in it; known is false while this
// node has seen no committed configuration.
func (c *committedConfig) get(id string) (index uint64, member, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	member = slices.ContainsFunc(c.servers, func(s raft.Server) bool { return string(s.ID) == id })
	return c.index, member, len(c.servers) > 0
}

// seedCommittedConfig takes the configuration of the newest snapshot in the store as committed
// (a snapshot covers committed entries only). It runs at start and after each restore: raft
// restores a snapshot's configuration itself and never shows it to the FSM.
func (n *Member) seedCommittedConfig() {
	if n.snapshots == nil {
		return
	}
	metas, err := n.snapshots.List()
	if err != nil || len(metas) == 0 {
		return
	}
	n.committedConf.set(metas[0].ConfigurationIndex, metas[0].Configuration.Servers)
}

// Membership answers RAFT MEMBER id: whether id is in the newest configuration this node
// knows to be committed. Only a ready leader's answer counts (it has applied everything
// committed before its term), and the asking node checks that it is one.
func (n *Member) Membership(id string) node.Membership {
	index, member, known := n.committedConf.get(id)
	return node.Membership{
		LeaderReady: n.isLeader(),
		Known:       known,
		ConfigIndex: index,
		Member:      member,
	}
}

// askMembership asks the node at addr for its Membership of id (RAFT MEMBER). Tests of the
// decision replace it to reach in-memory nodes, which have no client port.
var askMembership = func(ctx context.Context, n *Member, addr, id string) (node.Membership, error) {
	return n.peerAPI.Membership(ctx, addr, id, n.cfg.Core.Group)
}

// removalConfirmed reports whether a ready leader says its committed configuration no longer
// lists this node, and which member said so. It asks the members of this node's newest
// configuration at the client addresses it knows (the member table, else the hints).
func (n *Member) removalConfirmed(ctx context.Context, hints map[string]string) (string, bool) {
	removed := false
	leader := n.askReadyLeader(ctx, hints, func(addr string) bool {
		st, err := askMembership(ctx, n, addr, n.cfg.Core.ID)
		if err != nil || !st.LeaderReady {
			return false
		}
		removed = st.Known && !st.Member
		return true
	})
	return leader, leader != "" && removed
}
